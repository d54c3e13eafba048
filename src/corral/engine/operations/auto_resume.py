"""Auto-resume: a crashed turn is resumed by the system, within the circuit breakers.

docs/lifecycle.md#auto-resume-and-the-circuit-breaker: never after a merge-and-fix failure, an
internal fault or a classified (fatal or exhausted) failure — those rest blocked
anyway; never after a turn the watchdog ended twice (it hung again after its one relaunch);
never while violations are pending; never for an ask; not once the session has
been interrupted ``breaker_threshold`` times in a row; and not once it was interrupted
``breaker_same_cause`` times in a row by one cause (the same code and exit status, no new
commit between them, within ten minutes), which is recorded on the resting cause so ``show``
says so. Each setting is the task's own where it keeps one; the rules and the counters they read
are the breaker's (``domain/breaker.py``). The resume turn carries no
feedback itself, so a crash during it redelivers the same feedback. On the shared store a turn that
ran on a host of its own is resumed by that host only (docs/workers.md#turns-run-on-your-own-host).
"""

from __future__ import annotations

from functools import partial

from corral.domain.actors import Actor
from corral.domain.breaker import Breaker, Counters, Interruption
from corral.domain.explain import SAME_CAUSE_BREAKER
from corral.domain.failures import NO_AUTO_RESUME
from corral.domain.records import LAST_INTERRUPTION, RestingCause, Session, Task
from corral.domain.status import Status
from corral.engine.operations.resume_gap import forget, spaced_resume
from corral.engine.project import Project
from corral.engine.resolve import task_config
from corral.engine.task_locks import task_lock
from corral.errors import CorralError, TaskBusy


def resumable(project: Project, task_id: str) -> bool:
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        if task is None or task.status is not Status.INTERRUPTED or task.session_id is None:
            return False
        config = task_config(project.config, task)
        if not config["auto_resume"]:
            return False
        cause = task.resting_cause
        if cause is not None and (
            cause.code in NO_AUTO_RESUME or SAME_CAUSE_BREAKER in cause.details or hung_again(cause)
        ):
            return False
        session = tx.get_session(task.session_id)
        if session is None or Breaker.of(config).tripped(Counters.of(session)):
            return False
        # A turn that ran on a host of its own is resumed by that host only (the placement says which).
        if not project.placement.resumes_here(project, project.placement.turn_lease(tx, task.id)):
            return False
        return not tx.pending_paths(task.id)


def hung_again(cause: RestingCause) -> bool:
    """A turn the watchdog ended twice (it hung again after its one relaunch): a person looks, the system
    does not resume it (a hang that outlives a relaunch would only hang again, a watchdog period each)."""
    if cause.code != "watchdog-no-progress" or cause.evidence is None:
        return False
    relaunches = cause.evidence.details.get("relaunches")
    return isinstance(relaunches, int) and not isinstance(relaunches, bool) and relaunches >= 1


def _interruption(project: Project, task: Task, session: Session) -> Interruption | None:
    cause = task.resting_cause
    at = session.interrupt_at or (cause.at if cause is not None else None)
    if cause is None or at is None:
        return None
    exit_code = session.interrupt_exit_code
    if exit_code is None and cause.evidence is not None:
        exit_code = cause.evidence.exit_code
    # The branch's commit from its files where they are plain (no git process on the way to the resume).
    from corral.adapters.tip_files import branch_commit  # a crash's only: every settling read loads this module

    head = branch_commit(project.git, project.repo, session.branch or task.branch)
    return Interruption(cause.code, exit_code, head, at.timestamp())


def same_cause_stop(project: Project, task_id: str) -> bool:
    """Count this interruption against the one before (the breaker's ``on_repeat``); True (recorded on
    the cause) when the same-cause breaker trips."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        session = tx.get_session(task.session_id) if task is not None and task.session_id else None
        if task is None or session is None or task.resting_cause is None:
            return False
        now = _interruption(project, task, session)
        if now is None:
            return False
        breaker = Breaker.of(task_config(project.config, task))
        repeat = breaker.on_repeat(Counters.of(session), task.metadata.get(LAST_INTERRUPTION), now)
        if repeat.keep is not None:
            tx.update_task(task.id, metadata={**task.metadata, LAST_INTERRUPTION: repeat.keep}, touch=False)
        if not repeat.tripped:
            return False
        cause = task.resting_cause
        details = {**cause.details, SAME_CAUSE_BREAKER: repeat.details()}
        tx.set_resting_cause(task.id, RestingCause(cause.code, cause.at, cause.actor, cause.evidence, details))
        return True


def maybe_auto_resume(project: Project, task_id: str) -> bool:
    """Resume an interrupted task as the system, if that is safe and the project-wide gap since the last
    auto-resume of another task has passed (else a later pass does, :func:`due`); True when a turn was launched."""
    if not resumable(project, task_id):
        forget(project, task_id)
        return False
    return spaced_resume(project, task_id, partial(_resume_now, project, task_id))


def _resume_now(project: Project, task_id: str) -> bool:
    from corral.engine.operations import spares, turns  # imported when a resume is due: passes rarely need them

    try:
        with task_lock(project, task_id, what="auto-resume", timeout=0):
            if not resumable(project, task_id) or same_cause_stop(project, task_id):
                return False
            # A supervisor the daemon started ahead runs this turn: it carries the id the turn is recorded under.
            spare = spares.take()
            try:
                turns.resume(project, task_id, actor=Actor.SYSTEM, kind="auto-resume", command_id=spare)
            finally:
                spares.release(spare)  # not handed its command (the launch failed before): it exits
            return True
    except TaskBusy:
        return False  # another reconciler (or a person) is on it
    except CorralError:
        return False  # the status moved meanwhile, or the launch failed and rested the task with its cause
