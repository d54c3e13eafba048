"""Text intake is sanitized at the boundary (seed 002): sanitize and deliver, never reject.

The oracle below is written from the seed, not from the implementation: C0 except
tab/LF/CR, DEL and C1 become ``\\uXXXX``; a byte that was not valid UTF-8 (a lone
surrogate U+DC80..U+DCFF from ``surrogateescape``) becomes ``\\xNN``; any other
lone surrogate is escaped too, since it cannot be stored as UTF-8.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from corral.domain.sanitize import (
    DEFAULT_TEXT_CAP,
    check_size,
    sanitize_field,
    sanitize_goal,
    sanitize_paths,
    sanitize_prose,
)
from corral.errors import TextTooLarge, UsageError

C0 = [chr(c) for c in range(0x00, 0x20) if chr(c) not in "\t\n\r"]
C1 = [chr(c) for c in range(0x80, 0xA0)]
DEL = ["\x7f"]
CONTROLS = frozenset(C0 + DEL + C1)


def is_control(ch: str) -> bool:
    return ch in CONTROLS or 0xD800 <= ord(ch) <= 0xDFFF


def oracle(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif is_control(ch):
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def count_controls(text: str) -> int:
    return sum(1 for ch in text if is_control(ch))


clean_text = hs.text(hs.characters(exclude_categories=("Cs",), exclude_characters=CONTROLS))
# Any text at all: controls, surrogates (undecodable bytes and others), and ordinary characters.
any_text = hs.text(
    hs.one_of(
        hs.characters(exclude_categories=()),
        hs.sampled_from(sorted(CONTROLS)),
        hs.integers(0x80, 0xFF).map(lambda b: chr(0xDC00 + b)),
    )
)


@given(clean_text)
def test_clean_text_round_trips_byte_for_byte(text: str) -> None:
    assert sanitize_prose(text).encode("utf-8") == text.encode("utf-8")
    assert sanitize_field(text).encode("utf-8") == text.encode("utf-8")
    assert sanitize_paths([text, text]) == [text, text]


@given(any_text)
def test_no_control_character_survives(text: str) -> None:
    for out in (sanitize_prose(text), sanitize_field(text)):
        assert not [ch for ch in out if is_control(ch)], repr(out)
        out.encode("utf-8")  # storable as strict UTF-8: no surrogate left


@given(any_text)
def test_field_is_exactly_the_escaped_text(text: str) -> None:
    assert sanitize_field(text) == oracle(text)


@given(any_text)
def test_prose_is_the_escaped_text_plus_a_note_only_when_something_changed(text: str) -> None:
    out = sanitize_prose(text)
    escaped = oracle(text)
    assert out.startswith(escaped)
    note = out[len(escaped) :]
    if count_controls(text) == 0:
        assert note == ""
    else:
        assert note.startswith("\n\n")
        assert "corral" in note
        assert str(count_controls(text)) in note
        # the note is printable text itself
        assert not [ch for ch in note if is_control(ch)]


@given(hs.lists(any_text, max_size=5))
def test_paths_are_escaped_without_a_note(paths: list[str]) -> None:
    assert sanitize_paths(paths) == [oracle(p) for p in paths]


@given(clean_text, clean_text)
def test_a_nul_in_prose_becomes_six_characters_and_a_note(before: str, after: str) -> None:
    out = sanitize_prose(before + "\x00" + after)
    assert out.startswith(before + "\\u0000" + after)
    note = out[len(before + "\\u0000" + after) :]
    assert note.startswith("\n\n[corral: 1 non-printable character")
    assert "\x00" not in out


def test_a_nul_in_a_field_is_escaped_without_a_note() -> None:
    assert sanitize_field("a\x00b") == "a\\u0000b"
    assert sanitize_paths(["src/\x00x.py", "ok.py"]) == ["src/\\u0000x.py", "ok.py"]


def test_escapes_are_the_printable_forms() -> None:
    assert sanitize_field("\x01\x1b\x7f\x85\x9f") == "\\u0001\\u001b\\u007f\\u0085\\u009f"
    # tab, LF and CR are ordinary text
    assert sanitize_field("a\tb\nc\rd") == "a\tb\nc\rd"
    assert sanitize_prose("a\tb\nc\rd") == "a\tb\nc\rd"


@given(hs.binary())
def test_invalid_utf8_bytes_become_hex_escapes(raw: bytes) -> None:
    text = raw.decode("utf-8", "surrogateescape")
    out = sanitize_field(text)
    out.encode("utf-8")  # no surrogate survives
    assert out == oracle(text)


def test_invalid_utf8_example() -> None:
    text = b"caf\xe9 \xff\xfe ok".decode("utf-8", "surrogateescape")
    assert sanitize_field(text) == "caf\\xe9 \\xff\\xfe ok"
    prose = sanitize_prose(text)
    assert prose.startswith("caf\\xe9 \\xff\\xfe ok\n\n[corral: 3 non-printable characters were")


def test_goal_is_folded_to_one_line_and_escaped() -> None:
    assert sanitize_goal("  Fix the\nlogin\r\n timeout  ") == "Fix the login timeout"
    assert sanitize_goal("fix\x00it") == "fix\\u0000it"
    assert "[corral:" not in sanitize_goal("fix\x00it")


@pytest.mark.parametrize("ch", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85"])
def test_goal_escapes_control_characters_instead_of_dropping_them(ch: str) -> None:
    """Seed 002: nothing is dropped, only re-encoded. Python's splitlines()/strip() treat
    VT, FF, FS, GS, RS, US and NEL as line breaks or whitespace; a goal must still keep
    them as printable escapes rather than turning them into spaces or removing them."""
    assert sanitize_goal(f"fix{ch}this") == f"fix\\u{ord(ch):04x}this"
    assert sanitize_goal(f"{ch}fix") == f"\\u{ord(ch):04x}fix"


@given(clean_text, hs.integers(min_value=0, max_value=64))
def test_check_size_refuses_exactly_over_the_cap(text: str, cap: int) -> None:
    size = len(text.encode("utf-8"))
    if size > cap:
        with pytest.raises(TextTooLarge) as info:
            check_size("feedback", text, cap)
        assert info.value.exit_code == 2
        assert isinstance(info.value, UsageError)
        assert info.value.code == "text-too-large"
        assert "feedback" in info.value.message
    else:
        check_size("feedback", text, cap)


def test_check_size_counts_bytes_not_characters() -> None:
    check_size("goal", "é" * 5, 10)
    with pytest.raises(TextTooLarge):
        check_size("goal", "é" * 6, 10)


def test_default_cap_is_100_kib() -> None:
    assert DEFAULT_TEXT_CAP == 100 * 1024
    check_size("prompt", "x" * DEFAULT_TEXT_CAP)
    with pytest.raises(TextTooLarge) as info:
        check_size("prompt", "x" * (DEFAULT_TEXT_CAP + 1))
    assert "Nothing was saved" in info.value.message


def test_check_size_counts_lone_surrogates_without_crashing() -> None:
    text = b"\xff".decode("utf-8", "surrogateescape") * 4
    check_size("reason", text, 12)
    with pytest.raises(TextTooLarge):
        check_size("reason", text, 11)
