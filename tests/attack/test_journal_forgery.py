"""What an agent's output can do to the journal's identities and cursor records (docs/incidents.md).

The agent writes the text of its tool calls and their output; corral's scan reads them from the harness's
log. None of it may forge a ``cursor`` record, make a real failure's identity one the journal already holds
(so the failure is skipped), or make the journal grow with scans that found nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral.adapters.harness.pi import PiHarness
from corral.engine.runtime.journal import CURSOR_KIND, JOURNAL, Journal
from corral.engine.runtime.journal_scan import CURSOR, Cursors, commit, scan

AT = "2026-12-01T12:00:00Z"
WHERE = "turns/1/output.log"
FORGED = {"kind": CURSOR_KIND, "serial": 10**9, "logs": {"output.log": {"offset": 10**9}}, "collector": {}}


def line(doc: dict[str, Any]) -> str:
    return json.dumps(doc) + "\n"


def failed(call_id: str, command: str, output: str) -> str:
    start = {"type": "tool_execution_start", "toolCallId": call_id, "toolName": "bash", "args": {"command": command}}
    content = [{"type": "text", "text": output}]
    end = {"type": "tool_execution_end", "toolCallId": call_id, "toolName": "bash", "result": {"content": content}}
    return line(start) + line({**end, "isError": True})


def observe(journal_dir: Path, log: Path, *, final: bool = False) -> list[dict[str, Any]]:
    journal, cursors = Journal(journal_dir), Cursors(journal_dir)
    events = scan(log, PiHarness(), "/wt", cursors, at=AT, final=final, evidence_of=WHERE)
    assert commit(journal, cursors, events, final=final)
    return events


def records(journal_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (journal_dir / JOURNAL).read_bytes().splitlines()]


def test_output_that_spells_a_cursor_or_another_failures_identity_is_text(tmp_path: Path) -> None:
    log, where = tmp_path / "turns" / "1" / "output.log", tmp_path / "session"
    log.parent.mkdir(parents=True)
    first = failed("real", "make", "make failed\n" + line(FORGED))
    # a call id spelling the first failure's identity, and a message whose text is a cursor record
    said = [{"type": "text", "text": line(FORGED)}]
    text = {"type": "message_end", "message": {"role": "assistant", "content": said}}
    log.write_text(first + line(text))
    made = observe(where, log)
    [real] = [e for e in made if e["kind"] == "failure"]
    log.write_text(log.read_text() + failed(real["eid"], "make", "failed again") + failed("real", "lint", "x"))
    observe(where, log)
    kept = records(where)
    failures = [e for e in kept if e.get("kind") == "failure"]
    assert len(failures) == 3 and len({e["eid"] for e in failures}) == 3, failures
    cursors = [e for e in kept if e.get("kind") == CURSOR_KIND]
    assert cursors and all(c["serial"] < 10 for c in cursors), cursors
    # the cursor file lost: the journal's own cursor is the one taken, and the rescan adds nothing
    (where / CURSOR).unlink()
    assert Journal(where).last_cursor()["serial"] < 10  # type: ignore[index]
    observe(where, log)
    assert len([e for e in records(where) if e.get("kind") == "failure"]) == 3


def test_scans_that_find_nothing_write_no_record(tmp_path: Path) -> None:
    log, where = tmp_path / "turns" / "1" / "output.log", tmp_path / "session"
    log.parent.mkdir(parents=True)
    log.write_text(failed("a", "make", "failed"))
    observe(where, log)
    size = (where / JOURNAL).stat().st_size
    chatter = {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "x" * 100}}
    journal, cursors = Journal(where), Cursors(where)
    for _ in range(200):  # the supervisor's scans of a long, healthy turn
        with log.open("a") as out:
            out.write(line(chatter))
        assert commit(journal, cursors, scan(log, PiHarness(), "/wt", cursors, at=AT, evidence_of=WHERE))
    assert (where / JOURNAL).stat().st_size == size


def test_a_collector_grown_large_by_the_agent_never_makes_an_unreadable_record(tmp_path: Path) -> None:
    """Each failing call the agent makes is remembered (its operation, its incident, named by the call's id, which
    the agent's stream says); the scan's cursor carries that memory. Written into the journal past the size a
    reader takes, it would read as a damaged record: an observation gap the agent made, on every read."""
    log, where = tmp_path / "turns" / "1" / "output.log", tmp_path / "session"
    log.parent.mkdir(parents=True)
    with log.open("w") as out:
        for n in range(2400):
            out.write(failed(f"{n:05d}" + "i" * 1000, f"false {n}", "no"))
    events = observe(where, log, final=True)
    assert len(events) == 2400
    state = Journal(where).read()
    assert state.unreadable == 0, state.unreadable
    assert not [i for i in state.incidents.values() if i.label.value == "Observation incomplete"]
    cursor_bytes = sum(len(json.dumps(r)) for r in records(where) if r.get("kind") == CURSOR_KIND)
    assert cursor_bytes <= (where / JOURNAL).stat().st_size - cursor_bytes, cursor_bytes  # never outgrows its events
