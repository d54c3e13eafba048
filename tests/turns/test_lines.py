"""The supervisor's line splitter: lines as they close, in any chunking, an over-long line capped and marked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.engine.runtime.lines import MAX_LINE_BYTES, LineBuffer, TruncatedLine


def split_all(chunks: list[bytes], max_line: int = 1 << 20) -> tuple[list[bytes], LineBuffer]:
    buf = LineBuffer(max_line)
    out: list[bytes] = []
    for chunk in chunks:
        out += buf.feed(chunk)
    return out + buf.flush(), buf


def test_lines_close_at_newlines_and_the_tail_comes_on_flush() -> None:
    lines, _ = split_all([b"one\ntw", b"o\n\nthr", b"ee"])
    assert lines == [b"one", b"two", b"", b"three"]


def test_a_stream_ending_in_a_newline_leaves_nothing_to_flush() -> None:
    buf = LineBuffer()
    assert buf.feed(b"a\nb\n") == [b"a", b"b"]
    assert buf.flush() == []
    assert buf.feed(b"") == [] and buf.flush() == []


def test_an_over_long_line_keeps_its_first_bytes_and_the_next_line_is_whole() -> None:
    lines, buf = split_all([b"x" * 10, b"y" * 10 + b"\nnext\n"], max_line=12)
    assert lines == [b"x" * 10 + b"yy", b"next"]
    assert buf.truncated == 1
    cut, whole = lines
    assert isinstance(cut, TruncatedLine) and cut.length == 20
    assert type(whole) is bytes  # a line within the cap is plain bytes


def test_an_over_long_line_inside_one_chunk_is_cut_and_marked_too() -> None:
    lines, buf = split_all([b"ok\n" + b"w" * 30 + b"\nafter\n"], max_line=8)
    assert lines == [b"ok", b"w" * 8, b"after"]
    assert [type(line) for line in lines] == [bytes, TruncatedLine, bytes]
    assert lines[1].length == 30  # type: ignore[attr-defined]
    assert buf.truncated == 1


def test_a_line_of_exactly_the_cap_is_whole() -> None:
    lines, buf = split_all([b"abcd", b"\n", b"efgh\n"], max_line=4)
    assert lines == [b"abcd", b"efgh"]
    assert not any(isinstance(line, TruncatedLine) for line in lines) and buf.truncated == 0


def test_an_over_long_last_line_without_a_newline_is_capped_too() -> None:
    lines, buf = split_all([b"z" * 50], max_line=8)
    assert lines == [b"z" * 8] and buf.truncated == 1
    assert isinstance(lines[0], TruncatedLine) and lines[0].length == 50


def test_the_cap_is_a_mebibyte_and_at_least_one_byte() -> None:
    assert LineBuffer().max_line == MAX_LINE_BYTES == 1024 * 1024
    with pytest.raises(ValueError):
        LineBuffer(0)


@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(min_value=1, max_value=50))
def test_any_chunking_gives_the_lines_of_the_whole_stream(chunks: list[bytes], max_line: int) -> None:
    whole = b"".join(chunks)
    expected = whole.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    lines, buf = split_all(chunks, max_line)
    assert lines == [line[:max_line] for line in expected]
    assert [isinstance(line, TruncatedLine) for line in lines] == [len(line) > max_line for line in expected]
    assert [line.length for line in lines if isinstance(line, TruncatedLine)] == [
        len(line) for line in expected if len(line) > max_line
    ]
    assert buf.truncated == sum(len(line) > max_line for line in expected)


def test_a_huge_single_line_is_split_in_linear_time() -> None:
    """64 MiB in 256 KiB chunks with no newline until the end: each byte scanned once.

    A quadratic splitter rescans the buffered line per chunk (256 rescans of up to 64 MiB);
    this one keeps at most ``max_line`` bytes, which the assertion on the kept size shows.
    """
    buf = LineBuffer(max_line=1024)
    chunk = b"a" * (256 * 1024)
    for _ in range(256):
        assert buf.feed(chunk) == []
        assert len(buf._buf) <= 1024
    (line,) = buf.feed(b"\n")
    assert line == b"a" * 1024
    assert isinstance(line, TruncatedLine) and line.length == 64 * 1024 * 1024
