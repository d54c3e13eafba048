"""sync: merge the target into a resting task's branch, in the CLI, leaving the status as it was.

Under the task's lifecycle lock; refused while a turn runs, a pair or chat is open, or a
merge is in flight. A conflicting merge is aborted (the worktree left as it was) and reported
with the conflicting files and the hint to ``unblock``, which hands the conflict to the agent.
"""

from __future__ import annotations

from msgspec import Struct

from corral.domain.actors import Actor, Role
from corral.domain.operations_table import Op, check_operation
from corral.domain.records import Task
from corral.domain.violations import shown_paths
from corral.engine import workspace
from corral.engine.operations.turns import _check_worktree, _session
from corral.engine.project import Project
from corral.engine.recovery.chats import refuse_while_chat
from corral.engine.resolve import resolve_task
from corral.engine.runtime import branch_check
from corral.engine.task_locks import task_lock
from corral.errors import GitError, MergeConflict


class Synced(Struct, frozen=True):
    task: Task
    state: str  # merged | up-to-date
    head: str | None


def sync(project: Project, given: str, *, actor: Actor) -> Synced:
    """Merge upstream into a resting task's branch, in the CLI, leaving the status as it was."""
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    with task_lock(project, task.id):
        with project.store.read() as tx:
            task = tx.get_task(task.id) or task
            check_operation(Op.SYNC, task.status, task.ref, hint="sync runs only while the task rests.")
            session = _session(tx, task)
            target = workspace.target_branch(tx, task)
        _check_worktree(task, session)
        refuse_while_chat(project, task, "sync")
        git, wt = project.git, session.worktree or "."
        # The merge commits through the worktree's HEAD: only onto the task's own branch, a plain ref.
        branch_check.on_branch(git, project.repo, wt, task.branch)
        before = git.rev_parse("HEAD", cwd=wt)
        merge = ["merge", "--no-ff", "--no-edit", "--no-verify", f"refs/heads/{target}"]
        result = git.run(*git.identity_args(wt), *merge, cwd=wt, check=False)
        if result.returncode != 0:
            files = git.unmerged_paths(wt)  # as git stores them (-z), escaped only where they are shown
            git.run("merge", "--abort", cwd=wt, check=False)
            if files:
                raise MergeConflict(
                    f"Merging {target} into {task.branch} conflicts in: {shown_paths(files)}. The merge was "
                    "aborted; the worktree is as it was.",
                    hint=f"Hand the conflict to the agent: corral unblock {task.ref} -m 'merge {target} and resolve'",
                )
            raise GitError(
                f"Merging {target} failed: {(result.stderr or result.stdout).strip()[-300:]}",
                hint="Commit or discard local changes in the worktree, then sync again.",
            )
        after = git.rev_parse("HEAD", cwd=wt)
        state = "up-to-date" if after == before else "merged"
        with project.store.write() as tx:
            tx.add_turn(
                task.id,
                role=Role.HUMAN,
                actor=actor,
                kind="sync",
                content=f"Merged {target} into {task.branch} ({state}).",
                session_id=session.id,
                ended_at=tx.now(),
                details={"head": after, "before": before},
            )
            if state == "merged":
                # Target changes the merge brought in are never the agent's: the check starts after them.
                tx.update_session(session.id, git_start_sha=after)
                if after and before == branch_check.verified_tip(git, project.repo, task.ref):
                    branch_check.mark_verified(git, project.repo, task.ref, after, old=before)  # corral's own merge
            task = tx.get_task(task.id) or task
        return Synced(task, state, after)
