"""A turn's two output streams, interleaved in the order the agent wrote them.

The supervisor's copy writes ``output.log`` (stdout, verbatim), ``stderr.log`` and
``output.index``: the order of the two streams and where each attempt began
(:class:`~corral.engine.runtime.output.OutputIndex`). :class:`TurnLog` reads the three
incrementally, so ``logs`` and ``logs -f`` show stderr interleaved with stdout, with each
attempt's start; a turn from before the index shows its stdout alone. Lines are bytes here;
``read/log_text`` makes them readable and the surface escapes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from msgspec import Struct

from corral.domain.bounded_json import Decoded, decode
from corral.engine.paths import OUTPUT_INDEX, OUTPUT_LOG, STDERR_LOG

#: What one read takes of a log at most; a follower reads the rest on its next poll.
READ_BYTES = 1 << 20
#: A line longer than this is shown in pieces of this size (the log keeps it whole).
MAX_LINE_BYTES = 1 << 20
#: An index line longer than this is not one corral wrote: it is skipped.
MAX_INDEX_LINE = 4096

STREAMS = {"o": ("stdout", OUTPUT_LOG), "e": ("stderr", STDERR_LOG)}


class Line(Struct, frozen=True):
    """One line of one stream (without its newline), with the time its run began."""

    stream: str  # stdout | stderr
    data: bytes
    at: datetime | None
    attempt: int | None


class AttemptStart(Struct, frozen=True):
    number: int
    at: datetime | None


Piece = Line | AttemptStart


class _Record(Struct, frozen=True):
    kind: str  # a | o | e
    pos: dict[str, int]
    at: datetime | None


def _parse_record(raw: bytes) -> _Record | None:
    decoded = decode(raw, max_bytes=MAX_INDEX_LINE)
    doc = decoded.value if isinstance(decoded, Decoded) else None
    if not isinstance(doc, dict) or doc.get("k") not in ("a", "o", "e"):
        return None
    o, e, t = doc.get("o"), doc.get("e"), doc.get("t")
    if not (isinstance(o, int) and isinstance(e, int) and o >= 0 and e >= 0):
        return None
    at = datetime.fromtimestamp(t, UTC) if isinstance(t, int | float) and 0 <= t < 1e11 else None
    return _Record(doc["k"], {"o": o, "e": e}, at)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class TurnLog:
    """Reads one turn's logs as they grow: each :meth:`poll` returns the pieces that became whole."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.records: list[_Record] = []
        self._index_at = 0  # bytes of the index read
        self._index_rest = b""  # an index line not yet ended
        self._j = 0  # the record whose run is being read
        self._begun = -1  # the last attempt record announced
        self._attempts = 0
        self._cursor = {"o": 0, "e": 0}
        self._pending = {"o": b"", "e": b""}
        self._pending_at: dict[str, datetime | None] = {"o": None, "e": None}

    def _read_index(self) -> None:
        path = self.directory / OUTPUT_INDEX
        try:
            with path.open("rb") as fh:
                fh.seek(self._index_at)
                data = fh.read(READ_BYTES)
        except OSError:
            return
        self._index_at += len(data)
        *lines, self._index_rest = (self._index_rest + data).split(b"\n")
        if len(self._index_rest) > MAX_INDEX_LINE:
            self._index_rest = b""
        for raw in lines:
            record = _parse_record(raw) if len(raw) <= MAX_INDEX_LINE else None
            if record is not None:
                self.records.append(record)

    def _read(self, stream: str, start: int, end: int) -> bytes:
        try:
            with (self.directory / STREAMS[stream][1]).open("rb") as fh:
                fh.seek(start)
                return fh.read(max(0, min(end - start, READ_BYTES)))
        except OSError:
            return b""

    def _lines(self, stream: str, data: bytes, at: datetime | None) -> Iterator[Line]:
        if not self._pending[stream]:
            self._pending_at[stream] = at
        buf = self._pending[stream] + data
        *whole, rest = buf.split(b"\n")
        for raw in whole:
            yield Line(STREAMS[stream][0], raw, self._pending_at[stream], self._attempt_no())
            self._pending_at[stream] = at
        while len(rest) > MAX_LINE_BYTES:
            yield Line(STREAMS[stream][0], rest[:MAX_LINE_BYTES], self._pending_at[stream], self._attempt_no())
            rest = rest[MAX_LINE_BYTES:]
        self._pending[stream] = rest
        if not rest:
            self._pending_at[stream] = None

    def _attempt_no(self) -> int | None:
        return self._attempts or None

    def _flush(self) -> Iterator[Line]:
        for stream in ("o", "e"):
            rest = self._pending[stream]
            if rest:
                yield Line(STREAMS[stream][0], rest, self._pending_at[stream], self._attempt_no())
            self._pending[stream] = b""
            self._pending_at[stream] = None

    def poll(self) -> list[Piece]:
        """What was written since the last poll, in order (a line still open waits for its end)."""
        sizes = {s: _size(self.directory / STREAMS[s][1]) for s in STREAMS}  # before the index: see below
        self._read_index()
        out: list[Piece] = []
        if not self.records:  # a turn from before the index: its stdout alone
            while self._cursor["o"] < sizes["o"]:
                data = self._read("o", self._cursor["o"], sizes["o"])
                if not data:
                    break
                self._cursor["o"] += len(data)
                out.extend(self._lines("o", data, None))
            return out
        # The sizes were taken first: every byte they cover was announced by a record already in
        # the index, so no byte is given to a run that came before its own record.
        while self._j < len(self.records):
            record = self.records[self._j]
            nxt = self.records[self._j + 1] if self._j + 1 < len(self.records) else None
            if record.kind == "a":
                if self._begun < self._j:
                    out.extend(self._flush())
                    self._attempts += 1
                    self._begun = self._j
                    out.append(AttemptStart(self._attempts, record.at))
                if nxt is None:
                    break
                self._j += 1
                continue
            s = record.kind
            end = min(nxt.pos[s] if nxt is not None else sizes[s], sizes[s])
            while self._cursor[s] < end:
                data = self._read(s, self._cursor[s], end)
                if not data:
                    break
                self._cursor[s] += len(data)
                out.extend(self._lines(s, data, record.at))
            if nxt is None or self._cursor[s] < nxt.pos[s]:
                break
            self._j += 1
        return out

    def finish(self) -> list[Piece]:
        """The turn is over: what :meth:`poll` still finds, then every line left open."""
        out = self.poll()
        out.extend(self._flush())
        return out
