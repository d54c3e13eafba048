"""The reconciler: sweeps that bring stored status in line with what is true on disk.

It runs before read commands (and on every daemon tick) and is idempotent: a
receipt is claimed in a transaction, so two reconcilers never process it twice.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TypeVar

from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.status import TERMINAL, Status
from corral.engine.project import Project
from corral.engine.recovery import hand_merged, removals
from corral.engine.recovery.chats import sweep_stale_chats
from corral.engine.recovery.merged import sweep_merged_branches
from corral.engine.recovery.merges import recover_stranded
from corral.engine.recovery.pairs import sweep_stale_pairs
from corral.engine.runtime.liveness import Observed

T = TypeVar("T")


def sweep_blocked_without_session(project: Project) -> int:
    """A blocked task with no session has nothing to review → backlog (docs/lifecycle.md#reconciler-sweeps)."""
    with project.store.read() as tx:
        stray = [t.id for t in tx.tasks([Status.BLOCKED]) if t.session_id is None]
    moved = 0
    if stray:
        with project.store.write() as tx:
            for task_id in stray:
                task = tx.get_task(task_id)
                if task is not None and task.status is Status.BLOCKED and task.session_id is None:
                    tx.set_status(
                        task_id, Status.BACKLOG, Actor.SYSTEM, "blocked with no session", expected_from=Status.BLOCKED
                    )
                    moved += 1
    return moved


def sweep_working(project: Project, problems: list[str] | None = None, observed: Observed | None = None) -> list[str]:
    """Receipts become turns; a supervisor gone without one → interrupted (docs/lifecycle.md#reconciler-sweeps).

    Returns the ids of the tasks whose turn ended in this pass (a receipt recorded or a
    turn found lost): the candidates for auto-resume. One task that cannot be reconciled
    is reported in ``problems`` and never stops the others. The candidates are read in one
    query as heads (``Tx.task_heads``: each working one with its current command's id, no task
    decoded), since a pass that finds every supervisor alive needs no more of them; what is
    seen of the supervisors still running goes into ``observed``.

    On the shared store a turn is judged only by the host that holds it (docs/workers.md): one
    another host holds (a worker's, or that host's own local turn) is left alone and read as its
    host shipped it; this host's own local turns get their relayed stops first and their files
    and live facts shipped after: the placement's sweeps (``project.placement.sweep_held``).
    """
    with project.store.read() as tx:
        candidates = tx.task_heads([Status.WORKING, Status.INTERRUPTED])
    # What the pass sees of this host's running turns: the caller's, or its own (its local turns are shipped from it).
    seen: Observed = observed if observed is not None else {}
    working = {t.id: t.command_id for t in candidates if t.status is Status.WORKING}
    # Turns on other hosts (docs/workers.md): the placement's sweeps say which this host must leave alone.
    held = project.placement.sweep_held(project, working, problems, observed)
    ended: list[str] = list(held.ended)
    if held.leave:
        candidates = [t for t in candidates if t.id not in held.leave or t.status is not Status.WORKING]
    if candidates:
        from corral.engine.recovery.working import reconcile_working  # the protocol and receipts load here

        grace = timedelta(seconds=float(project.config["grace_period"]))
        for head in candidates:  # isolated per task; reported, not swallowed
            if tolerated(problems, head.ref, partial(reconcile_working, project, head, grace, observed=seen), False):
                ended.append(head.id)
    held.after_pass({task_id: command for task_id, command in working.items() if task_id not in ended}, seen)
    return ended


def tolerated(problems: list[str] | None, what: str, sweep: Callable[[], T], instead: T) -> T:
    """A sweep that may fail without stopping the pass: its failure is one line in ``problems`` (named
    ``what``) and ``instead`` stands for its result; a caller with no ``problems`` to report in gets the
    failure raised, as it asked. Every step of a pass that another may follow is run through here."""
    try:
        return sweep()
    except Exception as exc:  # reported, never swallowed
        if problems is None:
            raise
        problems.append(f"{what}: {type(exc).__name__}: {exc}")
        return instead


def sweep_terminal(project: Project) -> int:
    """Processes still alive for complete or abandoned tasks are stopped, their records cleared.

    Only this host's: a record another host owns names a pid that means nothing here; that host clears it.
    """
    with project.store.read() as tx:
        records = [(p, tx.get_task(p.task_id)) for p in tx.processes()]
    me = project.placement.owner(project)
    records = [(r, t) for r, t in records if not r.elsewhere(me)]
    ended = [(r, t) for r, t in records if t is not None and t.status in TERMINAL]
    if not ended:
        return 0
    from corral.engine.runtime.processes import reap_turn, stop_recorded  # only when something is left

    stopped = 0
    for ended_record, task in ended:
        assert task is not None
        if ended_record.kind == "supervisor":
            stopped += len(reap_turn(project, task.id))
        if stop_recorded(ended_record):  # only if the pid is still the process the store registered
            stopped += 1
        with project.store.write() as tx:
            tx.unregister_process(task.id, ended_record.kind, pid=ended_record.pid)
    return stopped


def sweep_stranded_merges(project: Project) -> int:
    """A task in merging with no live accept holding its lock: completed if the merge landed, else restored."""
    with project.store.read() as tx:
        merging = tx.tasks([Status.MERGING])
    return sum(recover_stranded(project, task) != "left" for task in merging)


class Reconciled(Struct, frozen=True):
    """What one pass found: the problems met (one line each) and the tasks whose turn ended."""

    problems: list[str]
    ended: list[str]


def reconcile(project: Project, observed: Observed | None = None) -> Reconciled:
    """Run every sweep; problems never stop the others. Auto-resume is the caller's (``settle``).

    ``observed`` collects what the pass saw of the supervisors still running (see
    ``liveness.Observed``), for a read that follows in the same command.
    """
    problems: list[str] = []
    ended = sweep_working(project, problems, observed)
    for sweep in (
        sweep_stranded_merges,
        removals.sweep,
        hand_merged.sweep,
        sweep_merged_branches,
        sweep_terminal,
        sweep_stale_pairs,
        sweep_stale_chats,
        sweep_blocked_without_session,
    ):
        # One broken sweep must not hide the state the others repair.
        tolerated(problems, sweep.__name__, partial(sweep, project), None)
    return Reconciled(problems, ended)
