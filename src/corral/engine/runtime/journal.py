"""A session's failure journal (docs/incidents.md): its events, appended and read back.

Files of a session's journal directory (``ProjectPaths.journal_dir``):

- ``failures.jsonl`` — append-only, one event per line (``corral.domain.incidents``), each
  append fsynced. Nothing is ever removed from it.
- ``failures.observed`` — written (and fsynced, with its directory) before the first append, so a
  journal that later goes missing is known to be missing, not "no failures"; ``failures.written``
  beside it before the first event, so a journal later emptied is known to have lost its events.
- ``failures.cursor.json`` — where each output log's scan stopped (``runtime/journal_scan``, the
  scan that fills the journal from a turn's output log).

Every event a scan makes has an **identity** (``eid``, :func:`identity`): the log and byte its
evidence points at and its kind (a failure), what it recovers (a recovery), its id (a gap, a
disposition). An event whose identity the journal holds already is not appended again, so a
rescan from any cursor — lost, stale, reset, or a log replaced by an identical copy — adds
nothing twice. Events written before identities get theirs derived the same way when the journal
is read, so the first rescan under identities appends nothing that is already there. The scan's
cursor is written into the journal with the events it covers (a ``cursor`` record, in the same
write), so a lost cursor file costs a rescan of what followed the last events, not of the log.

One writer per turn: its supervisor while it runs, the reconciler for a turn found lost. A write
that fails keeps its events in memory and tries again at the next scan; until then the state read
says the observation is incomplete.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

from corral.adapters.files import fsync_dir, private_dirs, write_atomic
from corral.domain.bounded_json import Decoded, decode
from corral.domain.incidents import FailureState, reduce

JOURNAL = "failures.jsonl"
OBSERVED = "failures.observed"
WRITTEN = "failures.written"
#: The kind of a journal line that is the scan's cursor, not an event: never reduced.
CURSOR_KIND = "cursor"
#: A structured record longer than this is not parsed: it is an incomplete observation.
MAX_RECORD = 2 * 1024 * 1024
#: How much of the journal one read takes.
CHUNK = 1 << 20


class Journal:
    """One session's journal directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / JOURNAL
        self.pending: list[dict[str, Any]] = []  # events a failed write still holds
        self.write_error: str | None = None
        # The identities the journal holds (read on from ``_known_at`` before each append), the count
        # of each derived one's base (the n-th is ``base#n``), and the last cursor record met.
        self._known: set[str] = set()
        self._bases: Counter[str] = Counter()
        self._known_at = 0
        self.cursor: dict[str, Any] | None = None

    # -- writing -------------------------------------------------------------------------------
    def append(self, events: list[dict[str, Any]], cursor: dict[str, Any] | None = None) -> bool:
        """Append ``events`` (after any still pending) but those whose identity the journal holds,
        then ``cursor`` (the scan's, covering them) as a ``cursor`` record, in one fsynced write;
        False (and the events kept in memory) if it failed."""
        self.pending.extend(events)
        if not self.pending and cursor is None and self.path.exists():
            return True
        try:  # an observation that found nothing still leaves the (empty) journal: "observed, no failures"
            self._mark_observed()
            emptied = self._learn()
            fresh = [e for e in self.pending if not (isinstance(e.get("eid"), str) and e["eid"] in self._known)]
            if emptied:  # its events are gone: said in the journal itself, before anything new
                fresh.insert(0, _gap("journal-emptied", EMPTIED))
            if fresh:
                self._mark(WRITTEN, b"written\n")
            records = fresh + ([{"kind": CURSOR_KIND, **cursor}] if cursor is not None else [])
            payload = b"".join(json.dumps(e, sort_keys=True).encode("utf-8") + b"\n" for e in records)
            # Non-blocking and no symlink: a FIFO or a link where the journal belongs is refused, never waited on.
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise OSError(errno.EINVAL, "not a regular file")
                if info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
                    payload = b"\n" + payload  # a torn last line stays a line of its own: the new events are whole
                written = 0
                while written < len(payload):
                    written += os.write(fd, payload[written:])
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.write_error = f"{exc.strerror or exc} ({self.path})"
            return False
        self.pending.clear()
        self.write_error = None
        return True

    def _mark_observed(self) -> None:
        self._mark(OBSERVED, b"observed\n")

    def _mark(self, name: str, content: bytes) -> None:
        marker = self.dir / name
        if not marker.exists():
            private_dirs(self.dir)
            write_atomic(marker, content)
            fsync_dir(self.dir)

    def _learn(self) -> bool:
        """Read the journal on from where this did last: its events' identities and its last cursor.
        True when it holds fewer bytes than it did, or none after events were written to it (emptied)."""
        try:
            size = os.stat(self.path, follow_symlinks=False).st_size
        except OSError:  # missing (a read says so while it is): not emptied
            size, emptied = 0, False
        else:
            emptied = size < self._known_at or (size == 0 and (self.dir / WRITTEN).exists())
        if size < self._known_at:  # shrunk under this reader: what it holds now is read afresh
            self._known, self._bases, self._known_at, self.cursor = set(), Counter(), 0, None
        events, self._known_at, _torn, _bad = read_events(self.path, self._known_at)
        for event in events:
            if event.get("kind") == CURSOR_KIND:
                self.cursor = event
                continue
            eid = event.get("eid")
            if not isinstance(eid, str):  # written before identities: derived as a scan derives them
                base = identity(event)
                eid = _nth(base, self._bases[base])
                self._bases[base] += 1
            self._known.add(eid)
        return emptied

    def last_cursor(self) -> dict[str, Any] | None:
        """The last cursor record the journal holds (its ``kind`` field removed), or None."""
        self._learn()
        if self.cursor is None:
            return None
        return {k: v for k, v in self.cursor.items() if k != "kind"}

    # -- reading -------------------------------------------------------------------------------
    def read(self, state: FailureState | None = None) -> FailureState:
        """The reduced state, from ``state`` (which covers the journal up to its ``offset``) on.

        ``state`` is advanced over what the journal holds; what is only true now — events a failed
        write still holds, a torn, missing or emptied journal — is added to the copy returned, so the
        next incremental read never counts them twice.
        """
        state = (state.clean or state) if state is not None else FailureState()
        emptied = self._emptied(state.offset)
        if emptied and state.offset:
            state = FailureState()  # shorter than what was read: read afresh (the gap below says why)
        events, state.offset, torn, unreadable = read_events(self.path, state.offset)
        state.torn = torn
        state.unreadable += unreadable
        reduce(state, [e for e in events if e.get("kind") != CURSOR_KIND])
        if not (torn or unreadable or self.pending or emptied or self._missing()):
            return state
        clean, state = state, copy.deepcopy(state)
        state.clean = clean
        if self._missing():
            reduce(state, [_gap("journal-missing", "the failure journal is missing: it was written, then lost")])
        elif emptied:
            reduce(state, [_gap("journal-emptied", EMPTIED)])
        if torn:
            reduce(state, [_gap("journal-torn", "the journal's last record is incomplete (cut off mid-write)")])
        if state.unreadable:
            reduce(state, [_gap("journal-unreadable", f"{state.unreadable} journal record(s) could not be read")])
        if self.pending:
            reduce(state, self.pending)  # what storage has not taken yet is still evidence
            reason = self.write_error or "storage refused the write"
            reduce(state, [_gap("journal-write", f"the failure journal could not be written: {reason}")])
        return state

    def _missing(self) -> bool:
        return not os.path.lexists(self.path) and (self.dir / OBSERVED).exists()

    def _emptied(self, offset: int) -> bool:
        """The journal holds fewer bytes than were read from it, or none though events were written."""
        try:
            size = os.stat(self.path, follow_symlinks=False).st_size
        except OSError:
            return False
        return size < offset or (size == 0 and (self.dir / WRITTEN).exists())


#: Why a journal that lost its events is an incomplete observation.
EMPTIED = "the failure journal was emptied or cut short after events were written to it: those events are lost"


def identity(event: dict[str, Any], nth: int = 0) -> str:
    """An event's identity, as a scan stamps it (``eid``) and as a journal written before identities
    derives it: a failure by the log and byte of its evidence, its kind and its incident (the call's
    own id when it is the first of its operation); a recovery by what it recovers; a gap and a
    disposition by their ids. ``nth``: the how-many-th event of the same base from one log line."""
    kind = event.get("kind")
    if kind == "failure":
        where = event.get("evidence")
        base = f"failure@{where}:{event.get('id')}" if isinstance(where, str) else None
        if base is None:  # corral's own observation (no log line): what it says is what it is
            base = f"failure:{event.get('id')}:{event.get('summary')}"
    elif kind == "recovered":
        base = f"recovered:{event.get('operation')}:{','.join(str(i) for i in event.get('incidents') or ())}"
    elif kind in ("incomplete", "disposition"):
        base = f"{kind}:{event.get('id')}"
    else:
        import hashlib  # an event of another kind only: reading a journal (show) loads no OpenSSL

        doc = json.dumps({k: v for k, v in event.items() if k not in ("at", "eid")}, sort_keys=True, default=str)
        base = f"{kind}:{hashlib.sha256(doc.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}"
    return _nth(base, nth)


def stamp(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` (of one scan, in order) each with its identity, ``eid``: the n-th event of one base gets
    ``base#n`` — events of one base come from one log line, whose events a scan never splits."""
    seen: Counter[str] = Counter()
    for event in events:
        if "eid" not in event:
            base = identity(event)
            event["eid"] = _nth(base, seen[base])
            seen[base] += 1
    return events


def _nth(base: str, nth: int) -> str:
    return f"{base}#{nth}" if nth else base


def read_events(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int, bool, int]:
    """(events, the offset after the last complete line, whether a torn line follows, unreadable lines)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return [], offset, False, 0  # no journal there (the marker says whether there should be)
    except OSError:
        return [], offset, False, 1  # a symlink (or anything else that will not open) where the journal belongs
    chunks = []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], offset, False, 1  # a directory or a FIFO where the journal belongs: unreadable
        os.lseek(fd, offset, os.SEEK_SET)
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
    except OSError:
        return [], offset, False, 1
    finally:
        os.close(fd)
    data = b"".join(chunks)
    end = data.rfind(b"\n") + 1
    events: list[dict[str, Any]] = []
    unreadable = 0
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        decoded = decode(line, max_bytes=MAX_RECORD)
        event = decoded.value if isinstance(decoded, Decoded) else None
        if isinstance(event, dict):
            events.append(event)
        else:
            unreadable += 1
    return events, offset + end, end < len(data), unreadable


def _gap(key: str, summary: str) -> dict[str, Any]:
    return {"kind": "incomplete", "id": f"incomplete:{key}", "operation": "evidence", "summary": summary}
