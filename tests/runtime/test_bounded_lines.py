"""The one bounded JSON decode (``domain/bounded_json``) and every reader of harness output that uses it.

A line nested deeper than the bound, or too large, is refused before the decoder sees it, with
its reason: the harness parsers give an ``unparseable`` event (the line stays text), the incident
scan records an observation gap and goes on, ``logs`` shows the line as it came. The depth check
agrees with a plain recursive count on any text, strings included.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import Event, shell_exit_code
from corral.adapters.harness.claude import ClaudeHarness
from corral.domain.bounded_json import MAX_DEPTH, Decoded, Reason, Unparseable, decode, decode_first, too_deep
from corral.engine.read.interleave import Line
from corral.engine.read.log_text import readable
from corral.engine.runtime.journal import MAX_RECORD
from corral.engine.runtime.journal_scan import Cursors, scan
from corral.engine.runtime.lines import MAX_LINE_BYTES, LineBuffer, TruncatedLine
from corral.engine.runtime.output import OutputCopier

HARNESSES = ("claude", "codex", "pi")


def nested_array(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_object(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def reference_depth(text: str) -> int:
    """The deepest nesting outside strings, counted one character at a time (what the decoder meets)."""
    deepest = level = 0
    inside = escaped = False
    for ch in text:
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


# -- the decode -------------------------------------------------------------------------------------


def test_a_line_deeper_than_the_interpreter_can_decode_is_refused_with_its_reason():
    for line in (nested_array(100_000), nested_object(100_000), b'{"x":' + nested_array(5_000) + b"}"):
        result = decode(line)
        assert result == Unparseable(Reason.TOO_DEEP, f"nested deeper than {MAX_DEPTH} levels")


def test_a_structure_the_decoder_would_take_but_later_code_could_not_walk_is_refused_too():
    near = nested_object(sys.getrecursionlimit() - 100)
    json.loads(near)  # the standard decoder takes it whole
    assert isinstance(decode(near), Unparseable) and decode(near).reason is Reason.TOO_DEEP


def test_the_bound_is_exact_and_brackets_inside_strings_do_not_count():
    assert decode(nested_array(MAX_DEPTH)) == Decoded(json.loads(nested_array(MAX_DEPTH)))
    assert decode(nested_array(MAX_DEPTH + 1)).reason is Reason.TOO_DEEP  # type: ignore[union-attr]
    quoted = json.dumps({"text": "[" * 10_000 + '\\"{' * 500, "list": [[1], {"a": [2]}]}).encode()
    assert decode(quoted) == Decoded(json.loads(quoted))
    # many shallow brackets (more than the bound, never deeper than two): decoded
    wide = json.dumps([[i, {"k": [i]}] for i in range(5_000)]).encode()
    assert decode(wide) == Decoded(json.loads(wide))


def test_too_large_malformed_and_cut_short_lines_say_so():
    assert decode(b"[1]" * 10, max_bytes=8) == Unparseable(Reason.TOO_LARGE, "larger than 8 bytes")
    assert decode(b"[1]", length=3 * 1024 * 1024) == Unparseable(Reason.TOO_LARGE, "larger than 2 MiB")
    assert decode(b'{"a": ').reason is Reason.MALFORMED  # type: ignore[union-attr]
    assert decode(b"\xff\xfe{").reason is Reason.MALFORMED  # type: ignore[union-attr]
    assert decode_first('  {"corral_shell": 1} and text after') == Decoded({"corral_shell": 1})
    assert decode_first(" " + "[" * 50_000).reason is Reason.TOO_DEEP  # type: ignore[union-attr]


@given(
    st.lists(
        st.sampled_from(["[", "]", "{", "}", '"', "\\", "a", ",", ":", '"[', '\\"', "[[[[", "]]]]"]), max_size=400
    ),
    st.integers(min_value=0, max_value=40),
)
def test_the_depth_check_agrees_with_a_plain_count_on_any_text(parts, limit):
    """Equal to the count, an open string running to the end (where the decoder stops) included."""
    text = "".join(parts)
    expected = reference_depth(text) > limit
    assert too_deep(text, limit) is expected
    assert too_deep(text.encode(), limit) is expected


def test_the_depth_check_is_linear_on_open_strings_full_of_escaped_quotes():
    for line in (b"[" * 200 + b'"' + b'\\"' * 400_000, b"[" * 200 + b'"\\' * 400_000, b'["' * 400_000):
        assert decode(line).reason is Reason.TOO_DEEP  # type: ignore[union-attr]  (quadratic: hours)


# -- the harness parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", HARNESSES)
def test_each_stream_parser_gives_a_deep_or_cut_line_as_unparseable_and_text_as_nothing(name):
    harness = make_harness(name, {})
    deep = harness.parse(b'{"type":"assistant","message":' + nested_array(100_000) + b"}")
    assert deep == [Event("unparseable", text=f"nested deeper than {MAX_DEPTH} levels")]
    assert harness.parse(nested_array(100_000)) == deep
    assert harness.parse(b'{"type": "result", "oops') == [Event("unparseable", text="not valid JSON")]
    assert harness.parse(b"plain words from the harness") == []
    (cut,) = LineBuffer().feed(b'{"type":"assistant","pad":"' + b"x" * MAX_LINE_BYTES + b'"}\n')
    assert isinstance(cut, TruncatedLine)
    assert harness.parse(cut) == [Event("unparseable", text="larger than 1 MiB")]


def test_a_tool_result_that_is_deep_json_has_no_exit_code_and_raises_nothing():
    assert shell_exit_code('{"corral_shell": 1, "exit_code": 3}') == 3
    assert shell_exit_code('{"corral_shell": 1, "x": ' + "[" * 100_000) is None


# -- the incident scan ------------------------------------------------------------------------------


def test_the_scan_records_a_deep_record_as_a_gap_and_reads_on(tmp_path):
    harness = make_harness("claude", {})
    log = tmp_path / "output.log"
    deep = b'{"type":"assistant","message":{"content":' + nested_array(100_000) + b"}}\n"
    near = b'{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":'
    near += nested_object(950) + b"}]}}\n"
    after = json.dumps({"type": "result", "subtype": "error", "is_error": True, "result": "boom"}).encode() + b"\n"
    log.write_bytes(deep + near + after)
    events = scan(log, harness, "/wt", Cursors(None))  # type: ignore[arg-type]
    assert [(e["kind"], e["id"]) for e in events] == [
        ("incomplete", "incomplete:too-deep:0"),
        ("incomplete", f"incomplete:too-deep:{len(deep)}"),
        ("failure", f"model:output.log:{len(deep) + len(near)}"),
    ]
    assert events[0]["summary"] == f"a record nested deeper than {MAX_DEPTH} levels at byte 0"


def test_a_ten_mebibyte_line_is_one_gap_whether_the_log_ends_inside_it_or_not(tmp_path):
    harness = make_harness("claude", {})
    log = tmp_path / "output.log"
    big = b'{"type":"assistant","pad":"' + b"x" * (5 * MAX_RECORD) + b'"}\n'
    after = json.dumps({"type": "result", "subtype": "error", "is_error": True, "result": "boom"}).encode() + b"\n"
    log.write_bytes(big + after)
    whole = scan(log, harness, "/wt", Cursors(None))  # type: ignore[arg-type]
    assert [(e["kind"], e["id"]) for e in whole] == [
        ("incomplete", "incomplete:oversized:0"),
        ("failure", f"model:output.log:{len(big)}"),
    ]
    # the same bytes seen by a scan that met the log while it ended inside the long line
    grown = tmp_path / "grown" / "output.log"
    grown.parent.mkdir()
    grown.write_bytes(big[: 3 * MAX_RECORD])
    cursors = Cursors(None)
    first = scan(grown, harness, "/wt", cursors)  # type: ignore[arg-type]
    with grown.open("ab") as fh:
        fh.write(big[3 * MAX_RECORD :] + after)
    assert first + scan(grown, harness, "/wt", cursors) == whole  # type: ignore[arg-type]


# -- logs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HARNESSES)
def test_logs_show_a_line_no_parser_takes_as_the_text_it_is(name):
    harness = make_harness(name, {})
    for data in (nested_array(100_000), b'{"type":"assistant","message":' + nested_array(10_000) + b"}"):
        (shown,) = readable(harness, Line("stdout", data, None, 1))
        assert shown == data.decode()


class _Stumbling(ClaudeHarness):
    """Claude Code's parser, failing on the lines that say ``stumble`` (as a parser bug would)."""

    def parse(self, line: bytes) -> list[Event]:
        if b"stumble" in line:
            raise TypeError("a field of an unexpected type")
        return super().parse(line)


def test_a_parser_that_fails_on_a_line_costs_that_line_never_the_copy(tmp_path):
    out_fd = os.open(tmp_path / "output.log", os.O_WRONLY | os.O_CREAT, 0o600)
    err_fd = os.open(tmp_path / "stderr.log", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        copier = OutputCopier(_Stumbling("claude"), out_fd, err_fd)
        text = b'{"type":"assistant","message":{"content":[{"type":"text","text":"still here"}]}}'
        assert copier.take([b'{"type":"stumble"}', text]) is True
    finally:
        os.close(out_fd)
        os.close(err_fd)
    assert [(e.kind, e.text) for e in copier.events] == [
        ("unparseable", "the Claude Code parser failed on it (TypeError)"),
        ("text", "still here"),
    ]
    (shown,) = readable(_Stumbling("claude"), Line("stdout", b'{"type":"stumble"}', None, 1))
    assert shown == '{"type":"stumble"}'
