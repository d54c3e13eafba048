"""Auto-resume: a crashed turn is resumed by the system, within the circuit breaker.

docs/lifecycle.md#auto-resume-and-the-circuit-breaker: never after a merge-and-fix failure, an
internal fault or a classified (fatal or exhausted) failure — those rest blocked
anyway; never while violations are pending; never for an ask; and not once the
session has been interrupted ``breaker_threshold`` times in a row. The resume turn
carries no feedback itself, so a crash during it redelivers the same feedback.
"""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.failures import NO_AUTO_RESUME
from corral.domain.failures import breaker_tripped as tripped
from corral.domain.status import Status
from corral.engine.locks import task_lock
from corral.engine.project import Project
from corral.errors import CorralError, TaskBusy


def breaker_tripped(project: Project, consecutive: int) -> bool:
    return tripped(consecutive, int(project.config["breaker_threshold"]))


def resumable(project: Project, task_id: str) -> bool:
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        if task is None or task.status is not Status.INTERRUPTED or task.session_id is None:
            return False
        if task.resting_cause is not None and task.resting_cause.code in NO_AUTO_RESUME:
            return False
        session = tx.get_session(task.session_id)
        if session is None or breaker_tripped(project, session.consecutive_interruptions):
            return False
        return not tx.pending_paths(task.id)


def maybe_auto_resume(project: Project, task_id: str) -> bool:
    """Resume an interrupted task as the system, if that is safe; True when a turn was launched."""
    if not project.config["auto_resume"] or not resumable(project, task_id):
        return False
    from corral.engine.operations import turns  # imported when a resume is due: reconcile passes rarely need it

    try:
        with task_lock(project, task_id, what="auto-resume", timeout=0):
            if not resumable(project, task_id):
                return False
            turns.resume(project, task_id, actor=Actor.SYSTEM, kind="auto-resume")
            return True
    except TaskBusy:
        return False  # another reconciler (or a person) is on it
    except CorralError:
        return False  # the status moved meanwhile, or the launch failed and rested the task with its cause
