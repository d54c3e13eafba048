"""The scan's shortcuts give what the plain ways give: a failing call's excerpt, a run's next call."""

from __future__ import annotations

import json

import pytest

from corral.adapters.harness.pi import PiHarness, _pair_re
from corral.domain.collector import _excerpt
from corral.domain.incidents import SUMMARY_CHARS, excerpt


@pytest.mark.parametrize(
    "text",
    [
        "",
        "FAILED tests/test_a.py::test_x - assert 1 == 2",
        "  spaced   out  ",
        "z" * (SUMMARY_CHARS - 1),
        "z" * SUMMARY_CHARS,
        "z" * (SUMMARY_CHARS + 1),
        "word " * 200,
        "tab\there",
        "line one\nline two\r\n",
        "bell\x07 and del\x7f",
        "caf\u00e9 \u2014 na\u00efve",
        "cut inside \ud83d a character",
        "\u00a0non-breaking\u2003spaces",
        "x" * (SUMMARY_CHARS - 2) + "  \t y",
    ],
)
def test_excerpt_shortcut_is_the_excerpt(text: str) -> None:
    assert _excerpt(text) == excerpt(text)


def test_excerpt_shortcut_blanks_what_the_excerpt_blanks() -> None:
    for code in [*range(0, 0x3100), *range(0xD7F0, 0xE010), 0xFEFF, 0xFFFD, 0x1F600]:
        text = f"a{chr(code)}b {chr(code)}"
        assert _excerpt(text) == excerpt(text), hex(code)


def _line(doc: dict[str, object], compact: bool) -> bytes:
    return json.dumps(doc, separators=(",", ":") if compact else (", ", ": ")).encode() + b"\n"


@pytest.mark.parametrize("compact", [True, False])
def test_next_call_is_the_first_of_the_run(compact: bool) -> None:
    lines = []
    for i in range(6):
        if i % 2:
            lines.append(_line({"type": "message_update", "assistantMessageEvent": {"delta": "y"}}, compact))
        lines.append(
            _line(
                {
                    "type": "tool_execution_start",
                    "toolCallId": f"t{i}",
                    "toolName": "bash",
                    "args": {"command": f"c{i}"},
                },
                compact,
            )
        )
        failed = i == 4
        result = {"content": [{"type": "text", "text": "no" if failed else "ok"}]}
        end = {
            "type": "tool_execution_end",
            "toolCallId": f"t{i}",
            "toolName": "bash",
            "result": result,
            "isError": failed,
        }
        lines.append(_line(end, compact))
    lines.append(_line({"type": "message_update", "assistantMessageEvent": {"delta": "z"}}, compact))
    data = b"".join(lines)
    pi = PiHarness()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A]
    seen = pairs = 0
    for start in starts:
        for end in (len(data), max(start, len(data) - 7)):
            found = _pair_re().match(data, start, end)
            whole = (
                None if found is None else (found["id"].decode(), found["name"].decode(), found["args"], found.end())
            )
            assert pi.incident_pair(data, start, end) == whole  # its first-bytes test turns away no pair
            pairs += whole is not None
            first = next(iter(pi.incident_run_calls(data, start, end)), None)
            assert pi.incident_next_call(data, start, end) == first
            seen += first is not None
    assert seen and pairs  # some start begins a run, and a pair
