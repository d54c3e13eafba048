"""Holding a read-only turn to read-only: its branch and worktree before, compared after, changes kept aside.

Every harness gets its own read-only mode where it has one (docs/harnesses.md); behind
all of them corral compares. :func:`take` records the state before the turn — the branch,
its tip, and a stash-like snapshot of the person's uncommitted work (the index's tree and
the worktree's tree, untracked files included; ignored files are outside git's view and
outside this one). :func:`keep_aside` runs after the turn: when the branch, HEAD, the index
or the worktree differ from that snapshot, it first saves the after-state on
``refs/corral/kept/<ref>/<turn>`` (a commit shaped like a stash: its tree is the worktree,
its first parent the branch tip the agent left, its second the index), then puts the
branch back on its before-tip and the index and worktree back to their before-state,
pre-existing uncommitted changes included. Save first, act second: a crash between the two
leaves the kept ref, and calling :func:`keep_aside` again finishes the revert (it is
idempotent). This namespace is apart from ``refs/corral/archive/<ref>``, which ``reopen``
restores.

``chat`` calls :func:`snapshot` before it hands the terminal to the agent and
:func:`restore` after; the supervisor of an ``ask`` does the same around its work phase,
and the reconciler does it again for a turn whose receipt carries no result (a crash).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, convert, to_builtins

from corral import crashpoints
from corral.adapters.git import GIT_ENV, Git
from corral.errors import GitError

if TYPE_CHECKING:  # the record types only: reading a protocol file never loads the project
    from corral.domain.records import Session, Task
    from corral.engine.project import Project

KEPT_PREFIX = "refs/corral/kept/"
#: How many changed paths a kept-aside record lists (its count is whole).
PATHS_KEPT = 200
_ZERO = "0" * 40
#: In-progress operation markers an agent may leave behind; the revert clears them.
_PSEUDO_REFS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD")


def kept_ref(task_ref: str, turn: int | str) -> str:
    """Where a read-only turn's changes are kept: ``refs/corral/kept/<ref>/<turn>``."""
    return f"{KEPT_PREFIX}{task_ref}/{turn}"


class Before(Struct, frozen=True):
    """A worktree's state before a read-only turn. ``error`` says why it could not be taken."""

    branch: str
    head: str | None
    index_tree: str | None = None
    worktree_tree: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = to_builtins(self)
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Before:
        """The state in a chat's hold; a field of the wrong type raises ``ValueError`` (msgspec's
        ``ValidationError``) naming it."""
        return convert(dict(data), cls)


class Kept(Struct, frozen=True):
    """What a read-only turn changed and corral kept aside (then reverted, when ``reverted``)."""

    ref: str
    commit: str
    before: str
    after: str | None  # the branch tip the agent left
    commits: int  # commits the agent added on the branch
    paths: tuple[str, ...]  # changed paths, committed or not (the first PATHS_KEPT)
    path_count: int
    reverted: bool
    error: str | None = None  # why the revert did not finish

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = to_builtins(self)
        return doc


def _git_dir(git: Git, worktree: Path) -> Path:
    out = git.out("rev-parse", "--absolute-git-dir", cwd=worktree)
    return Path(out)


def _with_index(git: Git, worktree: Path, index: Path, *args: str) -> str:
    """Run git with another index file (``GIT_INDEX_FILE``): the person's index is never touched."""
    env = {**GIT_ENV, "GIT_INDEX_FILE": str(index)}
    done = git.runner.run([git.executable, *args], cwd=str(worktree), env=env, timeout=git.limit_for(args))
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise GitError(f"git {args[0]} failed: {detail[-1] if detail else f'exit {done.returncode}'}")
    return done.stdout.strip()


def trees(git: Git, worktree: Path) -> tuple[str, str]:
    """(index tree, worktree tree): what is staged, and every file git sees (untracked included)."""
    import tempfile  # only a read-only turn pays for it

    index_tree = git.out("write-tree", cwd=worktree)
    real_index = _git_dir(git, worktree) / "index"
    with tempfile.TemporaryDirectory(prefix="corral-ro-") as tmp:
        index = Path(tmp) / "index"
        if real_index.exists():
            index.write_bytes(real_index.read_bytes())
        _with_index(git, worktree, index, "add", "--all", "--", ".")
        worktree_tree = _with_index(git, worktree, index, "write-tree")
    return index_tree, worktree_tree


def _head(git: Git, worktree: Path) -> str | None:
    return git.rev_parse("HEAD", cwd=worktree)


def _branch_tip(git: Git, worktree: Path, branch: str) -> str | None:
    return git.rev_parse(f"refs/heads/{branch}", cwd=worktree)


def _on_branch(git: Git, worktree: Path, branch: str) -> bool:
    done = git.run("symbolic-ref", "-q", "HEAD", cwd=worktree, check=False)
    return done.returncode == 0 and done.stdout.strip() == f"refs/heads/{branch}"


def take(git: Git, worktree: Path, branch: str) -> Before:
    """The worktree's state now, before a read-only turn; never raises (``error`` says what failed)."""
    try:
        head = _branch_tip(git, worktree, branch)
        index_tree, worktree_tree = trees(git, worktree)
        return Before(branch, head, index_tree, worktree_tree)
    except (GitError, OSError) as exc:
        return Before(branch, None, error=str(exc)[:300])


def snapshot(project: Project, session: Session) -> Before:
    """:func:`take` for a session's worktree and branch."""
    assert session.worktree is not None and session.branch is not None
    return take(project.git, Path(session.worktree), session.branch)


def _changed(git: Git, worktree: Path, before: Before) -> tuple[bool, str | None, str, str]:
    """(changed?, branch tip now, index tree now, worktree tree now)."""
    tip = _branch_tip(git, worktree, before.branch)
    index_tree, worktree_tree = trees(git, worktree)
    moved = (
        tip != before.head
        or not _on_branch(git, worktree, before.branch)
        or index_tree != before.index_tree
        or worktree_tree != before.worktree_tree
        or any(git.rev_parse(p, cwd=worktree) for p in _PSEUDO_REFS)
    )
    return moved, tip, index_tree, worktree_tree


def _kept_commit(
    git: Git, worktree: Path, before: Before, after_head: str | None, index_tree: str, worktree_tree: str, label: str
) -> str:
    """A stash-shaped commit of the after-state: tree = the worktree, parents = the tip left and the index."""
    base = after_head or before.head
    assert base is not None
    index_commit = git.commit_tree(index_tree, [base], f"index of {label}", cwd=worktree)
    message = f"corral: kept aside from {label}\n\nThe branch was at {before.head} before the turn.\n"
    return git.commit_tree(worktree_tree, [base, index_commit], message, cwd=worktree)


def _paths(git: Git, worktree: Path, before: Before, kept: str) -> list[str]:
    assert before.worktree_tree is not None
    out = git.run("diff", "--name-only", "--no-renames", "-z", before.worktree_tree, kept, cwd=worktree, check=False)
    return [p for p in out.stdout.split("\0") if p]  # as git stores them, never quoted


def _count(git: Git, worktree: Path, before: str, after: str | None) -> int:
    if not after or after == before:
        return 0
    out = git.run("rev-list", "--count", f"{before}..{after}", cwd=worktree, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def _revert(git: Git, worktree: Path, before: Before, worktree_tree: str) -> None:
    """Branch back on its before-tip, HEAD on the branch, worktree and index to their before-state."""
    assert before.head and before.index_tree and before.worktree_tree
    for pseudo in _PSEUDO_REFS:
        git.run("update-ref", "-d", pseudo, cwd=worktree, check=False)
    git.run("update-ref", f"refs/heads/{before.branch}", before.head, cwd=worktree)
    git.run("symbolic-ref", "HEAD", f"refs/heads/{before.branch}", cwd=worktree)
    # The index first holds every file the agent left (so nothing it made is untracked), then
    # moving to the before-worktree removes what it added and writes back what it changed.
    git.run("read-tree", "--reset", worktree_tree, cwd=worktree)
    git.run("read-tree", "--reset", "-u", before.worktree_tree, cwd=worktree)
    git.run("read-tree", "--reset", before.index_tree, cwd=worktree)
    git_dir = _git_dir(git, worktree)
    for name in ("MERGE_MSG", "MERGE_MODE", "SQUASH_MSG"):
        try:
            os.unlink(git_dir / name)
        except OSError:
            pass


def keep_aside(git: Git, worktree: Path, before: Before, ref: str, label: str) -> Kept | None:
    """After a read-only turn: None when nothing changed; else the after-state saved on ``ref``, then reverted.

    Idempotent: when ``ref`` already holds a kept commit (a crash came between saving and
    reverting), it is reused and the revert is finished. Never raises: a revert that could
    not finish says why in ``error`` (the kept ref still holds everything).
    """
    if before.error is not None or before.head is None or before.worktree_tree is None:
        return None
    try:
        moved, tip, index_tree, worktree_tree = _changed(git, worktree, before)
    except (GitError, OSError) as exc:
        existing = git.rev_parse(ref, cwd=worktree) if git.ref_exists(ref, cwd=worktree) else None
        if existing is None:
            return None
        return Kept(ref, existing, before.head, None, 0, (), 0, False, f"git could not be read: {exc}"[:300])
    existing = git.rev_parse(ref, cwd=worktree) if git.ref_exists(ref, cwd=worktree) else None
    if not moved:
        if existing is None:
            return None
        return _record(git, worktree, before, ref, existing, reverted=True)
    after_head = tip if tip is not None else _head(git, worktree)
    if existing is None:
        commit = _kept_commit(git, worktree, before, after_head, index_tree, worktree_tree, label)
        done = git.run("update-ref", ref, commit, _ZERO, cwd=worktree, check=False)  # save first
        existing = commit if done.returncode == 0 else git.rev_parse(ref, cwd=worktree)
        if existing is None:  # it could not be saved: nothing is reverted unsaved
            why = (done.stderr or done.stdout).strip()[-200:]
            return _record(git, worktree, before, ref, commit, reverted=False, error=f"{ref} not written: {why}")
        crashpoints.hit("read-only.kept")
    try:
        _revert(git, worktree, before, worktree_tree)
    except (GitError, OSError) as exc:
        return _record(git, worktree, before, ref, existing, reverted=False, error=str(exc)[:300])
    return _record(git, worktree, before, ref, existing, reverted=True)


def _record(
    git: Git, worktree: Path, before: Before, ref: str, commit: str, *, reverted: bool, error: str | None = None
) -> Kept:
    assert before.head is not None
    after = git.rev_parse(f"{commit}^1", cwd=worktree)
    paths = _paths(git, worktree, before, commit)
    return Kept(
        ref=ref,
        commit=commit,
        before=before.head,
        after=after,
        commits=_count(git, worktree, before.head, after),
        paths=tuple(paths[:PATHS_KEPT]),
        path_count=len(paths),
        reverted=reverted,
        error=error,
    )


def restore(project: Project, task: Task, session: Session, before: Before, turn: int | str) -> Kept | None:
    """:func:`keep_aside` for a task's session after its read-only turn ``turn`` (its sequence)."""
    assert session.worktree is not None
    ref = kept_ref(task.ref, turn)
    return keep_aside(project.git, Path(session.worktree), before, ref, f"read-only turn {turn} of {task.ref}")
