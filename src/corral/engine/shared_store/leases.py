"""The lease sweep: turns whose worker stopped heartbeating are fenced off and rest interrupted "worker lost";
queued turns whose job never reached the job queue are sent again (docs/workers.md#recovery).

Any reconciler runs it (a worker's, a reviewer's laptop's), and only for a project on the
shared PostgreSQL store. Fencing is one compare-and-swap on the lease's epoch, so two hosts
that see the same lost worker interrupt its turn once; the auto-resume that follows queues the
turn again, under the breaker, for another worker.

A ``local`` lease (a turn its host runs on its own) is never swept here: no heartbeat says that host
is gone, and only that host may judge its processes (``shared_store.own_turns``). :func:`survey` tells every
pass which working turns other hosts hold, so its working sweep leaves them alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from msgspec import Struct

from corral.adapters.files import write_atomic
from corral.domain.actors import Actor, Role
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause
from corral.domain.refs import is_plain_id
from corral.domain.status import Status
from corral.domain.team import WORKER_LOST, Lease, LeaseState, lease_lost
from corral.engine.private_state import make_private_dir
from corral.engine.project import Project
from corral.engine.recovery.receipts import interrupt
from corral.engine.runtime import liveness
from corral.engine.runtime.liveness import Observed
from corral.engine.shared_store import job_queue, shipping
from corral.store import Tx

#: Which ended lease this host's copy of the task's shipped files is complete for.
SHIPPED_MARK = "shipped.mark"
#: A queued lease with no job after this long lost its enqueue to a crash: it is sent again.
RESEND_AFTER = timedelta(seconds=5)


class Survey(Struct, frozen=True):
    """Who holds the turns of a reconcile pass: ``away``, the working tasks whose turn another host holds
    (this host's working sweep leaves them alone); ``mine``, this host's own local leases
    (``shared_store.own_turns``)."""

    away: set[str]
    mine: list[Lease]


def survey(
    project: Project, me: str | None, working: Mapping[str, str | None], observed: Observed | None = None
) -> Survey:
    """Which working tasks' turns another host holds, and which local leases this host holds.

    ``working``: each working task's current command. Another host holds a turn queued for the workers
    or claimed by another worker, or one launched on another host (its ``local`` lease, of that very
    command: the host that recorded the turn took it in the same transaction). What the pass sees of them
    goes into ``observed`` (``liveness.away``): queued; what their host shipped, a worker's alive while its
    heartbeat holds its lease, a local turn's while its host reports it, else ``unreported``.
    """
    with project.store.read() as tx:
        active = tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED, LeaseState.LOCAL])
        mine = [lease for lease in active if lease.state is LeaseState.LOCAL and lease.worker_id == me]
        away = [
            lease
            for lease in active
            if lease.task_id in working and lease.elsewhere(me) and lease.holds_turn(working[lease.task_id])
        ]
        if observed is not None and away:
            workers = {w.id: w for w in tx.workers()} if any(lease.claimed for lease in away) else {}
            shipped = tx.live(lease.task_id for lease in away if lease.held)
            now = tx.now()
    if observed is not None:
        for lease in away:
            observed[lease.task_id] = liveness.away(lease, shipped.get(lease.task_id), workers, now)
    return Survey({lease.task_id for lease in away}, mine)


def bring_shipped(project: Project, worker_id: str | None) -> int:
    """This host's copy of what other hosts shipped of their turns (their workers', and their own local
    turns': ``shared_store.shipping``): a running turn's files on every pass, an ended one's once more after it
    ended (its lease let go). The bytes written."""
    written = 0
    # One read transaction for the pass, however many tasks it brings (a transaction each was two more
    # statements a task, on every host's every pass).
    with project.store.read() as tx:
        others = [lease for lease in tx.leases() if lease.worker_id is not None and lease.worker_id != worker_id]
        for lease in others:
            if not is_plain_id(lease.task_id):
                continue  # a row no corral wrote: nothing is written under its name (ProjectPaths would refuse it)
            mark = project.paths.task_dir(lease.task_id) / SHIPPED_MARK
            done = f"{lease.epoch}:{lease.state.value}"
            if lease.state is LeaseState.RELEASED and _read_mark(mark) == done:
                continue
            written += shipping.materialize_in(project, tx, lease.task_id)
            if lease.state is LeaseState.RELEASED:
                make_private_dir(mark.parent)
                write_atomic(mark, done.encode(), durable=False)  # lost, it costs one more look
    return written


def _read_mark(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def sweep(project: Project) -> list[str]:
    """Fence off the leases of lost workers, interrupt their turns; the ids of the tasks interrupted."""
    with project.store.read() as tx:
        active = tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED])
        workers = {w.id: w for w in tx.workers()} if active else {}
        now = tx.now()
    ended: list[str] = []
    lost_jobs: list[int] = []
    for lease in active:
        if lease.state is LeaseState.QUEUED:
            if lease.job_id is None and lease.queued_at is not None and now - lease.queued_at > RESEND_AFTER:
                _resend(project, lease)
            continue
        if not lease_lost(lease, workers, now):
            continue
        worker = workers.get(lease.worker_id or "")
        why = f"{WORKER_LOST}: {lease.host or 'its host'} stopped heartbeating" + (
            f" (last at {worker.heartbeat_at.isoformat(timespec='seconds')})" if worker is not None else ""
        )
        if _interrupt_lost(project, lease, why):
            ended.append(lease.task_id)
        if lease.job_id is not None:
            lost_jobs.append(lease.job_id)
    if lost_jobs:
        job_queue.job_queue(project).finish(lost_jobs)
    return ended


def _interrupt_lost(project: Project, lease: Lease, why: str) -> bool:
    evidence = FailureEvidence(
        source="corral",
        code="worker-lost",
        phase="running",
        category="crash",
        possible_effects=PossibleEffects.UNKNOWN,
        details={"reason": why, "host": lease.host, "worker": lease.worker_id, "epoch": lease.epoch},
    )
    with project.store.write() as tx:
        if not tx.fence_off(lease.task_id, lease.epoch):
            return False  # another reconciler fenced it first
        return end_interrupted(tx, lease, f"The turn was lost: {why}.", why, evidence)


def end_interrupted(tx: Tx, lease: Lease, content: str, why: str, evidence: FailureEvidence) -> bool:
    """The lease's turn, whose receipt was never recorded, ends interrupted (its agent turn says ``content``),
    for auto-resume to queue it again under the breaker; False when the task moved on meanwhile."""
    task = tx.get_task(lease.task_id)
    current = tx.current_command(lease.task_id)
    if task is None or task.status is not Status.WORKING or current is None:
        return False
    if current.command_id != lease.command_id or tx.turn_by_command(lease.command_id, Role.AGENT):
        return False
    tx.add_turn(
        task.id,
        role=Role.AGENT,
        kind="error",
        content=content,
        session_id=task.session_id,
        failure=evidence,
        details={"lost_command": lease.command_id, "log_turn": current.sequence},
    )
    cause = RestingCause(evidence.code, tx.now(), Actor.SYSTEM, evidence=evidence, details={"summary": why})
    interrupt(tx, task, why, cause)
    return True


def _resend(project: Project, lease: Lease) -> None:
    job_queue.send(project, lease.task_id, lease.command_id)
