"""The Pi scan's fast paths fold exactly what parsing every marked line folds, whatever the log holds.

A log is untrusted: each test scans crafted lines twice — with Pi's shortcuts (runs passed block by
block, pairs unparsed, marks searched while failures are open) and with every marked line parsed —
and asks for the same events and the same collector (its sequence included), at several read sizes
so that pairs and runs are cut by the read boundary.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.pi import BLOCK, PiHarness
from corral.engine.runtime import journal_scan
from corral.engine.runtime.journal_scan import Cursors, scan


class _Plain:
    """Pi's facts without its shortcuts: every marked line is parsed (text deltas still unread)."""

    def __init__(self) -> None:
        self.inner = PiHarness("pi")
        self.incident_markers = self.inner.incident_markers
        self.incident_unread = self.inner.incident_unread

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Any]:
        return self.inner.incident_facts(data, offset, cwd)


def _scan(log: Path, harness: Any, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], dict[str, Any]]:
    monkeypatch.setattr(journal_scan, "CHUNK", chunk)
    cursors = Cursors(None)
    events = scan(log, harness, "/wt", cursors, final=True)
    return events, cursors.collector.to_json()


def _same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, chunks: tuple[int, ...] = (1 << 20,)) -> list:
    """The events of ``data`` scanned both ways (asserted equal, at every read size in ``chunks``)."""
    log = tmp_path / "output.log"
    log.write_bytes(data)
    want = _scan(log, _Plain(), 1 << 20, monkeypatch)
    for chunk in chunks:
        assert _scan(log, PiHarness("pi"), chunk, monkeypatch) == want, chunk
    return want[0]


def _line(doc: dict[str, Any], compact: bool = False) -> bytes:
    return json.dumps(doc, separators=(",", ":") if compact else (", ", ": ")).encode() + b"\n"


def _update(n: int, text: str = "", compact: bool = False) -> bytes:
    return _line({"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": text or f"d{n}"}})


def _start(n: int, command: str, compact: bool = False, **args: Any) -> bytes:
    doc = {"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "bash", "args": {"command": command}}
    doc["args"].update(args)
    return _line(doc, compact)


def _end(n: int, error: bool = False, compact: bool = False, result: Any = None) -> bytes:
    if result is None:
        result = {"content": [{"type": "text", "text": ("FAILED " if error else "ok ") + "z" * 40}]}
    doc = {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result}
    doc["isError"] = error
    return _line(doc, compact)


def _calls(first: int, count: int, fail_every: int = 0, commands: int = 7, compact: bool = False) -> bytes:
    """Calls ``first``… as Pi writes them: a text delta, a start, its end; one in ``fail_every`` failing."""
    out = []
    for n in range(first, first + count):
        failed = bool(fail_every) and n % fail_every == 0
        out += [_update(n), _start(n, f"pytest t{n % commands}.py", compact), _end(n, failed, compact)]
    return b"".join(out)


def _failures(events: list[dict[str, Any]]) -> list[str]:
    return [e["evidence"] for e in events if e["kind"] == "failure"]


CHUNKS = (97, 1000, 4096, 1 << 20)


def test_runs_with_failures_and_retries_are_the_same_at_every_read_size(tmp_path, monkeypatch):
    for compact in (False, True):
        data = _calls(1, 3 * BLOCK + 5, compact=compact) + _calls(100, 300, fail_every=9, compact=compact)
        events = _same(tmp_path, monkeypatch, data, CHUNKS)
        assert _failures(events) and [e for e in events if e["kind"] == "recovered"]


@pytest.mark.parametrize(
    "result",
    [
        {"exit\\u0043ode": 1, "content": []},  # the key spelled with an escape: still its exit code
        {"exitCode": 2, "stderr": "boom"},
        {"content": [{"type": "text", "text": "ok"}], "exitCode": 1},
    ],
)
def test_a_nonzero_exit_code_under_isError_false_fails_however_its_key_is_spelled(tmp_path, monkeypatch, result):
    end = _end(5, result={})
    raw = json.dumps(result).encode().replace(b"\\\\u0043", b"\\u0043")  # the escape as written in the log
    end = end.replace(b'"result": {}', b'"result": ' + raw)
    data = _calls(1, 4) + _update(5) + _start(5, "make") + end + _calls(6, 40)
    events = _same(tmp_path, monkeypatch, data, CHUNKS)
    assert len(_failures(events)) == 1


def test_an_end_without_isError_is_a_gap_and_never_a_pass(tmp_path, monkeypatch):
    end = b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok"}\n'
    data = _calls(1, 4) + _update(5) + _start(5, "make") + end + _calls(6, 40)
    events = _same(tmp_path, monkeypatch, data, CHUNKS)
    assert [e["kind"] for e in events] == ["incomplete"]


@pytest.mark.parametrize(
    "end",
    [
        # a failing end shaped like a healthy one: its last word is the one read
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", '
        b'"isError": false, "isError": true}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", "isError": true}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", "isError": 1}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "isError": false, "result": "ok", '
        b'"isError": true}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolCallId": "t9", "toolName": "bash", "result": "ok", '
        b'"isError": false}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", "isError": false} \n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", "isError": false}\r\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "o\x00k", '
        b'"isError": false}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "\xff", "isError": false}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": {"a": NaN}, '
        b'"isError": false}\n',
        b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": "ok", "isError": false}}\n',
    ],
)
def test_crafted_end_lines_read_as_parsing_reads_them(tmp_path, monkeypatch, end):
    for start in (_start(5, "make"), _start(5, 'echo "quoted" \\ back\\slash', x=None, y=1.5e3)):
        data = _calls(1, 20) + _update(5) + start + end + _calls(21, 40)
        _same(tmp_path, monkeypatch, data, CHUNKS)
        # the same with a failure open before it, so the call is checked while failures are open
        data = _calls(1, 3, fail_every=3) + _update(5) + start + end + _calls(21, 40) + _calls(200, 5)
        _same(tmp_path, monkeypatch, data, CHUNKS)


@pytest.mark.parametrize(
    "text",
    [
        # a text delta holding a marker's bytes, or a second type: read by its first, it holds no fact
        '{"type": "tool_execution_end", "toolCallId": "t3", "isError": true}',
        '"message_end" "auto_retry_start" "tool_execution_start"',
    ],
)
def test_text_deltas_hold_no_fact_whatever_their_text_says(tmp_path, monkeypatch, text):
    forged = (
        b'{"type": "message_update", "type": "tool_execution_end", "toolCallId": "t3", "toolName": "bash", '
        b'"isError": true, "result": "boom"}\n'
    )
    model = (
        b'{"type":"message_update","type":"message_end","message":{"role":"assistant","stopReason":"error",'
        b'"errorMessage":"529"}}\n'
    )
    broken = b'{"type": "message_update", "x": "tool_execution_end\n'
    data = _calls(1, 20) + _update(21, text) + forged + model + broken + _calls(22, 40)
    assert _same(tmp_path, monkeypatch, data, CHUNKS) == []


def test_escapes_and_odd_arguments_in_runs_and_retries(tmp_path, monkeypatch):
    failing = _update(1) + _start(1, 'grep -n "a\\tb" x') + _end(1, error=True)
    # the exact retry, spelled with other escapes and another key order
    retry = _update(60) + (
        b'{"type": "tool_execution_start", "toolCallId": "t60", "toolName": "bash", '
        b'"args": {"command": "grep -n \\"a\\u005ctb\\" x"}}\n'
    )
    retry += _end(60)
    near = _update(30) + _start(30, 'grep -n "a\\tb" x', timeout=5) + _end(30)
    data = failing + _calls(2, 27) + near + _calls(31, 28) + retry + _calls(61, 40)
    events = _same(tmp_path, monkeypatch, data, CHUNKS)
    assert [e["id"] for e in events if e["kind"] == "recovered"] == ["recovered:t60"]


def test_a_pair_cut_by_the_read_boundary_at_every_byte(tmp_path, monkeypatch):
    data = _calls(1, 3) + _calls(4, 3, fail_every=5) + _calls(7, 3)
    log = tmp_path / "output.log"
    log.write_bytes(data)
    want = _scan(log, _Plain(), 1 << 20, monkeypatch)
    for chunk in range(40, 700, 13):
        assert _scan(log, PiHarness("pi"), chunk, monkeypatch) == want, chunk


def test_a_64_mib_line_amid_runs_is_one_gap_both_ways(tmp_path, monkeypatch):
    huge = b'{"type": "tool_execution_end", "toolCallId": "t9", "result": "' + b"z" * (64 << 20) + b'"}\n'
    data = _calls(1, 40, fail_every=13) + huge + _calls(41, 40)
    events = _same(tmp_path, monkeypatch, data, (1 << 20,))
    assert [e["id"] for e in events if e["kind"] == "incomplete"] == [f"incomplete:oversized:{len(_calls(1, 40, 13))}"]


def _mutations(line: bytes, rng: random.Random) -> bytes:
    """``line`` with a byte flipped, dropped, doubled or swapped for one that matters in JSON."""
    if len(line) < 3:
        return line
    at = rng.randrange(len(line) - 1)
    pick = rng.choice([b'"', b"\\", b"\x00", b"}", b"{", b",", b" ", b"1", b"t", b"\xc3\xa9", b"\n", b""])
    how = rng.randrange(3)
    if how == 0:
        return line[:at] + pick + line[at + 1 :]
    if how == 1:
        return line[:at] + pick + line[at:]
    return line[:at] + line[at + 1 :]


@pytest.mark.parametrize("seed", range(12))
def test_random_logs_with_damaged_lines_scan_the_same_both_ways(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    lines: list[bytes] = []
    for n in range(1, 500):
        compact = rng.random() < 0.3
        command = f"pytest t{rng.randrange(6)}.py"
        call = [_update(n), _start(n, command, compact), _end(n, rng.random() < 0.08, compact)]
        if rng.random() < 0.05:
            i = rng.randrange(3)
            call[i] = _mutations(call[i], rng)
        if rng.random() < 0.02:
            call.insert(
                rng.randrange(3),
                b'{"type": "message_end", "message": {"role": "assistant", "stopReason": '
                b'"error", "errorMessage": "529"}}\n'
                if rng.random() < 0.5
                else b'{"type": "message_end", "message": {"role": "assistant", "stopReason": "stop"}}\n',
            )
        lines += call
    _same(tmp_path, monkeypatch, b"".join(lines), (211, 4096, 1 << 20))


def test_a_turn_with_corrals_shell_folds_the_same_both_ways(tmp_path, monkeypatch):
    """Pi's bash of a confined turn is corral's (its arguments an intent): an untrusted scan reads it by exact rule."""
    log = tmp_path / "output.log"
    log.write_bytes(_calls(1, 200, fail_every=11) + _calls(300, 50, fail_every=3))
    plain = _Plain()
    plain.inner = PiHarness("pi", corral_shell=True)
    want = _scan(log, plain, 1 << 20, monkeypatch)
    for chunk in (1000, 1 << 20):
        assert _scan(log, PiHarness("pi", corral_shell=True), chunk, monkeypatch) == want
    assert [e for e in want[0] if e["kind"] == "recovered"]


ODD_ARGS = [b"{}", b'{"a": {}}', b'{, "a": 1}', b'{"a": 1,}', b'{"a": 1 "b": 2}', b'{"a":1,,"b":2}', b'{"a": [1]}']
ODD_RESULTS = [
    b'{"x": [1 2]}',
    b'{"x": [,1]}',
    b'{"x": [1,]}',
    b'{"x": {, "a": 1}}',
    b'{"x": [{"a": 1}, 2], "y": {}}',
    b'{, "content": []}',
    b'{"content": [] "details": {}}',
    b'{"content": [{"type": "text", "text": "ok"}], "details": {}}',
    b'{"content": [{"type": "text", "text": "ok"},]}',
]


@pytest.mark.parametrize("args", ODD_ARGS)
@pytest.mark.parametrize("result", ODD_RESULTS)
def test_objects_and_arrays_valid_or_not_read_as_parsing_reads_them(tmp_path, monkeypatch, args, result):
    start = b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", "args": ' + args + b"}\n"
    end = b'{"type": "tool_execution_end", "toolCallId": "t5", "toolName": "bash", "result": ' + result
    end += b', "isError": false}\n'
    for before in (_calls(1, 20), _calls(1, 3, fail_every=3)):  # no failure open, and one open
        _same(tmp_path, monkeypatch, before + _update(5) + start + end + _calls(21, 30), (4096, 1 << 20))


@pytest.mark.parametrize(
    "start",
    [
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "", "args": {"command": "make"}}\n',
        b'{"type":"tool_execution_start","toolCallId":"t5","toolName":"bash","args":{}}\n',
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", "args": {"command": "make"}, '
        b'"toolCallId": "t6"}\n',
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", '
        b'"args": {"command": "m\\u0061ke"}}\n',
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", "args": {"command": "make", '
        b'"command": "make -k"}}\n',
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", "args": {"command": "make"}}\r\n',
        b'{"type": "tool_execution_start", "toolCallId": "t5", "toolName": "bash", "args": "make"}\n',
    ],
)
@pytest.mark.parametrize("end", ["failing", "healthy", "none"])
def test_crafted_start_lines_read_as_parsing_reads_them(tmp_path, monkeypatch, start, end):
    ends = {"failing": _end(5, error=True), "healthy": _end(5), "none": b""}
    retry = _update(40) + start.replace(b'"t5"', b'"t40"') + _end(40)
    for before in (_calls(1, 20), _calls(1, 3, fail_every=3)):
        data = before + _update(5) + start + ends[end] + _calls(21, 19) + retry + _calls(41, 10)
        _same(tmp_path, monkeypatch, data, (4096, 1 << 20))


def test_spellings_mixed_between_and_within_lines_read_as_parsing_reads_them(tmp_path, monkeypatch):
    mixed = (
        b'{"type": "tool_execution_start","toolCallId":"t30", "toolName":"bash","args":{"command": "make"}}\n'
        b'{"type":"tool_execution_end", "toolCallId": "t30","toolName":"bash","result":"ok","isError": false}\n'
    )
    lines = []
    for n in range(1, 120):
        compact = n % 3 == 0
        lines += [_update(n), _start(n, f"pytest t{n % 5}.py", compact), _end(n, n % 13 == 0, not compact)]
        if n % 29 == 0:
            lines.append(mixed.replace(b"t30", b"t%d" % (1000 + n)))
    events = _same(tmp_path, monkeypatch, b"".join(lines), (1000, 1 << 20))
    assert _failures(events)


@pytest.mark.parametrize("seed", range(4))
def test_a_log_scanned_as_it_grows_folds_the_same_both_ways(tmp_path, seed):
    """The log grown in pieces cut anywhere (inside a pair, a line), each piece scanned on from the cursor."""
    rng = random.Random(100 + seed)
    whole = _calls(1, 60) + _calls(61, 200, fail_every=7, commands=5) + _calls(300, 40, fail_every=2)
    cuts = [*sorted(rng.sample(range(1, len(whole)), 5)), len(whole)]
    log = tmp_path / "output.log"
    results = []
    for harness in (PiHarness("pi"), _Plain()):
        cursors, events, done = Cursors(None), [], 0
        log.write_bytes(b"")
        for cut in cuts:
            with log.open("ab") as f:
                f.write(whole[done:cut])
            done = cut
            events += scan(log, harness, "/wt", cursors, final=cut == len(whole))
        results.append((events, cursors.collector.to_json()))
    assert results[0] == results[1] and results[0][0]
