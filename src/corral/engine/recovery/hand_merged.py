"""The hand-merged sweep: an interrupted task whose failed merge-and-fix a person resolved → blocked.

A work turn whose upstream merge conflicted, and whose agent left the conflict unresolved,
rests ``interrupted`` with the cause ``merge-and-fix-failed`` and is never auto-resumed
(docs/lifecycle.md#auto-resume-and-the-circuit-breaker). Its "Next:" says to resolve it in
the worktree. Once the person has — no unmerged paths, the merge committed (no
``MERGE_HEAD``), the target's tip contained in the task's branch — the task goes
``interrupted → blocked`` (actor system, reason :data:`REASON`), after which ``accept`` and
``unblock`` work as for any blocked task. The reconciler runs :func:`sweep`; ``doctor T``
runs :func:`settle` on the one task and reports its answer.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from corral.domain.actors import Actor
from corral.domain.breaker import Breaker, Counters
from corral.domain.records import Session, Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.workspace import target_branch

#: The resting cause of a task whose agent left the upstream merge unresolved.
CAUSE = "merge-and-fix-failed"
#: The reason recorded on the interrupted → blocked transition.
REASON = "merge resolved by hand"


class Settled(Struct, frozen=True):
    """What :func:`settle` found: whether the task moved, and if not, what still keeps it interrupted."""

    moved: bool
    #: Why the task stays as it is, in words a person acts on (None when it moved).
    why_not: str | None = None


def unresolved(project: Project, task: Task, session: Session, target: str) -> str | None:
    """What still keeps ``task``'s merge from counting as resolved by hand; None once it is."""
    git, repo = project.git, project.repo
    if not session.worktree or not Path(session.worktree).is_dir():
        return f"its worktree {session.worktree or '(none)'} is gone"
    wt = Path(session.worktree)
    branch = session.branch or task.branch
    if git.current_branch(wt) != branch:
        return f"{wt} does not have {branch} checked out"
    conflicted = git.unmerged_paths(wt)
    if conflicted:
        shown = ", ".join(conflicted[:10]) + (" …" if len(conflicted) > 10 else "")
        return f"the merge still has conflicted paths in {wt}: {shown}"
    if git.merge_pending(wt):
        return f"the merge is resolved but not committed: run `git commit` in {wt}"
    tip = git.rev_parse(f"refs/heads/{branch}", cwd=repo)
    target_tip = git.rev_parse(f"refs/heads/{target}", cwd=repo)
    if tip is None:
        return f"its branch {branch} is gone"
    if target_tip is None:
        return f"its target branch {target} is gone"
    if not git.is_ancestor(target_tip, tip, cwd=repo):
        return f"{branch} does not contain {target}'s tip {target_tip[:12]}: merge {target} in {wt} and commit"
    return None


def settle(project: Project, task: Task) -> Settled:
    """Take ``task`` interrupted → blocked when its failed merge-and-fix is resolved in the worktree."""
    with project.store.read() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.INTERRUPTED:
            status = current.status.value if current else "gone"
            return Settled(False, f"{task.ref} is {status}, not interrupted")
        cause = current.resting_cause.code if current.resting_cause else None
        if cause != CAUSE:
            return Settled(False, f"{task.ref} is interrupted by {cause or 'a crash'}, not by a failed merge")
        session = tx.get_session(current.session_id) if current.session_id else None
        if session is None:
            return Settled(False, f"{task.ref} has no session")
        if tx.pending_paths(current.id):
            pending = ", ".join(tx.pending_paths(current.id))
            return Settled(False, f"protected files of {task.ref} await a decision: {pending}")
        target = target_branch(tx, current)
    problem = unresolved(project, current, session, target)
    if problem is not None:
        return Settled(False, problem)
    with project.store.write() as tx:
        again = tx.get_task(task.id)
        # A turn (resume, unblock, pair) may have begun while git was read: then nothing is taken.
        if (
            again is None
            or again.status is not Status.INTERRUPTED
            or again.session_id != session.id
            or (again.resting_cause.code if again.resting_cause else None) != CAUSE
            or tx.pending_paths(again.id)
        ):
            return Settled(False, f"{task.ref} changed while its worktree was read")
        tx.park(again.id, Actor.SYSTEM, REASON, expected_from=Status.INTERRUPTED, resting_cause=None)
        tx.update_session(session.id, **Breaker().on_hand_merged(Counters.of(tx.get_session(session.id))).fields())
    return Settled(True)


def sweep(project: Project) -> int:
    """Every interrupted task whose failed merge-and-fix is resolved by hand → blocked; returns how many.

    Only tasks resting with :data:`CAUSE` are looked at, so a pass with none asks git nothing.
    """
    with project.store.read() as tx:
        waiting = [
            t
            for t in tx.tasks([Status.INTERRUPTED])
            if t.resting_cause is not None and t.resting_cause.code == CAUSE and t.session_id
        ]
    return sum(settle(project, task).moved for task in waiting)
