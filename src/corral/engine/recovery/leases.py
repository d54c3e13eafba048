"""The lease sweep: turns whose worker stopped heartbeating are fenced off and rest interrupted "worker lost";
queued turns whose job never reached the dispatch engine are sent again (docs/workers.md#recovery).

Any reconciler runs it (a worker's, a reviewer's laptop's), and only for a project on the
shared PostgreSQL store. Fencing is one compare-and-swap on the lease's epoch, so two hosts
that see the same lost worker interrupt its turn once; the auto-resume that follows queues the
turn again, under the breaker, for another worker.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from corral.adapters.files import write_atomic
from corral.domain.actors import Actor, Role
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause
from corral.domain.status import Status
from corral.domain.substate import QUEUED, Live
from corral.domain.team import WORKER_LOST, Lease, LeaseState, lease_lost
from corral.engine import queue
from corral.engine.paths import make_private_dir
from corral.engine.project import Project
from corral.engine.recovery.receipts import interrupt
from corral.engine.runtime import shipping
from corral.engine.runtime.liveness import Observed, live_from_json
from corral.store import Tx

#: Which ended lease this host's copy of the task's shipped files is complete for.
SHIPPED_MARK = "shipped.mark"
#: A queued lease with no job after this long lost its enqueue to a crash: it is sent again.
RESEND_AFTER = timedelta(seconds=5)


def elsewhere(project: Project, worker_id: str | None, observed: Observed | None = None) -> set[str]:
    """The tasks whose turn is queued or runs on another worker: this host's working sweep leaves them alone.

    What the pass sees of them goes into ``observed``: a queued turn as ``queued``; a claimed one with
    the live facts its worker shipped, alive while that worker's heartbeat holds its lease.
    """
    if project.database_url is None:
        return set()
    with project.store.read() as tx:
        active = tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED])
        away = [lease for lease in active if not (lease.claimed and lease.worker_id == worker_id)]
        if observed is not None and away:
            workers = {w.id: w for w in tx.workers()}
            shipped = tx.live(lease.task_id for lease in away if lease.claimed)
            now = tx.now()
    if observed is not None:
        for lease in away:
            if not lease.claimed:
                observed[lease.task_id] = Live(alive=True, phase=QUEUED)
                continue
            command_id, doc, _at = shipped.get(lease.task_id, (None, {}, None))
            live = doc.get("live") if command_id == lease.command_id else None
            alive = not lease_lost(lease, workers, now)
            observed[lease.task_id] = live_from_json(live, alive=alive) if isinstance(live, dict) else Live(alive=alive)
    return {lease.task_id for lease in away}


def bring_shipped(project: Project, worker_id: str | None) -> int:
    """This host's copy of what other hosts' workers shipped of their turns (``runtime.shipping``):
    a running turn's files on every pass, an ended one's once more after it ended. The bytes written."""
    if project.database_url is None:
        return 0
    with project.store.read() as tx:
        others = [lease for lease in tx.leases() if lease.worker_id is not None and lease.worker_id != worker_id]
    written = 0
    for lease in others:
        mark = project.paths.task_dir(lease.task_id) / SHIPPED_MARK
        done = f"{lease.epoch}:{lease.state.value}"
        if lease.state is LeaseState.RELEASED and _read_mark(mark) == done:
            continue
        written += shipping.materialize(project, lease.task_id)
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
    if project.database_url is None:
        return []
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
        queue.dispatcher(project).finish(lost_jobs)
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
    queue.send(project, lease.task_id, lease.command_id)
