"""`corral close`, `corral reject` and `corral reopen`."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from tests.cli.helpers import complete, create, json_error, no_traceback, park, state_paths, store_of, to_working
from tests.conftest import git


@pytest.mark.parametrize("how", ["close", "reject"])
def test_close_and_reject_with_m(corral, how: str) -> None:
    create(corral, "Ending", "--ref", "ending")
    doc = corral.json(how, "ending", "-m", "Duplicate of login-rework")
    assert doc["task"]["status"] == "abandoned"
    assert doc["archived"] is None  # never started: nothing to archive
    last = corral.json("show", "ending")["status_changes"][-1]
    assert (last["from"], last["to"], last["actor"], last["reason"]) == (
        "backlog",
        "abandoned",
        "human",
        "Duplicate of login-rework",
    )
    text = corral(how, "ending", "-m", "again")
    assert text.returncode == 3
    no_traceback(text)


@pytest.mark.parametrize("how", ["close", "reject"])
def test_the_reason_can_come_from_stdin(corral, how: str) -> None:
    create(corral, "Piped", "--ref", "piped")
    corral.ok(how, "piped", input="Won't do: the endpoint is going away")
    last = corral.json("show", "piped")["status_changes"][-1]
    assert last["to"] == "abandoned"
    assert last["reason"].strip() == "Won't do: the endpoint is going away"


@pytest.mark.parametrize("how", ["close", "reject"])
@pytest.mark.parametrize("args", [(), ("-m", ""), ("-m", "   ")], ids=["none", "empty", "blank"])
def test_a_missing_reason_is_a_usage_error(corral, how: str, args: tuple[str, ...]) -> None:
    create(corral, "Stays", "--ref", "stays")
    json_error(corral(how, "stays", *args, "--json", input=""), 2)
    assert corral.json("show", "stays")["task"]["status"] == "backlog"


def test_closing_an_abandoned_task_is_refused(corral) -> None:
    create(corral, "Twice", "--ref", "twice")
    corral.ok("reject", "twice", "-m", "wrong approach")
    err = json_error(corral("close", "twice", "-m", "again", "--json"), 3, "already-abandoned")
    assert "reopen" in (err["hint"] or "")
    assert len(corral.json("show", "twice")["status_changes"]) == 2


def test_closing_a_working_task_is_an_illegal_transition_naming_what_is_allowed(corral) -> None:
    create(corral, "Busy", "--ref", "busy")
    to_working(corral, "busy")
    err = json_error(corral("close", "busy", "-m", "stop it", "--json"), 3, "illegal-transition")
    for target in ("blocked", "conflict", "interrupted", "submitted"):
        assert target in err["message"], err["message"]
    assert "zombie" not in err["message"]
    assert corral.json("show", "busy")["task"]["status"] == "working"


def test_closing_a_complete_task_is_refused(corral) -> None:
    create(corral, "Merged", "--ref", "merged")
    complete(corral, "merged")
    err = json_error(corral("reject", "merged", "-m", "too late", "--json"), 3, "illegal-transition")
    assert "blocked" in err["message"]
    assert corral.json("show", "merged")["task"]["status"] == "complete"


def test_closing_a_blocked_task_with_a_session_ends_it(corral) -> None:
    create(corral, "Reviewed", "--ref", "reviewed")
    to_working(corral, "reviewed")
    assert park(corral, "reviewed") == "blocked"
    doc = corral.json("close", "reviewed", "-m", "not needed")
    assert doc["task"]["status"] == "abandoned"
    shown = corral.json("show", "reviewed")
    assert shown["session"]["outcome"] == "closed"
    assert shown["resting_cause"] is None


def test_reopen_an_abandoned_task_without_work_goes_to_backlog(corral) -> None:
    create(corral, "Come back", "--ref", "come-back")
    corral.ok("close", "come-back", "-m", "oops")
    doc = corral.json("reopen", "come-back")
    assert doc["task"]["status"] == "backlog"
    assert doc["next"] == "Start it: corral start come-back"
    changes = corral.json("show", "come-back")["status_changes"]
    assert [(c["from"], c["to"], c["actor"]) for c in changes] == [
        (None, "backlog", "human"),
        ("backlog", "abandoned", "human"),
        ("abandoned", "backlog", "human"),
    ]
    text = corral.ok("close", "come-back", "-m", "again")
    assert "abandoned" in text.stdout
    assert "come-back is backlog again." in corral.ok("reopen", "come-back").stdout


def test_reopen_a_task_that_is_not_finished_is_refused_in_words(corral) -> None:
    create(corral, "Not done", "--ref", "not-done")
    err = json_error(corral("reopen", "not-done", "--json"), 3, "illegal-transition")
    assert "backlog — not started yet" in err["message"]  # the status with what it means
    assert "complete or abandoned" in err["message"]  # what reopen takes
    assert "it can go to" not in err["message"]  # not the state machine's moves
    assert corral.json("show", "not-done")["task"]["status"] == "backlog"


def test_reopen_an_accepted_task_needs_a_reason(corral) -> None:
    create(corral, "Accepted", "--ref", "accepted")
    complete(corral, "accepted")
    err = json_error(corral("reopen", "accepted", "--json"), 2)
    assert "corral reopen accepted -m " in (err["hint"] or "")  # the same flag as close and reject
    assert corral.json("show", "accepted")["task"]["status"] == "complete"


def test_close_saves_and_archives_the_work_and_reopen_restores_it(corral, repo: Path) -> None:
    """Nothing is deleted unsaved: uncommitted changes are committed, the tip is kept under
    refs/corral/archive/<ref>, and reopen brings the worktree back (→ blocked, a new session)."""
    create(corral, "Real work", "--ref", "real-work")
    worktree = Path(state_paths(corral)["worktrees"]) / "real-work"
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "worktree", "add", "-q", "-b", "corral/real-work", str(worktree), base)
    (worktree / "done.txt").write_text("committed\n")
    git(worktree, "add", "done.txt")
    git(worktree, "commit", "-q", "-m", "agent work")
    (worktree / "wip.txt").write_text("not committed yet\n")
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref("real-work")
        assert task is not None
        first = tx.insert_session(task.id, worktree=str(worktree), branch="corral/real-work", base_commit=base)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        tx.park(task.id, Actor.SYSTEM, "turn ended")

    closed = corral.json("close", "real-work", "-m", "not now")
    archived = closed["archived"]
    assert archived == git(repo, "rev-parse", "refs/corral/archive/real-work")
    assert not worktree.exists()
    assert git(repo, "branch", "--list", "corral/real-work") == ""
    assert git(repo, "show", f"{archived}:wip.txt") == "not committed yet"
    assert git(repo, "show", f"{archived}:done.txt") == "committed"

    reopened = corral.json("reopen", "real-work")
    assert reopened["task"]["status"] == "blocked"
    assert (worktree / "wip.txt").read_text() == "not committed yet\n"
    assert git(repo, "rev-parse", "corral/real-work") == archived
    shown = corral.json("show", "real-work")
    assert shown["session"]["id"] != first.id
    assert shown["session"]["base_commit"] == base
    assert [(c["from"], c["to"]) for c in shown["status_changes"]][-2:] == [
        ("blocked", "abandoned"),
        ("abandoned", "blocked"),
    ]


def test_closing_work_in_text_says_where_it_is_kept(corral, repo: Path) -> None:
    create(corral, "Kept work", "--ref", "kept")
    worktree = Path(state_paths(corral)["worktrees"]) / "kept"
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "worktree", "add", "-q", "-b", "corral/kept", str(worktree), base)
    (worktree / "done.txt").write_text("committed\n")
    git(worktree, "add", "done.txt")
    git(worktree, "commit", "-q", "-m", "agent work")
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref("kept")
        assert task is not None
        tx.insert_session(task.id, worktree=str(worktree), branch="corral/kept", base_commit=base)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        tx.park(task.id, Actor.SYSTEM, "turn ended")
    out = corral.ok("reject", "kept", "-m", "wrong approach").stdout
    assert out.splitlines() == [
        "kept is abandoned (rejected).",
        "Its work is kept under refs/corral/archive/kept; corral reopen kept brings it back.",
    ]
    assert git(repo, "rev-parse", "refs/corral/archive/kept")
    assert "kept is blocked again." in corral.ok("reopen", "kept").stdout
