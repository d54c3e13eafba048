"""Incidents on the CLI's surfaces: show above the timeline, list's badge, corral failures, --json."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import CLI, FakeAgent

pytestmark = pytest.mark.timeout(90)


def _bash(command: str, *, fails: bool, output: str) -> dict[str, Any]:
    return {"tool": "Bash", "input": {"command": command}, "is_error": fails, "output": output}


def _run(corral: CLI, agent: FakeAgent, ref: str, *steps: dict[str, Any]) -> None:
    agent.script([{"init": True}, *steps, {"text": "All tests pass now."}, {"result": "All tests pass now."}])
    corral.ok("create", f"Make {ref} pass", "--ref", ref)
    corral.ok("start", ref)
    corral.ok("wait", ref, "--timeout", "60")


def test_a_command_failing_three_times_needs_action_on_every_surface(agent: FakeAgent, corral: CLI) -> None:
    failing = _bash("pytest -q", fails=True, output="FAILED tests/test_x.py::test_y")
    _run(corral, agent, "thrice", failing, failing, failing)

    shown = corral.ok("show", "thrice").stdout
    before_timeline = shown.split("Timeline:")[0]
    assert "Failures: 1 failure needs action" in before_timeline  # above the agent's own account
    assert "Action required ×3: Bash failed: FAILED tests/test_x.py::test_y  [output.log#byte=" in before_timeline
    assert "Work correctness was not inferred from lifecycle alone." in before_timeline
    assert "[1 needs action] Make thrice pass" in corral.ok("list").stdout

    listed = {t["ref"]: t for t in corral.json("list")["tasks"]}
    assert listed["thrice"]["needs_action"] == 1
    doc = corral.json("failures", "thrice")["failures"]
    assert doc["needs_action"] == 1 and doc["counts"]["Action required"] == 1
    (row,) = doc["rows"]
    assert row["label"] == "Action required" and row["category"] == "tool" and row["failures"] == 3
    assert row["evidence"].startswith("output.log#byte=")
    raw = corral.json("failures", "thrice", "--raw")["failures"]["rows"][0]
    assert raw["evidence"].startswith("/") and "/turns/1/output.log#byte=" in raw["evidence"]  # the whole path
    assert corral.json("show", "thrice")["incidents"]["rows"][0]["id"] == row["id"]


def test_an_exact_retry_recovers_and_another_commands_success_does_not(agent: FakeAgent, corral: CLI) -> None:
    _run(
        corral,
        agent,
        "exact",
        _bash("pytest -q", fails=True, output="FAILED 2"),
        _bash("ls", fails=False, output="ok"),  # another command's success: clears nothing
        _bash("make lint", fails=True, output="E501"),
        _bash("pytest -q", fails=False, output="2 passed"),  # the same command again: recovered
    )
    shown = corral.ok("show", "exact").stdout
    assert "Failures: No failures need action · 1 unclassified tool error · 1 recovered (history)" in shown
    assert "need action]" not in corral.ok("list").stdout
    history = corral.json("failures", "exact", "--history")["failures"]["rows"]
    assert sorted((r["label"], r["summary"]) for r in history) == [
        ("Recovered", "Bash failed: FAILED 2"),
        ("Unclassified failure observation", "Bash failed: E501"),
    ]
    text = corral.ok("failures", "exact").stdout.splitlines()
    assert text == [
        "No failures need action · 1 unclassified tool error · 1 recovered (history)",
        "Work correctness was not inferred from lifecycle alone.",
    ]


def test_failures_names_what_it_needs(corral: CLI) -> None:
    assert corral("failures").returncode == 2
    bad = corral("failures", "--log", "x.log")
    assert bad.returncode == 2 and "--harness" in bad.stderr
    assert corral("failures", "no-such-task").returncode == 4


def _pi_log(path: Any, failing: list[str]) -> Any:
    import json

    lines = []
    for n, command in enumerate(failing):
        args = {"command": command}
        lines.append({"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "bash", "args": args})
        result = {"content": [{"type": "text", "text": f"{command}: FAILED"}]}
        end = {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result}
        lines.append({**end, "isError": True})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_small_page_drops_incident_rows_before_the_notes_and_a_cursor_goes_on(corral: CLI, tmp_path: Any) -> None:
    log = _pi_log(tmp_path / "output.log", [f"make step{n}" for n in range(4)])
    args = ["failures", "--log", str(log), "--harness", "pi", "--history"]
    whole = corral.json(*args)["failures"]
    assert whole["rows_total"] == 4 and len(whole["rows"]) == 4 and whole["next_cursor"] is None
    small = corral.ok(*args, "--max-bytes", "450").stdout.splitlines()
    assert small[-2] == "Work correctness was not inferred from lifecycle alone."  # kept whole
    assert small[-1].startswith(f"More: corral failures --log {log} --harness pi --history --max-bytes 450 --cursor i")
    page = corral.json(*args, "--max-bytes", "450")["failures"]
    shown = len(page["rows"])
    assert 0 < shown < 4 and page["next_cursor"] == f"i{shown}"
    rest = corral.json(*args, "--cursor", page["next_cursor"])["failures"]
    assert [r["id"] for r in page["rows"] + rest["rows"]] == [r["id"] for r in whole["rows"]]
    tiny = corral.json(*args, "--max-bytes", "10")["failures"]
    # nothing fits: no row, and the note goes whole (never cut); a page never exceeds its budget
    assert tiny["rows"] == [] and tiny["note"] == "" and tiny["line"] == ""
    bad = corral(*args, "--cursor", "nope")
    assert bad.returncode == 2 and "not a cursor" in bad.stderr


def test_a_clean_turn_was_observed_and_says_so(agent: FakeAgent, corral: CLI) -> None:
    _run(corral, agent, "clean", _bash("pytest -q", fails=False, output="3 passed"))
    shown = corral.ok("show", "clean").stdout
    assert "Failures: No failures need action\n" in shown
    assert corral.ok("failures", "clean").stdout.splitlines()[0] == "No failures need action"


def test_a_task_never_observed_is_not_said_to_have_no_failures(corral: CLI) -> None:
    corral.ok("create", "Not started", "--ref", "fresh")
    assert corral.ok("failures", "fresh").stdout.splitlines()[0] == "No failures observed"


def test_a_missing_log_or_session_is_not_found(agent: FakeAgent, corral: CLI, tmp_path: Any) -> None:
    missing = corral("failures", "--log", str(tmp_path / "nothing.log"), "--harness", "pi")
    assert missing.returncode == 4 and "no log" in missing.stderr
    _run(corral, agent, "sess", _bash("true", fails=False, output=""))
    unknown = corral("failures", "sess", "--session", str(tmp_path))
    assert unknown.returncode == 4 and "has no session" in unknown.stderr


def test_a_symlink_where_the_journal_belongs_is_reported_never_read_as_all_clear(
    agent: FakeAgent, corral: CLI, tmp_path: Any
) -> None:
    import os
    from pathlib import Path

    _run(corral, agent, "linked", _bash("pytest -q", fails=True, output="FAILED"))
    doc = corral.json("show", "linked")
    paths = corral.json("paths")["paths"]
    journal = Path(paths["tasks"]) / doc["task"]["id"] / "sessions" / doc["session"]["id"] / "failures.jsonl"
    victim = tmp_path / "victim.txt"
    victim.write_text("not a journal\n")
    journal.unlink()
    os.symlink(victim, journal)
    text = corral.ok("failures", "linked").stdout
    assert "No failures need action" not in text.splitlines()[-2]
    assert "could not be read" in text
    assert victim.read_text() == "not a journal\n"
