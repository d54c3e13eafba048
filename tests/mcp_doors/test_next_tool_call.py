"""MCP answers carry the next step as the tool call that takes it, and number turns as ``show`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp_doors.test_builder_stdio import error, ok, session

#: A harness that commits a little work and says so.
WORKER = "sh -c 'echo work >> work.txt && git add -A && git commit -qm work && echo finished'"


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", WORKER)
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")


def test_the_next_step_is_a_tool_call_that_works_as_given(repo: Path, worker: None) -> None:
    created, started, waited = session(
        repo,
        ("create", {"goal": "Add work", "ref": "job"}),
        ("start", {"task": "job"}),
        ("wait", {"task": "job"}),
    )
    assert ok(created)["next"] == {"tool": "start", "arguments": {"task": "job"}}
    assert ok(started)["next"] == {"tool": "wait", "arguments": {"task": "job"}}
    rested = ok(waited)
    assert rested["task"]["status"] == "blocked" and rested["task"]["status_meaning"] == "waiting for you"
    step = rested["next"]
    assert step == {"tool": "diff", "arguments": {"task": "job"}}  # review first, as the CLI's Next says
    assert [(t["sequence"], t["exchange"]) for t in rested["turns"]] == [(1, 1), (2, 1)]
    diffed, logged, missing = session(
        repo,
        (step["tool"], step["arguments"]),
        ("logs", {"task": "job", "turn": 1}),
        ("logs", {"task": "job", "turn": 2}),
    )
    assert "work.txt" in ok(diffed)["diff"]
    assert ok(logged)["turn"] == 1
    assert error(missing)["code"] == "no-such-turn"
