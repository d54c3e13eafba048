"""Trust is decided from a turn's provenance once per scan, when it first meets the log.

The log is Claude Code's stream-json calling corral's shell (``mcp__corral__bash``) with an intent:
honoured for a confined run, ordinary arguments for any other, and a bounded wait, then the
exact-retry rule with a note, when the provenance cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import shell_exit_code
from corral.adapters.harness.claude import ClaudeHarness
from corral.domain.incidents import FailureState, Label, reduce
from corral.engine.runtime import journal_scan, provenance
from corral.engine.runtime.journal_scan import Cursors, scan

PROVENANCE = {
    "task_id": "t1",
    "session_id": "s1",
    "command_id": "c1",
    "sequence": 1,
    "harness": "claude",
    "launched_at": "2026-12-01T00:00:00Z",
}


def call(n: int, command: str, code: int, **intent: Any) -> list[bytes]:
    """One call of corral's shell as Claude Code logs it; its result as corral's server answers it
    (an error unless the exit code is 0 or one the intent declared)."""
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "mcp__corral__bash", "input": {"command": command, **intent}}
    expected = code in intent.get("expectedExitCodes", [])
    doc = {"corral_shell": 1, "exit_code": code, "expected": expected, "stdout": "", "stderr": "boom" if code else ""}
    end = {
        "type": "tool_result",
        "tool_use_id": f"toolu_{n}",
        "is_error": code != 0 and not expected,
        "content": [{"type": "text", "text": json.dumps(doc)}],
    }
    return [
        json.dumps({"type": "assistant", "message": {"content": [use]}}).encode(),
        json.dumps({"type": "user", "message": {"content": [end]}}).encode(),
    ]


def log_of(tmp_path: Path, sandbox: str | None) -> Path:
    turn = tmp_path / "turns" / "1"
    turn.mkdir(parents=True)
    if sandbox is not None:
        provenance.write(turn, {**PROVENANCE, "sandbox": sandbox})
    lines = [
        *call(1, "make build --fast", 2, operationId="build"),
        *call(2, "make build", 0, operationId="build"),
        *call(3, "grep -q needle hay", 1, expectedExitCodes=[1]),
    ]
    (turn / "output.log").write_bytes(b"\n".join(lines) + b"\n")
    return turn / "output.log"


def state(log: Path, cursors: Cursors, **kw: Any) -> tuple[FailureState, list[dict[str, Any]]]:
    events = scan(log, ClaudeHarness(), "/wt", cursors, **kw)
    return reduce(FailureState(), events), events


def test_the_shells_structured_result_carries_the_exit_code_never_the_text() -> None:
    assert shell_exit_code(json.dumps({"corral_shell": 1, "exit_code": 3, "stdout": "exit_code: 0"})) == 3
    assert shell_exit_code('{"exit_code": 3}') is None  # not corral's shell's result
    assert shell_exit_code("exit_code: 3") is None
    assert shell_exit_code(json.dumps({"corral_shell": 1, "exit_code": True})) is None


def test_a_confined_runs_intents_are_honoured(tmp_path: Path) -> None:
    found, _ = state(log_of(tmp_path, "bwrap"), Cursors(tmp_path / "j"), final=True)
    by_label = {i.label for i in found.incidents.values()}
    # the build failed, then passed under the same operationId with other flags: recovered
    assert [i.label for i in found.incidents.values() if i.operation == "op:build"] == [Label.RECOVERED]
    # grep's no-match was declared: expected, not a failure that needs anyone
    assert Label.EXPECTED in by_label and found.needs_action == []


def test_an_unconfined_runs_intent_is_an_ordinary_argument(tmp_path: Path) -> None:
    for sandbox in ("off", None):  # launched unconfined, or from before provenance
        found, _ = state(log_of(tmp_path / (sandbox or "none"), sandbox), Cursors(None), final=True)
        labels = sorted(i.label.value for i in found.incidents.values())
        # exact rule: "make build --fast" and "make build" are two operations, so the first stays open
        assert labels == [Label.UNCLASSIFIED.value], labels


def test_unreadable_provenance_is_waited_for_then_the_exact_rule_applies_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = log_of(tmp_path, None)
    (log.parent / provenance.PROVENANCE).write_text("{not json")
    cursors = Cursors(tmp_path / "j")
    found, events = state(log, cursors)
    assert events == []  # the turn runs and the wait is young: nothing folded yet, nothing skipped
    clock = [1000.0]
    monkeypatch.setattr(journal_scan.time, "time", lambda: clock[0])
    cursors.waiting[str(log)] = 1000.0 - provenance.WAIT_SECONDS - 1
    found, events = state(log, cursors)
    assert any(e["kind"] == "incomplete" and "provenance" in e["id"] for e in events)
    assert Label.INCOMPLETE in {i.label for i in found.incidents.values()}
    assert not any(i.label is Label.RECOVERED for i in found.incidents.values())  # the exact rule
    # decided once per scan: provenance readable later does not change this scan's trust in the log
    (log.parent / provenance.PROVENANCE).write_text(json.dumps({**PROVENANCE, "sandbox": "bwrap"}))
    assert cursors.logs[str(log)]["trusted"] is False
    with log.open("ab") as fh:
        fh.write(b"\n".join(call(4, "make build", 0, operationId="build")) + b"\n")
    _again, more = state(log, cursors)
    assert not any(e["kind"] == "recovered" and "op:build" in json.dumps(e) for e in more)


def test_the_turn_ending_ends_the_wait(tmp_path: Path) -> None:
    log = log_of(tmp_path, None)
    (log.parent / provenance.PROVENANCE).write_bytes(b"")
    found, events = state(log, Cursors(None), final=True)
    assert events and Label.INCOMPLETE in {i.label for i in found.incidents.values()}


def _unreadable_then_exact(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A log scanned under the exact rule, its provenance unreadable, by a scan that is then saved:
    ``make test`` failed in it, and nothing retried it."""
    turn = tmp_path / "turns" / "1"
    turn.mkdir(parents=True)
    log = turn / "output.log"
    log.write_bytes(b"\n".join([*call(1, "make test", 2), *call(2, "make build", 0)]) + b"\n")
    (turn / provenance.PROVENANCE).write_text("{not json")
    cursors = Cursors(tmp_path / "j")
    (tmp_path / "j").mkdir(exist_ok=True)
    _found, events = state(log, cursors, final=True)
    cursors.save()
    return log, events


def _note(events: list[dict[str, Any]]) -> Any:
    found = reduce(FailureState(), events)
    return next(i for i in found.incidents.values() if "provenance-unreadable" in i.id)


def test_a_later_trusted_scan_closes_the_note_once_the_exact_rules_incidents_are_resolved(tmp_path: Path) -> None:
    log, events = _unreadable_then_exact(tmp_path)
    assert _note(events).label is Label.INCOMPLETE
    assert [i.label for i in reduce(FailureState(), events).incidents.values() if i.category == "tool"] == [
        Label.UNCLASSIFIED
    ]
    # The provenance is readable again, and a new scan (a restarted observer) decides anew: trusted.
    (log.parent / provenance.PROVENANCE).write_text(json.dumps({**PROVENANCE, "sandbox": "bwrap"}))
    with log.open("ab") as fh:  # a trusted-period failure of its own, and nothing that resolves the exact one
        fh.write(b"\n".join(call(4, "make lint", 2, operationId="lint")) + b"\n")
    later = Cursors(tmp_path / "j")
    more = scan(log, ClaudeHarness(), "/wt", later)
    assert later.logs[str(log)]["trusted"] is True
    assert _note(events + more).label is Label.INCOMPLETE  # the exact rule's failure is still open
    with log.open("ab") as fh:  # the same command again: its exact retry resolves what the exact rule left
        fh.write(b"\n".join(call(5, "make test", 0)) + b"\n")
    last = scan(log, ClaudeHarness(), "/wt", later)
    whole = reduce(FailureState(), events + more + last)
    assert _note(events + more + last).label is Label.RECOVERED
    # the trusted period's own failure (lint) never held the note open, and stays open itself
    assert [i.label for i in whole.incidents.values() if i.operation == "op:lint"] == [Label.UNCLASSIFIED]
    # closed once: further scans say nothing more of it
    assert not any("provenance-unreadable" in json.dumps(e) for e in scan(log, ClaudeHarness(), "/wt", later))


def test_a_scan_still_unable_to_read_the_provenance_keeps_the_note_open(tmp_path: Path) -> None:
    log, events = _unreadable_then_exact(tmp_path)
    with log.open("ab") as fh:
        fh.write(b"\n".join(call(5, "make test", 0)) + b"\n")
    again = Cursors(tmp_path / "j")  # restarted: the bounded wait applies again, then the exact rule
    more = scan(log, ClaudeHarness(), "/wt", again, final=True)
    assert again.logs[str(log)]["trusted"] is False
    # the exact retry resolved the failure, but no trusted scan has looked: the note stays, said once
    assert _note(events + more).label is Label.INCOMPLETE
    assert sum(1 for e in events + more if e["kind"] == "incomplete") == 1


def test_a_note_with_nothing_left_unresolved_closes_at_the_first_trusted_scan(tmp_path: Path) -> None:
    turn = tmp_path / "turns" / "1"
    turn.mkdir(parents=True)
    (turn / provenance.PROVENANCE).write_bytes(b"")
    log = turn / "output.log"
    log.write_bytes(b"\n".join(call(1, "make build", 0)) + b"\n")
    (tmp_path / "j").mkdir()
    first = Cursors(tmp_path / "j")
    events = scan(log, ClaudeHarness(), "/wt", first, final=True)
    first.save()
    assert _note(events).label is Label.INCOMPLETE
    # the next turn's log, confined and readable: a trusted scan of the same session's journal
    other = tmp_path / "turns" / "2"
    other.mkdir()
    provenance.write(other, {**PROVENANCE, "sequence": 2, "sandbox": "bwrap"})
    (other / "output.log").write_bytes(b"\n".join(call(2, "ls", 0)) + b"\n")
    more = scan(other / "output.log", ClaudeHarness(), "/wt", Cursors(tmp_path / "j"))
    assert _note(events + more).label is Label.RECOVERED
