"""The failure journal (append, the observed marker, tolerant reads, pending writes) and the log scan."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.domain.collector import Fact, ModelFailure, ModelOk, ToolEnd, ToolStart
from corral.domain.incidents import FailureState, Label, reduce
from corral.engine.runtime.journal import JOURNAL, MAX_RECORD, OBSERVED, Journal, read_events
from corral.engine.runtime.journal_scan import CURSOR, Cursors, Facts, scan


def failure(key: str, category: str = "tool", **kw: Any) -> dict[str, Any]:
    return {"kind": "failure", "id": key, "operation": f"op-{key}", "category": category, "summary": key, **kw}


def labels(state: FailureState) -> dict[str, str]:
    return {k: i.label.value for k, i in state.incidents.items()}


def gaps(state: FailureState) -> list[str]:
    return sorted(k for k, i in state.incidents.items() if i.label is Label.INCOMPLETE)


# -- the journal ------------------------------------------------------------------------------------


def test_appends_are_read_back_in_order_behind_the_observed_marker(tmp_path):
    journal = Journal(tmp_path / "s")
    assert not (tmp_path / "s" / OBSERVED).exists()
    assert journal.read().incidents == {}  # never observed: nothing, and nothing missing
    assert journal.append([failure("a"), failure("b", "model")])
    assert journal.append([failure("a")])
    assert (tmp_path / "s" / OBSERVED).read_bytes() == b"observed\n"
    lines = (tmp_path / "s" / JOURNAL).read_bytes().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "a"]
    assert oct((tmp_path / "s" / JOURNAL).stat().st_mode & 0o777) == "0o600"
    state = journal.read()
    assert labels(state) == {"a": Label.UNCLASSIFIED.value, "b": Label.ACTION_REQUIRED.value}
    assert state.incidents["a"].failures == 2
    assert (state.records, state.unreadable, state.torn) == (3, 0, False)
    assert journal.append([]) and journal.pending == []


def test_an_incremental_read_from_a_state_sees_only_what_was_appended_since(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    state = journal.read()
    journal.append([failure("a"), failure("b")])
    again = journal.read(state)
    assert again.incidents["a"].failures == 2 and set(again.incidents) == {"a", "b"}
    assert again.records == 3
    assert again.to_json() == Journal(tmp_path).read().to_json()


def test_a_torn_last_line_is_tolerated_reported_and_reads_fine_once_completed(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    whole = json.dumps(failure("b")).encode() + b"\n"
    with (tmp_path / JOURNAL).open("ab") as fh:
        fh.write(whole[:20])  # the writer was cut off mid-line
    state = journal.read()
    assert state.torn
    assert set(labels(state)) == {"a", "incomplete:journal-torn"}
    assert labels(state)["incomplete:journal-torn"] == Label.INCOMPLETE.value
    with (tmp_path / JOURNAL).open("ab") as fh:
        fh.write(whole[20:])
    healed = journal.read()
    assert not healed.torn and gaps(healed) == []
    assert set(healed.incidents) == {"a", "b"}


def test_an_append_after_a_torn_last_line_keeps_the_appended_event(tmp_path):
    # A torn tail (power lost mid-append) must not swallow the next event written after it.
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    with (tmp_path / JOURNAL).open("ab") as fh:
        fh.write(b'{"kind": "failure", "id": "lost-half')
    assert Journal(tmp_path).append([failure("b", "supervision")])
    state = Journal(tmp_path).read()
    assert "b" in state.incidents, labels(state)
    assert state.incidents["b"].label is Label.ACTION_REQUIRED


def test_an_unreadable_complete_line_is_reported_never_fatal(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    with (tmp_path / JOURNAL).open("ab") as fh:
        fh.write(b"\x00\xffgarbage{{\n[1, 2]\n\n")
    journal.append([failure("c")])
    state = journal.read()
    assert set(state.incidents) == {"a", "c", "incomplete:journal-unreadable"}
    assert state.unreadable == 2 and not state.torn
    assert "2 journal record(s)" in state.incidents["incomplete:journal-unreadable"].summary
    assert read_events(tmp_path / JOURNAL)[3] == 2


def test_a_journal_deleted_after_it_was_observed_is_an_incomplete_observation(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    (tmp_path / JOURNAL).unlink()
    state = Journal(tmp_path).read()
    assert labels(state) == {"incomplete:journal-missing": Label.INCOMPLETE.value}
    assert state.needs_action


def test_a_write_that_fails_is_kept_in_memory_and_written_once_when_storage_recovers(tmp_path):
    where = tmp_path / "session"
    journal = Journal(where)
    journal.append([failure("a")])
    (tmp_path / "aside").mkdir()
    os.replace(where, tmp_path / "aside" / "session")
    where.write_bytes(b"")  # the journal's directory cannot be one: every write fails
    assert not journal.append([failure("b", "model")])
    assert journal.write_error and JOURNAL in journal.write_error
    state = journal.read()  # the pending events are still evidence, and the warning is shown
    assert set(state.incidents) == {"b", "incomplete:journal-write"}
    assert state.incidents["b"].label is Label.ACTION_REQUIRED
    assert state.incidents["incomplete:journal-write"].label is Label.INCOMPLETE
    assert "could not be written" in state.incidents["incomplete:journal-write"].summary
    assert not journal.append([failure("c")])
    assert [e["id"] for e in journal.pending] == ["b", "c"]
    where.unlink()
    os.replace(tmp_path / "aside" / "session", where)
    assert journal.append([])  # the next append after storage recovers
    assert journal.pending == [] and journal.write_error is None
    ids = [json.loads(line)["id"] for line in (where / JOURNAL).read_bytes().splitlines()]
    assert ids == ["a", "b", "c"]
    state = journal.read()
    assert set(state.incidents) == {"a", "b", "c"}
    assert journal.append([failure("d")])
    ids = [json.loads(line)["id"] for line in (where / JOURNAL).read_bytes().splitlines()]
    assert ids == ["a", "b", "c", "d"]  # written once


def test_an_incremental_read_across_a_failed_write_and_its_recovery_counts_each_event_once(tmp_path):
    # ``read(state)`` continues a state that covers the journal up to its offset; what a failed
    # write still held was folded into that state, and must not be folded again once written.
    where = tmp_path / "session"
    journal = Journal(where)
    journal.append([failure("a")])
    (tmp_path / "aside").mkdir()
    os.replace(where, tmp_path / "aside" / "session")
    where.write_bytes(b"")
    assert not journal.append([failure("b")])
    state = journal.read()
    assert state.incidents["b"].failures == 1
    where.unlink()
    os.replace(tmp_path / "aside" / "session", where)
    assert journal.append([])
    again = journal.read(state)
    assert again.incidents["b"].failures == 1, "the pending event was counted twice"
    assert gaps(again) == [], "the write warning outlived the recovery"
    assert again.to_json() == Journal(where).read().to_json()


def test_a_directory_where_the_journal_belongs_fails_the_write_and_keeps_the_events(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    (tmp_path / JOURNAL).unlink()
    (tmp_path / JOURNAL).mkdir()
    assert not journal.append([failure("b")])
    assert [e["id"] for e in journal.pending] == ["b"] and journal.write_error
    (tmp_path / JOURNAL).rmdir()
    assert journal.append([])
    assert [json.loads(line)["id"] for line in (tmp_path / JOURNAL).read_bytes().splitlines()] == ["b"]


def _in_thread(fn: Any, timeout: float = 5) -> tuple[bool, list[Any]]:
    out: list[Any] = []

    def go() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported to the test
            out.append(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), out


def test_a_fifo_where_the_journal_belongs_fails_the_write_without_hanging(tmp_path):
    journal = Journal(tmp_path)
    journal.append([failure("a")])
    (tmp_path / JOURNAL).unlink()
    os.mkfifo(tmp_path / JOURNAL)
    finished, out = _in_thread(lambda: journal.append([failure("b", "model")]))
    if not finished:  # release the blocked open so the thread ends
        os.close(os.open(tmp_path / JOURNAL, os.O_RDONLY | os.O_NONBLOCK))
    assert finished, "Journal.append blocked on a FIFO"
    assert out == [False]


@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_reading_a_journal_that_is_a_fifo_or_a_directory_does_not_hang_or_raise(tmp_path, kind):
    Journal(tmp_path).append([failure("a")])
    (tmp_path / JOURNAL).unlink()
    if kind == "dir":
        (tmp_path / JOURNAL).mkdir()
    else:
        os.mkfifo(tmp_path / JOURNAL)
    finished, out = _in_thread(lambda: Journal(tmp_path).read())
    if not finished:
        os.close(os.open(tmp_path / JOURNAL, os.O_WRONLY | os.O_NONBLOCK))
    assert finished, f"Journal.read blocked on a {kind}"
    assert isinstance(out[0], FailureState), f"{kind}: {out[0]!r}"
    assert gaps(out[0]), f"{kind}: a journal that cannot be read is an incomplete observation"


# -- the scan -----------------------------------------------------------------------------------------


class Fake:
    """A harness whose records are ``{"t": "fail"|"ok"|"model-fail"|"model-ok", "id", "cmd"}``."""

    incident_markers: tuple[bytes, ...] = (b'"t"',)

    def __init__(self) -> None:
        self.parsed: list[int] = []

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]:
        self.parsed.append(offset)
        kind, call = data.get("t"), str(data.get("id"))
        if kind in ("fail", "ok"):
            return [
                ToolStart(call, "sh", {"cmd": data.get("cmd", "make")}, cwd),
                ToolEnd(call, kind == "fail", "x", offset),
            ]
        if kind == "model-fail":
            return [ModelFailure("HTTP 529", offset)]
        if kind == "model-ok":
            return [ModelOk()]
        return []


def rec(kind: str, call: str = "1", **kw: Any) -> bytes:
    return json.dumps({"t": kind, "id": call, **kw}).encode() + b"\n"


def scanned(log: Path, cursors: Cursors, harness: Facts | None = None, **kw: Any) -> list[dict[str, Any]]:
    return scan(log, harness or Fake(), "/wt", cursors, **kw)


def test_the_scan_is_incremental_and_its_cursor_survives_a_reload(tmp_path):
    log = tmp_path / "output.log"
    log.write_bytes(b"plain text line\n" + rec("fail", "1"))
    cursors = Cursors(tmp_path)
    first = scanned(log, cursors, evidence_of="turns/1/output.log")
    assert [(e["kind"], e["id"], e["evidence"]) for e in first] == [
        ("failure", "tool:turns/1/output.log:1", "turns/1/output.log#byte=16")
    ]
    assert scanned(log, cursors) == []
    cursors.save()
    with log.open("ab") as fh:
        fh.write(rec("ok", "2"))
    reloaded = Cursors(tmp_path)
    assert (tmp_path / CURSOR).exists()
    harness = Fake()
    second = scanned(log, reloaded, harness)
    assert [(e["kind"], e["incidents"]) for e in second] == [("recovered", ["tool:turns/1/output.log:1"])]
    assert harness.parsed == [log.stat().st_size - len(rec("ok", "2"))]  # only the new record was parsed


def test_a_partial_record_waits_for_its_newline_unless_the_turn_is_over(tmp_path):
    log = tmp_path / "output.log"
    whole = rec("fail", "1")
    log.write_bytes(whole[:10])
    cursors = Cursors(None)
    assert scanned(log, cursors) == []
    with log.open("ab") as fh:
        fh.write(whole[10:])
    assert [e["id"] for e in scanned(log, cursors)] == ["tool:output.log:1"]
    with log.open("ab") as fh:
        fh.write(b'{"t": "ok", "id": "2"')
    final = scanned(log, cursors, final=True)
    assert [(e["kind"], e["id"]) for e in final] == [("incomplete", f"incomplete:partial:{len(whole)}")]
    assert scanned(log, cursors, final=True) == []  # the partial record is reported once


@pytest.mark.parametrize("how", ["rewritten", "truncated", "replaced"])
def test_a_rewritten_or_truncated_log_is_reported_and_scanned_again(tmp_path, how):
    log = tmp_path / "output.log"
    log.write_bytes(rec("fail", "1", cmd="aaaa") + rec("model-fail"))
    cursors = Cursors(None)
    assert len(scanned(log, cursors)) == 2
    if how == "rewritten":  # in place, the same size, another head
        data = log.read_bytes().replace(b"aaaa", b"bbbb")
        with log.open("r+b") as fh:
            fh.write(data)
    elif how == "truncated":
        with log.open("r+b") as fh:
            fh.truncate(len(rec("fail", "1", cmd="aaaa")))
    else:  # a new file (another inode) at the same path, other bytes (a copy is read on: test_journal_identity)
        fresh = tmp_path / "fresh.log"
        fresh.write_bytes(log.read_bytes().replace(b"aaaa", b"bbbb"))
        os.replace(fresh, log)
    events = scanned(log, cursors)
    assert events[0]["kind"] == "incomplete" and events[0]["id"].startswith("incomplete:log-rewritten:output.log")
    assert "truncated or rewritten" in events[0]["summary"]
    assert [e["kind"] for e in events[1:]] and all(e["kind"] == "failure" for e in events[1:])


def test_a_record_over_two_mebibytes_is_an_incomplete_observation_and_the_scan_goes_on(tmp_path):
    log = tmp_path / "output.log"
    huge = b'{"t": "fail", "id": "huge", "pad": "' + b"x" * (MAX_RECORD + 10) + b'"}\n'
    log.write_bytes(rec("fail", "1") + huge + rec("fail", "2", cmd="other"))
    events = scanned(log, Cursors(None))
    at = len(rec("fail", "1"))
    assert [(e["kind"], e["id"]) for e in events] == [
        ("failure", "tool:output.log:1"),
        ("incomplete", f"incomplete:oversized:{at}"),
        ("failure", "tool:output.log:2"),
    ]
    assert "over 2 MiB" in events[1]["summary"]


def test_a_record_over_two_mebibytes_seen_across_incremental_scans_is_reported_once(tmp_path):
    log = tmp_path / "output.log"
    huge = b'{"t": "fail", "id": "huge", "pad": "' + b"x" * (MAX_RECORD + 10)
    log.write_bytes(rec("fail", "1") + huge)
    cursors = Cursors(None)
    first = scanned(log, cursors)
    with log.open("ab") as fh:
        fh.write(b'"}\n' + rec("fail", "2", cmd="other"))
    events = first + scanned(log, cursors)
    assert [e["kind"] for e in events] == ["failure", "incomplete", "failure"]


def test_a_malformed_structured_record_is_an_incomplete_observation(tmp_path):
    log = tmp_path / "output.log"
    bad = b'{"t": "fail", "id": oops}\n'
    log.write_bytes(bad + b'not json but "t" marked\n' + rec("model-fail"))
    events = scanned(log, Cursors(None))
    assert [(e["kind"], e["id"]) for e in events] == [
        ("incomplete", "incomplete:malformed:0"),
        ("failure", f"model:output.log:{len(bad) + 24}"),
    ]


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_symlink_or_fifo_where_the_log_belongs_is_not_followed_and_does_not_hang(tmp_path, kind):
    target = tmp_path / "elsewhere.log"
    target.write_bytes(rec("fail", "secret"))
    log = tmp_path / "output.log"
    if kind == "symlink":
        log.symlink_to(target)
    else:
        os.mkfifo(log)
    finished, out = _in_thread(lambda: scanned(log, Cursors(None), final=True))
    if not finished:
        os.close(os.open(log, os.O_WRONLY | os.O_NONBLOCK))
    assert finished, f"scan blocked on a {kind}"
    assert not isinstance(out[0], BaseException), f"scan raised on a {kind}: {out[0]!r}"
    assert [e["id"] for e in out[0]] == ["incomplete:log-unreadable:output.log"]


def test_a_missing_log_never_seen_is_nothing_and_one_seen_then_lost_is_reported(tmp_path):
    log = tmp_path / "output.log"
    cursors = Cursors(None)
    assert scanned(log, cursors) == []
    log.write_bytes(rec("ok"))
    assert scanned(log, cursors) == []
    log.unlink()
    assert [e["id"] for e in scanned(log, cursors)] == ["incomplete:log-unreadable:output.log"]


def test_scanned_events_reduce_to_the_labels(tmp_path):
    log = tmp_path / "output.log"
    log.write_bytes(rec("fail", "1") + rec("fail", "2") + rec("fail", "3") + rec("model-fail") + rec("model-ok"))
    state = reduce(FailureState(), scanned(log, Cursors(None), final=True))
    assert sorted(labels(state).values()) == [Label.ACTION_REQUIRED.value, Label.RECOVERED.value]
    assert state.incidents["tool:output.log:1"].failures == 3


class _PlainPi:
    """Pi's collector without its shortcuts (no pair, no run): every marked line parsed."""

    def __init__(self) -> None:
        from corral.adapters.harness.pi import PiHarness

        self.inner = PiHarness("pi")
        self.incident_markers = self.inner.incident_markers

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Any]:
        return self.inner.incident_facts(data, offset, cwd)


def _pi_line(kind: str, n: int, command: str, *, error: bool = False, spaced: bool = False) -> bytes:
    import json as _json

    sep = (", ", ": ") if spaced else (",", ":")
    if kind == "update":
        doc: dict[str, Any] = {"type": "message_update", "delta": f"thinking {n}", "partial": "x" * 200}
    elif kind == "start":
        doc = {"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "bash", "args": {"command": command}}
    else:
        result = {"content": [{"type": "text", "text": ("FAILED " if error else "ok ") + "é\\" * (n % 3)}]}
        doc = {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result}
        doc["isError"] = error
    return _json.dumps(doc, separators=sep, ensure_ascii=n % 5 != 0).encode("utf-8") + b"\n"


def test_pis_shortcuts_fold_exactly_what_parsing_every_line_folds(tmp_path: Path) -> None:
    from corral.adapters.harness.pi import PiHarness

    lines: list[bytes] = []
    for n in range(400):
        command = f"pytest tests/test_mod{n % 13}.py -q"
        lines.append(_pi_line("update", n, command))
        lines.append(_pi_line("start", n, command, spaced=n % 7 == 0))
        lines.append(_pi_line("end", n, command, error=n % 17 == 0 or n % 29 == 0, spaced=n % 11 == 0))
        if n == 150:
            lines.append(b'{"type": "tool_execution_end", "toolCallId": "t150", "bad json\n')
        if n == 222:  # a model error and its recovery in the middle of the runs
            msg = {
                "type": "message_end",
                "message": {"role": "assistant", "stopReason": "error", "errorMessage": "529"},
            }
            lines.append(json.dumps(msg).encode() + b"\n")
            ok = {"type": "message_end", "message": {"role": "assistant", "stopReason": "stop", "content": "ok"}}
            lines.append(json.dumps(ok).encode() + b"\n")
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    for cut in (None, len(log.read_bytes()) // 3):
        fast, plain = Cursors(None), Cursors(None)
        if cut is None:
            got = scan(log, PiHarness("pi"), "/wt", fast, final=True)
            want = scan(log, _PlainPi(), "/wt", plain, final=True)
        else:  # the same across two scans, the log growing in between
            whole = log.read_bytes()
            log.write_bytes(whole[:cut])
            got = scan(log, PiHarness("pi"), "/wt", fast)
            want = scan(log, _PlainPi(), "/wt", plain)
            log.write_bytes(whole)
            got += scan(log, PiHarness("pi"), "/wt", fast, final=True)
            want += scan(log, _PlainPi(), "/wt", plain, final=True)
        assert got == want and got  # the same events, in the same order
        parsed_fast, parsed_plain = _parsed(log, PiHarness("pi")), _parsed(log, _PlainPi())
        assert parsed_fast * 3 < parsed_plain  # the shortcuts were taken: most lines were never parsed
        assert reduce(FailureState(), got).to_json() == reduce(FailureState(), want).to_json()
        assert fast.collector.failed == plain.collector.failed and fast.collector.starts == plain.collector.starts


def _parsed(log: Path, harness: Any) -> int:
    """How many lines a whole scan of ``log`` handed to ``harness.incident_facts``."""
    calls = [0]
    inner = harness.incident_facts

    def counting(data: dict[str, Any], offset: int, cwd: str) -> list[Any]:
        calls[0] += 1
        return inner(data, offset, cwd)

    harness.incident_facts = counting
    scan(log, harness, "/wt", Cursors(None), final=True)
    return calls[0]


# -- passing runs of calls while failures are open (PiHarness.incident_plain_run / incident_call_marks) --


def _call(
    n: int, command: str, *, tool: str = "bash", error: bool = False, compact: bool = False, **args: Any
) -> bytes:
    """One Pi tool call as Pi writes it: a text delta, its start and its end."""
    sep = (",", ":") if compact else (", ", ": ")
    result = {"content": [{"type": "text", "text": ("FAILED " if error else "ok ") + "z" * 40}]}
    docs = [
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": f"step {n}"}},
        {"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": tool, "args": {"command": command, **args}},
        {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": tool, "result": result, "isError": error},
    ]
    return b"".join(json.dumps(d, separators=sep).encode() + b"\n" for d in docs)


def _filler(first: int, count: int, **kw: Any) -> list[bytes]:
    """Successful calls none of which is a retry of anything below (commands of their own)."""
    return [_call(n, f"make step{n}", **kw) for n in range(first, first + count)]


def _scan_both(log: Path, cwd: str = "/wt") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The fast scan's events (checked against parsing every marked line) and how it got there."""
    from corral.adapters.harness.pi import PiHarness

    harness = PiHarness("pi")
    used = {"plain_runs": 0, "calls_passed_at_once": 0, "calls_checked": 0}
    plain_run, run_calls = harness.incident_plain_run, harness.incident_run_calls

    def counting_plain_run(data: bytes, start: int, limit: int) -> tuple[int, int] | None:
        found = plain_run(data, start, limit)
        if found is not None:
            used["plain_runs"] += 1
            used["calls_passed_at_once"] += found[1]
        return found

    def counting_run_calls(data: bytes, start: int, end: int) -> Any:
        for call in run_calls(data, start, end):
            used["calls_checked"] += 1
            yield call

    harness.incident_plain_run = counting_plain_run  # type: ignore[method-assign]
    harness.incident_run_calls = counting_run_calls  # type: ignore[method-assign]
    fast, plain = Cursors(None), Cursors(None)
    got = scan(log, harness, cwd, fast, final=True)
    want = scan(log, _PlainPi(), cwd, plain, final=True)
    assert got == want  # the same events in the same order
    assert fast.collector.to_json() == plain.collector.to_json()  # the sequence included
    return got, used


def _recovered(events: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in events if e["kind"] == "recovered"]


@pytest.mark.parametrize("compact", [False, True])
def test_an_exact_retry_after_a_long_run_of_other_calls_still_recovers_its_failure(tmp_path, compact):
    lines = [_call(1, "pytest tests/a.py -q", error=True, compact=compact)]
    lines += _filler(2, 200, compact=compact)
    lines.append(_call(202, "pytest tests/a.py -q", compact=compact))  # the exact retry
    lines += _filler(203, 50, compact=compact)
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    events, used = _scan_both(log)
    assert _recovered(events) == ["recovered:t202"]
    # the 200 calls while the failure was open were passed at once, block by block, not walked one by one
    from corral.adapters.harness.pi import BLOCK

    assert used["calls_passed_at_once"] >= 200 - BLOCK and used["calls_checked"] < 10


@pytest.mark.parametrize(
    "near_miss",
    [
        {"command": "pytest tests/a.py -q -x"},  # other arguments: the failure's mark is not in it
        {"command": "pytest tests/a.py -q", "timeout": 5},  # its mark, but one argument more
        {"command": "pytest tests/a.py -q", "tool": "read"},  # its mark, another tool
    ],
)
def test_a_near_miss_of_an_open_failure_does_not_recover_it_and_the_exact_retry_after_it_does(tmp_path, near_miss):
    near = dict(near_miss)
    tool = near.pop("tool", "bash")
    command = near.pop("command")
    lines = [_call(1, "pytest tests/a.py -q", error=True), *_filler(2, 60)]
    lines.append(_call(62, command, tool=tool, **near))
    lines += _filler(63, 60)
    lines.append(_call(123, "pytest tests/a.py -q"))
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    events, _used = _scan_both(log)
    assert _recovered(events) == ["recovered:t123"]


def test_a_call_in_another_working_directory_recovers_no_failure_of_this_one(tmp_path):
    cursors = Cursors(None)
    first, second = tmp_path / "a" / "output.log", tmp_path / "b" / "output.log"
    first.parent.mkdir()
    second.parent.mkdir()
    first.write_bytes(b"".join([_call(1, "pytest tests/a.py -q", error=True), *_filler(2, 5)]))
    second.write_bytes(b"".join([*_filler(10, 30), _call(40, "pytest tests/a.py -q"), *_filler(41, 30)]))
    from corral.adapters.harness.pi import PiHarness

    events = scan(first, PiHarness("pi"), "/wt/one", cursors, final=True)
    events += scan(second, PiHarness("pi"), "/wt/two", cursors, final=True)  # the same command, elsewhere
    assert [e["kind"] for e in events] == ["failure"] and cursors.collector.failed
    events = scan(second, PiHarness("pi"), "/wt/one", Cursors(None), final=True)
    assert not _recovered(events)  # a fresh collector: nothing open, nothing recovered


def test_a_retry_spelled_otherwise_than_its_failure_still_recovers_it(tmp_path):
    spelled = [
        b'{"type": "tool_execution_start", "toolCallId": "t70", "toolName": "bash", '
        b'"args": {"command": "\\u0070ytest tests/a.py -q"}}\n',
        b'{"type":"tool_execution_end","toolCallId":"t70","toolName":"bash","result":{"content":[]},"isError":false}\n',
    ]
    lines = [_call(1, "pytest tests/a.py -q", error=True), _call(2, "pytest tests/b.py", error=True, x=1)]
    lines += [*_filler(3, 60), *spelled, *_filler(71, 60)]
    # the other failure's retry with its arguments' keys reordered and spaced otherwise
    lines.append(
        b'{"type":"tool_execution_start","toolCallId":"t200","toolName":"bash",'
        b'"args":{"x":1,"command":"pytest tests/b.py"}}\n'
        b'{"type":"tool_execution_end","toolCallId":"t200","toolName":"bash","result":"ok","isError":false}\n'
    )
    lines.append(_call(201, "pytest tests/b.py", x=1))  # nothing left open for it to recover
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    events, _used = _scan_both(log)
    assert _recovered(events) == ["recovered:t70", "recovered:t200"]


def test_a_failure_carried_over_from_an_earlier_scan_is_recovered_by_its_retry_in_a_later_one(tmp_path):
    from corral.adapters.harness.pi import PiHarness

    log = tmp_path / "output.log"
    log.write_bytes(b"".join([_call(1, "pytest tests/a.py -q", error=True), *_filler(2, 10)]))
    cursors = Cursors(None)
    events = scan(log, PiHarness("pi"), "/wt", cursors)
    with log.open("ab") as f:  # the next scan knows the failure by its operation only
        f.write(b"".join([*_filler(12, 40), _call(52, "pytest tests/a.py -q"), *_filler(53, 10)]))
    events += scan(log, PiHarness("pi"), "/wt", cursors, final=True)
    assert _recovered(events) == ["recovered:t52"]


def test_malformed_and_failing_records_inside_a_run_passed_at_once_are_still_reported(tmp_path):
    lines = [_call(1, "pytest tests/a.py -q", error=True), *_filler(2, 40)]
    lines.append(b'{"type": "tool_execution_end", "toolCallId": "t41", "bad json\n')
    lines += _filler(42, 40)
    lines.append(_call(82, "make other", error=True))  # another failure amid the run
    lines += _filler(83, 40)
    lines.append(
        b'{"type": "message_end", "message": {"role": "assistant", "stopReason": "error", "errorMessage": "529"}}\n'
    )
    lines.append(
        b'{"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": "529"}\n'
    )
    lines += _filler(123, 40)
    lines.append(b'{"type": "tool_execution_start", "toolCallId": "t9", ' + b'"x" ' * (MAX_RECORD // 4) + b"}\n")
    lines += _filler(163, 40)
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    events, used = _scan_both(log)
    kinds = sorted((e["kind"], e["id"].split(":")[0] + ":" + e["id"].split(":")[1]) for e in events)
    assert ("incomplete", "incomplete:malformed") in kinds and ("incomplete", "incomplete:oversized") in kinds
    assert [e["operation"].split(":")[0] for e in events if e["kind"] == "failure"] == ["bash", "bash", "model-call"]
    assert used["calls_passed_at_once"] > 150  # and the runs between them were passed at once


def test_a_failure_with_no_text_argument_of_a_nameless_tool_is_recovered_by_its_retry(tmp_path):
    def nameless(n: int, error: bool) -> bytes:  # Pi's empty toolName is the tool "tool"
        start = {"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "", "args": {"n": 1}}
        end = {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "", "result": "r", "isError": error}
        return json.dumps(start).encode() + b"\n" + json.dumps(end).encode() + b"\n"

    log = tmp_path / "output.log"
    log.write_bytes(b"".join([nameless(1, True), *_filler(2, 50), nameless(52, False), *_filler(53, 10)]))
    events, _used = _scan_both(log)
    assert _recovered(events) == ["recovered:t52"]


@pytest.mark.parametrize("chunk", [997, 4096, 65536])
def test_reads_of_any_size_give_the_events_of_one_read(tmp_path, monkeypatch, chunk):
    from corral.engine.runtime import journal_scan

    lines = []
    for n in range(1, 400):  # failures open and closing throughout, lines split across reads
        lines.append(_call(n, f"pytest tests/m{n % 23}.py", error=n % 9 == 0, compact=n % 50 < 25))
        if n == 200:
            lines.append(b'{"type": "tool_execution_end", "toolCallId": "t9", "bad json\n')
    lines.append(b'{"type": "tool_execution_start", "toolCallId": "t0"')  # the turn ended mid-record
    log = tmp_path / "output.log"
    log.write_bytes(b"".join(lines))
    whole, _used = _scan_both(log)
    monkeypatch.setattr(journal_scan, "CHUNK", chunk)
    pieces, _used = _scan_both(log)
    assert pieces == whole and _recovered(whole) and any(e["id"].startswith("incomplete:partial") for e in whole)


def test_a_final_scan_that_finds_nothing_new_does_not_write_the_journal_s_last_cursor_again(tmp_path):
    """A reconciler's catch-up after the supervisor's own last scan: the journal holds that cursor already, and a
    copy of every log's cursor per recorded turn made the session's journal (and each read of it) grow."""
    from corral.engine.runtime.journal_scan import commit

    log = tmp_path / "output.log"
    log.write_bytes(rec("fail", "1"))
    journal, cursors = Journal(tmp_path), Cursors(tmp_path)
    assert commit(journal, cursors, scanned(log, cursors, final=True), final=True)  # the supervisor's last scan
    size = (tmp_path / JOURNAL).stat().st_size
    again = Cursors(tmp_path)  # the reconciler's, loaded anew
    assert commit(Journal(tmp_path), again, scanned(log, again, final=True), final=True)
    assert (tmp_path / JOURNAL).stat().st_size == size
    with log.open("ab") as fh:  # something the supervisor did not see: scanned, its cursor recorded
        fh.write(rec("ok", "1"))
    late = Cursors(tmp_path)
    events = scanned(log, late, final=True)
    assert [e["kind"] for e in events] == ["recovered"]
    assert commit(Journal(tmp_path), late, events, final=True)
    assert Journal(tmp_path).last_cursor() == {k: v for k, v in json.loads((tmp_path / CURSOR).read_text()).items()}
    size = (tmp_path / JOURNAL).stat().st_size
    same = Cursors(tmp_path)
    assert commit(Journal(tmp_path), same, scanned(log, same, final=True), final=True)
    assert (tmp_path / JOURNAL).stat().st_size == size
