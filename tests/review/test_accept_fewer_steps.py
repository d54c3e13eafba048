"""What accept does in fewer steps, and what each change means for a kill in the middle: its in-flight mark
written with the move to ``merging`` (one transaction), the checked-out target brought along before the swap
(as ``merge --squash`` before ``commit``) and taken back when the swap never came, and a removal's renamed
directories deleted by one process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from corral.domain import conflict_markers
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations.refresh import settle
from corral.engine.recovery import in_flight, removals
from tests.conftest import git
from tests.review.test_accept import blocked_with, work


def test_the_mark_and_merging_are_one_change_and_a_kill_there_is_put_back(proj, agent, repo):
    blocked_with(proj, agent, "one", work("one.txt", "1\n"))
    with proj.store.read() as tx:
        changes_before = len(tx.status_changes(tx.task_by_ref("one").id))
    died = subprocess.run(
        [sys.executable, "-m", "corral", "accept", "one"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "CORRAL_CRASH_AT": "accept.marked", "CORRAL_CRASH_HOW": "kill"},
    )
    assert died.returncode == -9, died.stderr
    with proj.store.read() as tx:
        task = tx.task_by_ref("one")
        changes = tx.status_changes(task.id)
    # Killed at its mark: already merging, with the status to restore beside it (never the one without the other).
    assert task.status is Status.MERGING
    assert task.metadata[in_flight.MARKER] == Status.BLOCKED.value
    assert len(changes) == changes_before + 1
    before = git(repo, "rev-parse", "main")
    settle(proj)
    with proj.store.read() as tx:
        task = tx.task_by_ref("one")
    assert task.status is Status.BLOCKED and in_flight.MARKER not in task.metadata
    assert git(repo, "rev-parse", "main") == before  # nothing merged
    assert accepting.accept(proj, "one", actor=Actor.HUMAN).task.status is Status.COMPLETE  # and it accepts again


def test_a_removal_deletes_the_worktree_and_its_administrative_directory(proj, agent, repo):
    blocked_with(proj, agent, "gone", work("gone.txt", "g\n"))
    worktree = proj.paths.worktree("gone")
    accepting.accept(proj, "gone", actor=Actor.HUMAN)
    assert not worktree.exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # git forgot it
    trash = removals.trash_dir(proj)
    deadline = time.monotonic() + 30
    while [e.name for e in trash.iterdir() if e.is_dir()] and time.monotonic() < deadline:
        time.sleep(0.05)  # the detached rm deletes both renamed directories
    assert [e.name for e in trash.iterdir() if e.is_dir()] == []


def test_the_marker_opening_accept_looks_for_is_the_readers() -> None:
    assert accepting.OPENING == conflict_markers.OPENING


def _local(repo) -> tuple[list[str], list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The checkout's local changes: unstaged, staged, untracked."""
    names = [git(repo, *args).split() for args in (("diff", "--name-only"), ("diff", "--cached", "--name-only"))]
    return names[0], names[1], git(repo, "ls-files", "--others", "--exclude-standard").split()


def _kill_at(repo, ref: str, point: str) -> None:  # type: ignore[no-untyped-def]
    died = subprocess.run(
        [sys.executable, "-m", "corral", "accept", ref],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "CORRAL_CRASH_AT": point, "CORRAL_CRASH_HOW": "kill"},
    )
    assert died.returncode == -9, died.stderr


def test_the_checkout_comes_along_before_the_swap_and_goes_back_when_the_swap_never_came(proj, agent, repo):
    blocked_with(proj, agent, "early", work("early.txt", "merged\n"))
    old = git(repo, "rev-parse", "main")
    (repo / "README.md").write_text("my local edit, not where the merge goes\n")
    (repo / "mine.txt").write_text("my untracked file\n")
    _kill_at(repo, "early", "accept.before-update-ref")
    # Brought along as `merge --squash` brings a checkout along before `commit`: the ref has not moved.
    assert git(repo, "rev-parse", "main") == old
    assert (repo / "early.txt").read_text() == "merged\n"
    assert _local(repo) == (["README.md"], ["early.txt"], ["mine.txt"])
    settle(proj)  # the swap never came: the checkout goes back, the person's changes stay
    assert not (repo / "early.txt").exists()
    assert (repo / "README.md").read_text() == "my local edit, not where the merge goes\n"
    assert (repo / "mine.txt").read_text() == "my untracked file\n"
    assert _local(repo) == (["README.md"], [], ["mine.txt"])
    with proj.store.read() as tx:
        assert tx.task_by_ref("early").status is Status.BLOCKED
    result = accepting.accept(proj, "early", actor=Actor.HUMAN)  # then it accepts, the changes kept
    assert result.task.status is Status.COMPLETE and (repo / "early.txt").read_text() == "merged\n"
    assert _local(repo) == (["README.md"], [], ["mine.txt"])


def test_a_change_in_the_merges_way_is_stashed_and_the_checkout_comes_along_after_the_swap(proj, agent, repo):
    (repo / "shared.txt").write_text("base\n")
    git(repo, "add", "shared.txt")
    git(repo, "commit", "-qm", "a file the task changes")
    blocked_with(proj, agent, "late", work("shared.txt", "the agent's\n"))
    (repo / "shared.txt").write_text("mine, uncommitted\n")  # in the merge's way: read-tree refuses
    result = accepting.accept(proj, "late", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "show", "main:shared.txt") == "the agent's"
    assert result.conflict is not None  # the person's version and the merge's meet: kept in the stash, named
    assert "stash" in result.conflict.message
