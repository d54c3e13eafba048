"""Merge bookkeeping: put an aborted or stranded accept back, or complete work already on its target.

``accept_in_flight_from`` (:data:`MARKER`, recorded when an accept starts) names the status
to restore when the accept aborts or dies; a merge that landed completes through zombie,
the system-only recovery status.
"""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.records import Session, Task
from corral.domain.status import Status
from corral.engine import workspace
from corral.engine.locks import task_lock
from corral.engine.project import Project
from corral.errors import CorralError, TaskBusy

MARKER = "accept_in_flight_from"


def restore_prior(project: Project, task_id: str, actor: Actor, why: str) -> None:
    """Put an aborted accept's task back to the status it had, and drop the marker."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        prior = task.metadata.get(MARKER)
        meta = {k: v for k, v in task.metadata.items() if k != MARKER}
        tx.update_task(task_id, metadata=meta, touch=False)
        if task.status is Status.MERGING:
            if prior == Status.SUBMITTED.value:
                tx.set_status(task_id, Status.SUBMITTED, actor, why, expected_from=Status.MERGING)
            else:
                tx.park(task_id, actor, why, expected_from=Status.MERGING)


def recover_stranded(project: Project, task: Task) -> str:
    """A task left in merging by an accept that died: completed if the merge landed, else restored.

    Returns what was done: "completed", "restored" or "left" (a forge-pending merge, or an
    accept still holding the lock).
    """
    if MARKER not in task.metadata:
        return "left"  # the merge lives on a forge; a later accept asks it what happened
    try:
        with task_lock(project, task.id, what="stranded-merge sweep", timeout=0):
            with project.store.read() as tx:
                task = tx.get_task(task.id) or task
                session = tx.get_session(task.session_id) if task.session_id else None
                if task.status is not Status.MERGING:
                    return "left"
                target = workspace.target_branch(tx, task)
            landed = session is not None and any(
                t["task"] == task.id and t["session"] == session.id
                for t in project.git.trailers(f"refs/heads/{target}", cwd=project.repo, limit=200)
            )
            if landed and session is not None:
                complete_merged(project, task, session, "the stranded merge had landed")
                return "completed"
            restore_prior(project, task.id, Actor.SYSTEM, "restored after an accept died mid-merge")
            return "restored"
    except TaskBusy:
        return "left"


def complete_merged(project: Project, task: Task, session: Session, why: str) -> str | None:
    """The work is on its target but the status was not updated: outcome accepted → zombie → complete.

    Returns a warning when the worktree could not be removed (it is kept, never lost).
    """
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status in (Status.COMPLETE, Status.ABANDONED):
            return None
        meta = {k: v for k, v in current.metadata.items() if k != MARKER}
        tx.update_task(task.id, metadata=meta, touch=False)
        tx.update_session(session.id, outcome="accepted", ended_at=tx.now())
        tx.set_status(task.id, Status.ZOMBIE, Actor.SYSTEM, why, resting_cause=None)
        tx.set_status(task.id, Status.COMPLETE, Actor.SYSTEM, "merged into its target")
        current = tx.get_task(task.id) or current
    try:
        workspace.save_and_remove(project, current, session, "completion")
    except CorralError as exc:
        return f"{current.ref} is complete, but its worktree was kept: {exc.message}"
    return None
