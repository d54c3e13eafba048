"""Rows of a confined turn read as text — the command, its exit code and the first line of its stderr —
never as the JSON of corral's shell result; a refused failure_disposition is journaled as nothing."""

from __future__ import annotations

import json
from typing import Any

from corral.adapters.harness.base import SHELL_RESULT_KEY
from corral.domain.collector import Collector, ToolEnd, ToolStart
from corral.domain.incidents import SHELL_RESULT, FailureState, excerpt, reduce, tool_text
from corral.domain.intents import parse_intent
from corral.engine.read.incident_views import rows

CWD = "/work/tree"
SHELL = "mcp__corral__bash"


def result(**fields: Any) -> str:
    doc = {SHELL_RESULT_KEY: 1, "exit_code": 1, "timed_out": False, "expected": False}
    doc |= {"command": "npm test", "stderr": "", "stdout": "", "intent": {}, "ended_with_turn": False} | fields
    return json.dumps(doc)


def test_the_key_is_the_shell_s() -> None:
    assert SHELL_RESULT == SHELL_RESULT_KEY


def test_a_failed_shell_call_reads_as_its_command_exit_and_stderr() -> None:
    text = result(stderr="\nError: 2 tests failed\n  at x.js:1", stdout="x" * 5000)
    assert tool_text(text) == "npm test exited 1: Error: 2 tests failed"
    assert tool_text(result(stdout="only out\nmore")) == "npm test exited 1: only out"
    assert tool_text(result(exit_code=None, timed_out=True)) == "npm test timed out"
    assert tool_text(result(exit_code=None, ended_with_turn=True)) == "npm test ended with the turn"
    assert tool_text("plain text {not ours}") == "plain text {not ours}"


def test_a_journal_s_summary_cut_inside_the_json_reads_as_far_as_it_goes() -> None:
    """A journal written before rows read as text holds the result's JSON cut to an excerpt."""
    old = excerpt(
        "mcp__corral__bash failed: " + json.dumps({SHELL_RESULT_KEY: 1, "exit_code": 1, "stdout": "é\\" * 400})
    )
    assert tool_text(old).startswith("mcp__corral__bash failed: exited 1: é\\")


def test_a_row_of_a_confined_turn_is_text_in_the_journal_and_on_every_surface() -> None:
    collector = Collector("turns/1/output.log", trusted=True)
    args = {"command": "npm test", "operationId": "unit"}
    text = result(stderr="FAIL src/a.test.ts\n● a › b", stdout="x" * 3000)
    events = collector.fold(ToolStart("c1", SHELL, args, CWD, intent=parse_intent(args)), at=None)
    events += collector.fold(ToolEnd("c1", True, text, exit_code=1), at=None)
    (failure,) = events
    assert failure["summary"] == "mcp__corral__bash failed: npm test exited 1: FAIL src/a.test.ts"
    assert "corral_shell" not in json.dumps(events)
    (row,) = rows(reduce(FailureState(), events), history=True)
    assert row["summary"] == "mcp__corral__bash failed: npm test exited 1: FAIL src/a.test.ts"


def test_an_old_journal_s_json_row_is_shown_as_text() -> None:
    old = {
        "kind": "failure",
        "id": "tool:x",
        "operation": "op:unit",
        "category": "tool",
        "summary": excerpt("mcp__corral__bash failed: " + result(stderr="boom\nmore")),
    }
    (row,) = rows(reduce(FailureState(), [old]), history=True)
    assert row["summary"] == "mcp__corral__bash failed: npm test exited 1: boom"
