"""Putting an aborted or stranded accept right: the task back to its status, or its merge completed.

An accept that aborts puts its task back to the status its in-flight record names
(:func:`restore_prior`, ``recovery/in_flight``). One that died is stranded in ``merging``:
recovery finishes or puts back its destination checkout first (``recovery/destination``),
then completes the task when the merge landed, through zombie, the system-only recovery
status (:func:`complete_merged`), or restores it when it did not (:func:`recover_stranded`).
Recovery takes the target's lock (``recovery/target_locks``) first, so no accept works on a
checkout a dead one left half-updated.

The stranded-merge sweep is not the only way out: the commands that act on a task (those the
operations table lists in ``ESCAPES_STRANDED_MERGE``: unblock, submit, close, reject) first put a
stranded merge back themselves (:func:`escape_stranded`), and refuse one in flight.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from corral.adapters.locks import is_locked
from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.operations_table import Op, escapes_merge
from corral.domain.records import RestingCause, Session, Task
from corral.domain.status import Status
from corral.engine import workspace
from corral.engine.project import Project
from corral.engine.recovery.destination import CheckoutBusy, note_conflict, settle_destination
from corral.engine.recovery.in_flight import ACCEPT, JOURNAL, MARKER, InFlight, accepting_elsewhere, without_flight
from corral.engine.recovery.target_locks import target_lock
from corral.engine.resolve import resolve_task
from corral.engine.task_locks import task_lock
from corral.errors import CorralError, RefusedError, TaskBusy

#: How long an accept waits for a dead accept's git to finish in the checkout it shares.
BUSY_WAIT = 10.0
#: The resting cause of a task whose accept found its branch conflicting with the (moved) target.
CONFLICT_CAUSE = "merge-conflict-on-accept"
#: How long a command escaping a stranded merge waits for an accept into the same target to finish.
ESCAPE_WAIT = 30.0
#: The reason a stranded merge is put back with.
STRANDED = "restored after an accept died mid-merge"


def restore_prior(
    project: Project, task_id: str, actor: Actor, why: str, *, cause: str | None = None, details: Any = None
) -> None:
    """Put an aborted accept's task back to the status it had, and drop the marker and the record.

    ``cause`` (a resting-cause code, with ``details``) says why it rests, e.g. :data:`CONFLICT_CAUSE`.
    """
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        resting = RestingCause(cause, at=tx.now(), actor=actor, details=dict(details or {})) if cause else None
        prior = task.metadata.get(MARKER)
        tx.update_task(task_id, metadata=without_flight(task.metadata), touch=False)
        tx.unregister_process(task_id, ACCEPT)
        if task.status is Status.MERGING:
            if prior == Status.SUBMITTED.value:
                tx.set_status(
                    task_id, Status.SUBMITTED, actor, why, expected_from=Status.MERGING, resting_cause=resting
                )
            else:
                tx.park(task_id, actor, why, expected_from=Status.MERGING, resting_cause=resting)


def _landed(project: Project, task: Task, session: Session | None, target: str, flight: InFlight | None) -> bool:
    if session is None:
        return False
    if flight is not None and project.git.rev_parse(f"refs/heads/{target}", cwd=project.repo) == flight.new:
        return True
    return any(
        t["task"] == task.id and t["session"] == session.id
        for t in project.git.trailers(f"refs/heads/{target}", cwd=project.repo, limit=200)
    )


def recover_stranded(project: Project, task: Task, *, target_held: bool = False) -> str:
    """A task left in merging by an accept that died: completed if the merge landed, else restored.

    The destination checkout is finished or put back first (:func:`settle_destination`);
    what cannot be put back is noted on the task. Returns what was done: "completed",
    "restored" or "left" (a forge-pending merge, or an accept still holding a lock).
    ``target_held``: the caller (an accept into the same target) already holds its lock.
    """
    if MARKER not in task.metadata:
        return "left"  # the merge lives on a forge; a later accept asks it what happened
    if accepting_elsewhere(project, task.id):
        return "left"  # its locks, its checkout and its stash are another host's: that host recovers it
    flight = InFlight.from_json(task.metadata.get(JOURNAL))
    try:
        if flight is None or target_held:
            return _recover(project, task)
        # Never wait: a live accept into this target holds it, and recovers this one itself.
        with target_lock(project, flight.target, timeout=0):
            return _recover(project, task)
    except TaskBusy:
        return "left"


def _recover(project: Project, task: Task) -> str:
    with task_lock(project, task.id, what="stranded-merge sweep", timeout=0):
        return _settle(project, task)


def _settle(project: Project, task: Task, why: str = STRANDED) -> str:
    """With the task's lock held (and the target's, when a checkout was being brought along): finish or
    put back the destination, then complete the task or restore it."""
    with project.store.read() as tx:
        task = tx.get_task(task.id) or task
        session = tx.get_session(task.session_id) if task.session_id else None
        if task.status is not Status.MERGING:
            return "left"
        target = workspace.target_branch(tx, task)
    flight = InFlight.from_json(task.metadata.get(JOURNAL))
    landed = _landed(project, task, session, target, flight)
    try:
        problem = settle_destination(project, flight, landed=landed) if flight is not None else None
    except CheckoutBusy:
        return "left"
    if problem is not None:
        with project.store.write() as tx:
            current = tx.get_task(task.id) or task
            meta = note_conflict(current.metadata, problem, rfc3339(tx.now()))
            tx.update_task(task.id, metadata=meta, touch=False)
            task = tx.get_task(task.id) or current
    if landed and session is not None:
        complete_merged(project, task, session, "the stranded merge had landed")
        return "completed"
    restore_prior(project, task.id, Actor.SYSTEM, why)
    return "restored"


def escape_stranded(project: Project, given: str, op: Op) -> None:
    """Before ``op`` runs: a task an accept left in ``merging`` goes back to the status that accept recorded
    (or is completed, when its merge had landed), so ``op`` then runs from there (docs/lifecycle.md#stranded-merges).

    Only for the operations the table names (:func:`~corral.domain.operations_table.escapes_merge`). A merge
    in flight is refused: its accept holds the task's lifecycle lock from start to end, here or on the host
    that runs it. A merge that waits on a forge (no in-flight marker) is no stranded local merge: ``op``'s
    own guard answers for it. The target's lock is taken first, as the sweep takes it.
    """
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    if not escapes_merge(op, task.status) or MARKER not in task.metadata:
        return
    in_flight = TaskBusy(
        f"Cannot {op.value} {task.ref}: an accept is merging it now.",
        hint=f"Wait for it to end (corral wait {task.ref}), then: corral {op.value} {task.ref}",
    )
    if accepting_elsewhere(project, task.id) or is_locked(project.paths.lifecycle_lock(task.id)):
        raise in_flight
    flight = InFlight.from_json(task.metadata.get(JOURNAL))
    with ExitStack() as held:
        if flight is not None:  # a dead accept's checkout: no live accept into that target works on it meanwhile
            held.enter_context(target_lock(project, flight.target, timeout=ESCAPE_WAIT))
        try:
            held.enter_context(task_lock(project, task.id, what=f"{op.value} of a stranded merge", timeout=0))
        except TaskBusy:
            raise in_flight from None
        done = _settle(project, task, f"{STRANDED}, before {op.value}")
    with project.store.read() as tx:
        now = tx.get_task(task.id) or task
        target = workspace.target_branch(tx, now)
    if done == "completed" or now.status is Status.COMPLETE:
        raise RefusedError(
            f"{now.ref} is complete: the accept that died had already merged it into {target}, "
            f"so it was not {_DONE.get(op, op.value)}.",
            code="merge-landed",
            hint=f"See it: corral show {now.ref}. To work on it again: corral reopen {now.ref} -m 'work on it again'",
        )
    if now.status is Status.MERGING:  # git of the dead accept still works in the checkout it shares
        raise TaskBusy(
            f"Cannot {op.value} {now.ref} yet: git still works in the checkout its dead accept was updating.",
            hint=f"Wait for that git to finish (or end it), then: corral {op.value} {now.ref}",
        )


_DONE = {Op.UNBLOCK: "unblocked", Op.SUBMIT: "submitted", Op.CLOSE: "closed", Op.REJECT: "rejected"}


def recover_into(project: Project, target: str, *, besides: str) -> None:
    """With ``target``'s lock held: recover every accept into it that died with its record saved."""
    with project.store.read() as tx:
        merging = [t for t in tx.tasks([Status.MERGING]) if t.id != besides]
    for task in merging:
        flight = InFlight.from_json(task.metadata.get(JOURNAL))
        if flight is None or flight.target != target or accepting_elsewhere(project, task.id):
            continue  # another host's accept is not waited for: the remote's compare-and-swap keeps them apart
        deadline = time.monotonic() + BUSY_WAIT
        while recover_stranded(project, task, target_held=True) == "left":
            with project.store.read() as tx:
                still = tx.get_task(task.id)
            if still is None or still.status is not Status.MERGING:
                break
            if time.monotonic() > deadline:
                raise TaskBusy(
                    f"An accept of {task.ref} into {target} died, and git still works in {flight.destination}.",
                    hint="Wait for that git to finish (or end it), then accept again.",
                )
            time.sleep(0.1)


def complete_merged(project: Project, task: Task, session: Session, why: str) -> str | None:
    """The work is on its target but the status was not updated: outcome accepted → zombie → complete.

    Returns a warning when the worktree could not be removed (it is kept, never lost).
    """
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status in (Status.COMPLETE, Status.ABANDONED):
            return None
        tx.update_task(task.id, metadata=without_flight(current.metadata), touch=False)
        tx.unregister_process(task.id, ACCEPT)
        tx.update_session(session.id, outcome="accepted", ended_at=tx.now())
        tx.set_status(task.id, Status.ZOMBIE, Actor.SYSTEM, why, resting_cause=None)
        tx.set_status(task.id, Status.COMPLETE, Actor.SYSTEM, "merged into its target")
        current = tx.get_task(task.id) or current
    try:
        workspace.save_and_remove(project, current, session, "completion")
    except CorralError as exc:
        return f"{current.ref} is complete, but its worktree was kept: {exc.message}"
    return None
