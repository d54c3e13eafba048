"""A task's branch and worktree: made from its target, saved before removal, restored on reopen.

Nothing is deleted unsaved: before a worktree is removed, uncommitted changes are
committed to the task branch as a work-in-progress commit, and the branch tip is
kept under ``refs/corral/archive/<ref>`` until the task is deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from msgspec import Struct

from corral.adapters import tip_files
from corral.adapters.branches import delete_task_branch
from corral.adapters.locks import lock
from corral.domain.operations_table import now_words
from corral.domain.records import Session, Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.errors import GitError, PrepareFailed, RefusedError, TaskAlreadyStarted
from corral.store import Tx

ARCHIVE_PREFIX = "refs/corral/archive/"


#: How long a worktree's making waits for another corral process making or removing one in the repository.
WORKTREE_LOCK_SECONDS = 60.0


@contextmanager
def worktree_lock(project: Project) -> Iterator[None]:
    """git's worktree bookkeeping is the repository's: one ``worktree add`` (or prune) at a time among corral's
    processes. git 2.39 reads every entry of ``worktrees/`` as it adds one, and dies on an entry another
    ``worktree add`` has made but not yet filled ("failed to read .git/worktrees/…/commondir"): a few people's
    ``corral start`` at once, or a worker's turns, failed so."""
    fd = lock(project.paths.worktrees_lock, WORKTREE_LOCK_SECONDS)
    if fd is None:
        raise PrepareFailed(
            f"Another corral process held {project.paths.worktrees_lock} for {int(WORKTREE_LOCK_SECONDS)} s.",
            hint="It is making or removing a worktree; try again.",
        )
    try:
        yield
    finally:
        os.close(fd)


def archive_ref(task: Task) -> str:
    return f"{ARCHIVE_PREFIX}{task.ref}"


def target_branch(tx: Tx, task: Task) -> str:
    """The branch a task merges into: its parent's branch, else the remote target, else its own."""
    if task.parent_id:
        parent = tx.get_task(task.parent_id)
        if parent is not None:
            return parent.branch
    remote = task.metadata.get("remote_target_branch")
    if isinstance(remote, str) and remote:
        return remote
    if not task.target_branch:
        raise RefusedError(
            f"Task {task.ref} has no target branch.",
            code="no-target",
            hint=f"Set one: corral edit {task.ref} --target BRANCH",
        )
    return task.target_branch


class Workspace(Struct, frozen=True):
    worktree: Path
    branch: str
    base_commit: str


def started_error(task: Task) -> TaskAlreadyStarted:
    """What a start of ``task``, which has started already (it left backlog), is told."""
    if task.status is Status.WORKING:
        hint = f"Follow it: corral logs -f {task.ref}   ·   wait for it: corral wait {task.ref}"
    else:  # what the table lets the person do now: feedback, a resume, a reopen …
        hint = now_words(task.status, task.ref)
    return TaskAlreadyStarted(f"{task.ref} has already started: it is {task.status.value}.", hint=hint)


def already_started(project: Project, task: Task) -> TaskAlreadyStarted | None:
    """The error for a start that lost to another: ``task`` (as the loser read it) has started since.

    Started means it left backlog, or the store holds another session for it now.
    """
    with project.store.read() as tx:
        current = tx.get_task(task.id)
    if current is None or (current.status is Status.BACKLOG and current.session_id == task.session_id):
        return None
    return started_error(current)


def prepare(project: Project, task: Task, target: str) -> Workspace:
    """Create ``corral/<ref>`` from ``target`` and its worktree; undo both on any failure.

    A start that lost to a simultaneous one (the task started meanwhile, or its branch appeared
    under this one's ``worktree add``) raises :class:`TaskAlreadyStarted` and touches nothing of
    the winner's.

    The target's commit and whether the task's branch is there are read from the repository's files where
    they are plain (``adapters/tip_files``; anything else is asked of git): a start made three git processes
    of them.
    """
    git, repo = project.git, project.repo
    lost = already_started(project, task)
    if lost is not None:
        raise lost
    base = tip_files.ref_commit(git, repo, f"refs/heads/{target}") or git.rev_parse(target, cwd=repo)
    if base is None:
        raise PrepareFailed(
            f"The target branch '{target}' of task {task.ref} has no commit.",
            hint=f"Commit to {target} first, or set another target: corral edit {task.ref} --target BRANCH",
        )
    path = project.paths.worktree(task.ref)
    reclaim_orphan(project, task, path, base)
    if path.exists() or path.is_symlink():
        raise already_started(project, task) or PrepareFailed(
            f"Something already exists at {path}, where task {task.ref}'s worktree goes.",
            hint="Move it aside (or run `corral prune`), then start the task again.",
        )
    branch_ref = f"refs/heads/{task.branch}"
    if not tip_files.ref_absent(repo, branch_ref) and git.ref_exists(branch_ref, cwd=repo):
        raise already_started(project, task) or PrepareFailed(
            f"The branch {task.branch} already exists.",
            hint=f"Rename it (git branch -m {task.branch} {task.branch}-old), then start the task again.",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with worktree_lock(project):  # the add, and a failed one's removal (its prune) with it
        try:
            git.worktree_add(path, task.branch, base, cwd=repo, new_branch=True)
        except GitError as exc:
            if git.ref_exists(f"refs/heads/{task.branch}", cwd=repo) and "already exists" in exc.message:
                # The branch was absent a moment ago: a simultaneous start made it, and the worktree
                # there is that start's. Nothing of it is removed.
                raise already_started(project, task) or TaskAlreadyStarted(
                    f"{task.ref} has already started: another `corral start` is making its worktree.",
                    hint=f"Follow it: corral logs -f {task.ref}   ·   wait for it: corral wait {task.ref}",
                ) from exc
            git.worktree_remove(path, cwd=repo)
            delete_task_branch(git, repo, task.branch)
            raise PrepareFailed(
                f"corral could not make the worktree of {task.ref}: {exc.message}", hint=exc.hint
            ) from exc
    return Workspace(path, task.branch, base)


def reclaim_orphan(project: Project, task: Task, path: Path, base: str) -> None:
    """Undo a start that died after making the worktree but before recording the session.

    Only an untouched leftover is removed: the worktree is on the task's branch, clean,
    and the branch has no commit beyond the target. Anything else is left for a person.
    """
    git, repo = project.git, project.repo
    tip = tip_files.ref_commit(git, repo, f"refs/heads/{task.branch}")
    if tip is None or not (tip == base or git.is_ancestor(tip, base, cwd=repo)):
        return
    if path.is_dir() and not path.is_symlink():
        on_branch = git.run("symbolic-ref", "--quiet", "--short", "HEAD", cwd=path, check=False).stdout.strip()
        if on_branch != task.branch or git.dirty_paths(path):
            return
        git.worktree_remove(path, cwd=repo)
    elif path.exists() or path.is_symlink():
        return
    git.run("worktree", "prune", cwd=repo, check=False)
    delete_task_branch(git, repo, task.branch)


def save_and_remove(project: Project, task: Task, session: Session, why: str) -> str | None:
    """Commit leftovers as work in progress, archive the branch tip, remove worktree and branch.

    Returns the archived tip (None when the branch never existed).
    """
    git, repo = project.git, project.repo
    branch = session.branch or task.branch
    worktree = Path(session.worktree) if session.worktree else None
    # The branch is followed by name, never through the worktree's HEAD, and only as a plain ref
    # (a symbolic ref is UnsafeBranch: the branch check after a turn puts one back).
    if worktree is not None and worktree.is_dir() and git.rev_parse(f"refs/heads/{branch}", cwd=repo):
        message = f"corral: work in progress saved before {why}\n\nCorral-Task: {task.id}"
        git.save_work(worktree, f"refs/heads/{branch}", message)
    tip = git.branch_value(f"refs/heads/{branch}", cwd=repo)
    if tip is not None:
        # The archive's reflog keeps every tip it held (a task reopened and accepted again moves it).
        git.update_ref(
            archive_ref(task),
            tip,
            cwd=repo,
            message=f"corral: {branch} archived before {why}: {task.goal}",
            create_reflog=True,
        )
    if worktree is not None:
        git.worktree_remove(worktree, cwd=repo)
    if tip is not None:
        delete_task_branch(git, repo, branch, expected=tip)  # a commit made after the archive is never lost
        git.delete_ref(f"refs/corral/verified/{task.ref}", cwd=repo)  # the branch's verified tip goes with it
    return tip


def has_agent_work(project: Project, tx: Tx, task: Task) -> bool:
    """Whether any session's branch or the archive holds commits beyond that session's base."""
    git, repo = project.git, project.repo
    tips = [f"refs/heads/{task.branch}", archive_ref(task)]
    for session in tx.sessions(task.id):
        if not session.base_commit:
            continue
        for tip in tips:
            if git.ref_exists(tip, cwd=repo) and git.count_commits(session.base_commit, tip, cwd=repo) > 0:
                return True
    return False


def restore(project: Project, task: Task, base_commit: str | None) -> Workspace:
    """Bring a task's branch and worktree back from its archive (or its surviving branch)."""
    git, repo = project.git, project.repo
    path = project.paths.worktree(task.ref)
    if path.exists() or path.is_symlink():
        raise PrepareFailed(
            f"Something already exists at {path}, where task {task.ref}'s worktree goes.",
            hint="Move it aside, then reopen the task again.",
        )
    branch_ref = f"refs/heads/{task.branch}"
    new_branch = not git.ref_exists(branch_ref, cwd=repo)
    tip = git.rev_parse(archive_ref(task), cwd=repo) if new_branch else git.rev_parse(branch_ref, cwd=repo)
    if tip is None:
        raise PrepareFailed(
            f"Task {task.ref} has neither a branch nor an archived tip to restore.",
            hint="Its work is gone from git; reopen cannot bring it back.",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with worktree_lock(project):
        try:
            git.worktree_add(path, task.branch, tip, cwd=repo, new_branch=new_branch)
        except GitError as exc:
            git.worktree_remove(path, cwd=repo)
            if new_branch:
                delete_task_branch(git, repo, task.branch)
            raise PrepareFailed(f"corral could not restore {task.ref}'s worktree: {exc.message}") from exc
    return Workspace(path, task.branch, base_commit or tip)
