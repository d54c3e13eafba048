"""accept works out the squash beside pre-flight's status scan (``accept._Ahead``): the merge, its conflict-marker
patch and its commit, taken by the merge phase only for the very commits it merges. A target that moved in
between is merged again in line; an accept refused at pre-flight leaves no git of its own running; a squash
that adds conflict markers is refused as before, with nothing made of it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from corral.adapters.git import subcommand
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.errors import AcceptRefused, ConflictMarkers
from tests.conftest import git
from tests.review.test_accept_git_work import blocked, commit_file, recorded


def _ahead_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "corral-accept-ahead"]


def test_the_squash_worked_out_ahead_is_the_one_that_lands(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "early", {"early.txt": "early\n"})
    before = git(repo, "rev-parse", "main")
    tip = git(repo, "rev-parse", "corral/early")
    calls = recorded(proj, monkeypatch)
    result = accepting.accept(proj, "early", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    names = [subcommand(args) for args in calls]
    assert [names.count(name) for name in ("merge-tree", "diff", "commit-tree")] == [1, 1, 1]  # each once: ahead
    assert git(repo, "rev-parse", "main") == result.commit
    assert git(repo, "rev-parse", "main^") == before
    assert git(repo, "rev-parse", "main^{tree}") == git(repo, "merge-tree", "--write-tree", before, tip)
    assert _ahead_threads() == []


def test_a_target_moved_after_pre_flight_is_merged_again_onto_its_new_tip(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "moved", {"moved.txt": "task\n"})
    seen = git(repo, "rev-parse", "main")
    landed_first: list[str] = []

    def report(event: dict[str, object]) -> None:
        if event["event"] == "plan":  # after pre-flight (the squash worked out onto `seen`), before the merge phase
            commit_file(repo, "theirs.txt", "landed meanwhile\n")
            landed_first.append(git(repo, "rev-parse", "main"))

    calls = recorded(proj, monkeypatch)
    result = accepting.accept(proj, "moved", actor=Actor.HUMAN, report=report)
    assert result.task.status is Status.COMPLETE and landed_first and landed_first[0] != seen
    assert git(repo, "rev-parse", "main^") == landed_first[0]  # onto the new tip, never the one pre-flight saw
    assert git(repo, "show", "main:theirs.txt") == "landed meanwhile"
    assert git(repo, "show", "main:moved.txt") == "task"
    names = [subcommand(args) for args in calls]
    assert names.count("merge-tree") == 2  # ahead onto `seen`, then again in line onto the new tip
    assert names.count("commit-tree") == 2
    assert _ahead_threads() == []


def test_an_accept_refused_at_pre_flight_leaves_no_git_of_its_own_running(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    task = blocked(proj, agent, "dirty", {"dirty.txt": "work\n"})
    with proj.store.read() as tx:
        worktree = Path(tx.get_session(tx.get_task(task.id).session_id).worktree)
    (worktree / "left.txt").write_text("not committed\n")
    before = git(repo, "rev-parse", "main")
    calls = recorded(proj, monkeypatch)
    with pytest.raises(AcceptRefused, match="uncommitted changes"):
        accepting.accept(proj, "dirty", actor=Actor.HUMAN)
    assert "merge-tree" in [subcommand(args) for args in calls]  # worked out beside the scan that refused it
    assert _ahead_threads() == []  # and done before the refusal was said
    assert git(repo, "rev-parse", "main") == before
    with proj.store.read() as tx:
        assert tx.task_by_ref("dirty").status is Status.BLOCKED


def test_a_squash_adding_conflict_markers_worked_out_ahead_is_refused_and_no_commit_made(  # type: ignore[no-untyped-def]
    proj, agent, repo: Path, monkeypatch
) -> None:
    marked = "<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n"
    blocked(proj, agent, "marks", {"marks.txt": marked})
    before = git(repo, "rev-parse", "main")
    calls = recorded(proj, monkeypatch)
    with pytest.raises(ConflictMarkers):
        accepting.accept(proj, "marks", actor=Actor.HUMAN)
    names = [subcommand(args) for args in calls]
    assert "commit-tree" not in names  # the patch opens a region: nothing is made of it, ahead or in line
    assert git(repo, "rev-parse", "main") == before
    assert _ahead_threads() == []
    with proj.store.read() as tx:
        assert tx.task_by_ref("marks").status is Status.BLOCKED


def test_markers_a_person_means_land_from_the_squash_worked_out_ahead(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    marked = "<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n"
    blocked(proj, agent, "meant", {"meant.txt": marked})
    calls = recorded(proj, monkeypatch)
    result = accepting.accept(proj, "meant", actor=Actor.HUMAN, allow_markers=True)
    assert result.task.status is Status.COMPLETE
    names = [subcommand(args) for args in calls]
    assert "diff" not in names and names.count("commit-tree") == 1  # no patch read; the commit made once, ahead
    assert git(repo, "show", "main:meant.txt") == marked.rstrip("\n")
    assert _ahead_threads() == []


def test_a_packed_target_is_listed_once_and_merged_beside_the_scan(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "packed", {"packed.txt": "packed\n"})
    git(repo, "gc", "-q", "--prune=now")  # every object and ref packed: the files answer nothing, one listing does
    before = git(repo, "rev-parse", "main")
    calls = recorded(proj, monkeypatch)
    result = accepting.accept(proj, "packed", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    names = [subcommand(args) for args in calls]
    assert names.count("for-each-ref") == 1  # read once, before the scan, for the merge ahead and pre-flight
    assert names.index("for-each-ref") < names.index("status")
    assert [names.count(name) for name in ("merge-tree", "diff", "commit-tree")] == [1, 1, 1]
    assert len(names) == 8
    assert git(repo, "rev-parse", "main^") == before and git(repo, "show", "main:packed.txt") == "packed"
    assert _ahead_threads() == []
