"""A session's failure journal (docs/incidents.md): its events, appended and read back.

Files of a session's journal directory (``ProjectPaths.journal_dir``):

- ``failures.jsonl`` — append-only, one event per line (``corral.domain.incidents``), each
  append fsynced. Nothing is ever removed from it.
- ``failures.observed`` — written (and fsynced, with its directory) before the first append, so a
  journal that later goes missing is known to be missing, not "no failures".
- ``failures.cursor.json`` — where each output log's scan stopped (``runtime/journal_scan``, the
  scan that fills the journal from a turn's output log).

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
from pathlib import Path
from typing import Any

from corral.adapters.files import fsync_dir, private_dirs, write_atomic
from corral.domain.bounded_json import Decoded, decode
from corral.domain.incidents import FailureState, reduce

JOURNAL = "failures.jsonl"
OBSERVED = "failures.observed"
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

    # -- writing -------------------------------------------------------------------------------
    def append(self, events: list[dict[str, Any]]) -> bool:
        """Append ``events`` (after any still pending), fsynced; False (and kept in memory) if it failed."""
        self.pending.extend(events)
        if not self.pending and self.path.exists():
            return True
        try:  # an observation that found nothing still leaves the (empty) journal: "observed, no failures"
            self._mark_observed()
            payload = b"".join(json.dumps(e, sort_keys=True).encode("utf-8") + b"\n" for e in self.pending)
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
        marker = self.dir / OBSERVED
        if not marker.exists():
            private_dirs(self.dir)
            write_atomic(marker, b"observed\n")
            fsync_dir(self.dir)

    # -- reading -------------------------------------------------------------------------------
    def read(self, state: FailureState | None = None) -> FailureState:
        """The reduced state, from ``state`` (which covers the journal up to its ``offset``) on.

        ``state`` is advanced over what the journal holds; what is only true now — events a failed
        write still holds, a torn or missing journal — is added to the copy returned, so the next
        incremental read never counts them twice.
        """
        state = (state.clean or state) if state is not None else FailureState()
        events, state.offset, torn, unreadable = read_events(self.path, state.offset)
        state.torn = torn
        state.unreadable += unreadable
        reduce(state, events)
        if not (torn or unreadable or self.pending or self._missing()):
            return state
        clean, state = state, copy.deepcopy(state)
        state.clean = clean
        if self._missing():
            reduce(state, [_gap("journal-missing", "the failure journal is missing: it was written, then lost")])
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
