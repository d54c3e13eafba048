"""The --json shapes of records whose output is their fields, as they were written before msgspec encoded them:
the same keys, in the same order, with the same values."""

from __future__ import annotations

import json
from collections.abc import Mapping

from corral.engine.daemons import DaemonState
from corral.engine.operations.board import Board
from corral.engine.operations.doctor import Check
from corral.engine.operations.preflight import HarnessReport
from corral.engine.operations.reviewed import Moved
from corral.engine.read.checkout import CheckoutFinding
from corral.engine.recovery.destination import Kept
from corral.store.copy import Copied


def same(doc: object, old: Mapping[str, object]) -> None:
    """``doc`` is ``old``, key for key and in order, and serializes to the very same text."""
    assert isinstance(doc, dict) and list(doc) == list(old)
    assert json.dumps(doc) == json.dumps(old)


def test_a_check() -> None:
    same(Check("git", "ok", "git 2.43").to_json(), {"name": "git", "status": "ok", "message": "git 2.43", "hint": None})


def test_a_harness_report_and_its_derived_ok() -> None:
    report = HarnessReport("claude", "claude", True, "/bin/claude", "1.0", True, "CLAUDE_KEY", None, None, "plan")
    old = {
        "name": "claude",
        "executable": "claude",
        "found": True,
        "path": "/bin/claude",
        "version": "1.0",
        "logged_in": True,
        "login_source": "CLAUDE_KEY",
        "problem": None,
        "hint": None,
        "read_only": "plan",
        "login_hint": None,
        "ok": True,
    }
    same(report.to_json(), old)
    assert HarnessReport("codex", "codex", False).to_json()["ok"] is False


def test_a_daemon_state() -> None:
    state = DaemonState(True, 42, "2026-01-01T00:00:00Z", None, "http://127.0.0.1:1/mcp", ("/r/a", "/r/b"))
    old = {
        "running": True,
        "pid": 42,
        "started_at": "2026-01-01T00:00:00Z",
        "last_tick": None,
        "mcp_url": "http://127.0.0.1:1/mcp",
        "projects": ["/r/a", "/r/b"],
        "dashboard_url": None,
    }
    same(state.to_json(), old)


def test_a_copy() -> None:
    counts = {"tasks": 3, "turns": 9}
    doc = Copied(counts, "abc").to_json()
    same(doc, {"counts": {"tasks": 3, "turns": 9}, "checksum": "abc"})
    assert doc["counts"] is not counts  # a copy: the output never aliases the record


def test_what_a_destination_update_kept() -> None:
    kept = Kept("could not restore", "/w", "stash@{0}", "git stash pop")
    same(
        kept.to_json(),
        {"message": "could not restore", "worktree": "/w", "stash": "stash@{0}", "command": "git stash pop"},
    )


def test_a_checkout_finding() -> None:
    finding = CheckoutFinding("stale-index", "/w", "main", "the index is stale", "corral repair", {"paths": ["a"]})
    old = {
        "code": "stale-index",
        "worktree": "/w",
        "branch": "main",
        "message": "the index is stale",
        "hint": "corral repair",
        "details": {"paths": ["a"]},
    }
    same(finding.to_json(), old)


def test_what_came_since_a_review() -> None:
    moved = Moved("corral/t-1", "a" * 40, "b" * 40, ["bbbbbbb add x"], 1, False)
    old = {
        "branch": "corral/t-1",
        "since": "a" * 40,
        "tip": "b" * 40,
        "commits": ["bbbbbbb add x"],
        "count": 1,
        "rewritten": False,
    }
    same(moved.to_json(), old)


def test_a_board() -> None:
    groups = [{"needs": "review", "title": "To review", "rows": [{"ref": "t-1"}]}]
    board = Board("2026-01-01T00:00:00.000000Z", [{"name": "r", "path": "/r"}], groups, [], ["/gone: unreadable"])
    old = {
        "at": "2026-01-01T00:00:00.000000Z",
        "projects": [{"name": "r", "path": "/r"}],
        "groups": groups,
        "finished": [],
        "problems": ["/gone: unreadable"],
    }
    same(board.to_json(), old)
