"""Splitting an agent's stdout into lines, linearly, with what is kept of an over-long line capped.

Each byte is looked at once: a chunk is scanned for newlines from where the last scan
stopped, never from the start of the buffered line, so one 64 MB line costs 64 MB of
scanning, not its square, and what is held of it is at most :data:`MAX_LINE_BYTES`. A
line longer than that keeps its first ``MAX_LINE_BYTES`` (enough for any event a harness
emits; the parser decides what it is) and comes back as a :class:`TruncatedLine`, which
says how long the line really was; the rest of it is dropped here — the caller still
writes every byte to the log.
"""

from __future__ import annotations

#: The most of one line handed to the harness's parser.
MAX_LINE_BYTES = 1024 * 1024


class TruncatedLine(bytes):
    """The first ``max_line`` bytes of a longer line; ``length`` is the whole line's (newline excluded).

    It is ``bytes``, so a parser takes it like any line; ``isinstance(line, TruncatedLine)``
    tells a caller that cares (a line cut short is usually not valid JSON any more).
    """

    length: int

    def __new__(cls, kept: bytes | bytearray, length: int) -> TruncatedLine:
        line = super().__new__(cls, kept)
        line.length = length
        return line


class LineBuffer:
    """Feed it chunks; it returns the complete lines (without their newline) as they close.

    ``feed(chunk)`` returns the lines the chunk closed, in order (an empty line is ``b""``);
    ``flush()`` returns the last line when the stream ended without a newline (or nothing).
    A line over ``max_line`` bytes is returned as a :class:`TruncatedLine` of its first
    ``max_line`` bytes; ``truncated`` counts them.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least one byte")
        self.max_line = max_line
        self.truncated = 0  # how many lines were cut to max_line
        self._buf = bytearray()  # what is kept of the line still open
        self._length = 0  # the open line's length so far, dropped bytes included

    def _keep(self, piece: bytes | memoryview) -> None:
        room = self.max_line - len(self._buf)
        self._buf += piece[:room] if len(piece) > room else piece
        self._length += len(piece)

    def _close(self) -> bytes:
        kept, length = bytes(self._buf), self._length
        self._buf.clear()
        self._length = 0
        if length > len(kept):
            self.truncated += 1
            return TruncatedLine(kept, length)
        return kept

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        view = memoryview(chunk)
        start = 0
        cap = self.max_line
        newline = chunk.find(b"\n")
        if newline >= 0 and self._length:  # the first newline closes the line held from before
            self._keep(view[:newline])
            lines.append(self._close())
            start = newline + 1
            newline = chunk.find(b"\n", start)
        while newline >= 0:  # lines that begin and end in this chunk: sliced out, nothing buffered
            if newline - start > cap:
                self.truncated += 1
                lines.append(TruncatedLine(chunk[start : start + cap], newline - start))
            else:
                lines.append(chunk[start:newline])
            start = newline + 1
            newline = chunk.find(b"\n", start)
        if start < len(chunk):
            self._keep(view[start:])
        return lines

    def flush(self) -> list[bytes]:
        """The last line, when the stream ended without a newline."""
        if not self._length:
            return []
        return [self._close()]
