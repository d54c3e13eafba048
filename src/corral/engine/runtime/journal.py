"""A session's failure journal, and the scan that fills it from a turn's output log (docs/incidents.md).

Files of a session's journal directory (``ProjectPaths.journal_dir``):

- ``failures.jsonl`` — append-only, one event per line (``corral.domain.incidents``), each
  append fsynced. Nothing is ever removed from it.
- ``failures.observed`` — written (and fsynced, with its directory) before the first append, so a
  journal that later goes missing is known to be missing, not "no failures".
- ``failures.cursor.json`` — where each output log's scan stopped (its byte offset, the file's
  identity and first bytes) and the collector's memory, replaced atomically after each scan.

One writer per turn: its supervisor while it runs, the reconciler for a turn found lost. A write
that fails keeps its events in memory and tries again at the next scan; until then the state read
says the observation is incomplete.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Protocol

from corral.adapters.files import fsync_dir, private_dirs, read_bounded, write_atomic
from corral.domain.incidents import Collector, Fact, FailureState, Gap, reduce

JOURNAL = "failures.jsonl"
OBSERVED = "failures.observed"
CURSOR = "failures.cursor.json"
#: A structured record longer than this is not parsed: it is an incomplete observation.
MAX_RECORD = 2 * 1024 * 1024
HEAD_BYTES = 64
CHUNK = 1 << 20


class Facts(Protocol):
    """What a scan needs of a harness adapter: its prefilter and its structured facts."""

    incident_markers: tuple[bytes, ...]

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]: ...


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
        if not self.pending:
            return True
        try:
            self._mark_observed()
            payload = b"".join(json.dumps(e, sort_keys=True).encode("utf-8") + b"\n" for e in self.pending)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
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
        """The reduced state, from ``state`` (which covers the journal up to its ``offset``) on."""
        state = state or FailureState()
        events, state.offset, torn, unreadable = read_events(self.path, state.offset)
        state.torn = torn
        state.unreadable += unreadable
        reduce(state, events)
        if not self.path.exists() and (self.dir / OBSERVED).exists():
            reduce(state, [_gap("journal-missing", "the failure journal is missing: it was written, then lost")])
        if torn:
            reduce(state, [_gap("journal-torn", "the journal's last record is incomplete (cut off mid-write)")])
        if unreadable:
            reduce(state, [_gap("journal-unreadable", f"{unreadable} journal record(s) could not be read")])
        if self.pending:
            reduce(state, self.pending)  # what storage has not taken yet is still evidence
            reason = self.write_error or "storage refused the write"
            reduce(state, [_gap("journal-write", f"the failure journal could not be written: {reason}")])
        return state


def read_events(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int, bool, int]:
    """(events, the offset after the last complete line, whether a torn line follows, unreadable lines)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return [], offset, False, 0
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    end = data.rfind(b"\n") + 1
    events: list[dict[str, Any]] = []
    unreadable = 0
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(event, dict):
            events.append(event)
        else:
            unreadable += 1
    return events, offset + end, end < len(data), unreadable


def _gap(key: str, summary: str) -> dict[str, Any]:
    return {"kind": "incomplete", "id": f"incomplete:{key}", "operation": "evidence", "summary": summary}


# -- the scan ---------------------------------------------------------------------------------------


class Cursors:
    """Where each log's scan stopped, and the collector's memory, for one journal."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CURSOR if directory is not None else None
        doc = self._load()
        self.logs: dict[str, dict[str, Any]] = dict(doc.get("logs") or {})
        self.collector = Collector.from_json(doc.get("collector") or {})

    def _load(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        raw, _problem, _size = read_bounded(self.path, 16 * 1024 * 1024)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        return doc if isinstance(doc, dict) else {}

    def save(self) -> None:
        if self.path is None:
            return
        doc = {"logs": self.logs, "collector": self.collector.to_json()}
        write_atomic(self.path, json.dumps(doc, sort_keys=True).encode("utf-8"), durable=False)


def scan(
    log: Path,
    harness: Facts,
    cwd: str,
    cursors: Cursors,
    *,
    at: str | None = None,
    final: bool = False,
    evidence_of: str | None = None,
) -> list[dict[str, Any]]:
    """The journal events of ``log``'s bytes since the last scan (``cursors`` moves on).

    A log whose identity or first bytes changed, or that shrank, was rewritten or truncated:
    that is reported, and it is scanned again from its start. A record over ``MAX_RECORD``, a
    malformed structured record and (with ``final``, the turn over) a partial last record are
    incomplete observations.
    """
    key = str(log)
    collector = cursors.collector
    collector.evidence_of = evidence_of or log.name
    events: list[dict[str, Any]] = []
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENOENT and key not in cursors.logs:
            return []
        return collector.fold(Gap(f"log-unreadable:{log.name}", f"the output log {log.name} cannot be read"), at)
    try:
        info = os.fstat(fd)
        head = os.pread(fd, HEAD_BYTES, 0)
        identity = [info.st_dev, info.st_ino]
        digest = hashlib.sha256(head).hexdigest()[:16]
        known = cursors.logs.get(key)
        offset = int(known["offset"]) if known else 0
        if known and (known.get("identity") != identity or info.st_size < offset or not _same_head(known, head)):
            gap = Gap(
                f"log-rewritten:{log.name}:{known.get('head')}", f"the output log {log.name} was truncated or rewritten"
            )
            events += collector.fold(gap, at)
            offset = 0
        events += _scan_bytes(fd, offset, info.st_size, harness, cwd, collector, at, final, cursors, key)
        cursors.logs[key]["identity"] = identity
        cursors.logs[key]["head"] = digest
        cursors.logs[key]["head_len"] = len(head)
        cursors.logs[key]["head_bytes"] = head.hex()
    finally:
        os.close(fd)
    return events


def _same_head(known: dict[str, Any], head: bytes) -> bool:
    before = bytes.fromhex(str(known.get("head_bytes") or ""))
    return head[: len(before)] == before


def _scan_bytes(
    fd: int,
    offset: int,
    size: int,
    harness: Facts,
    cwd: str,
    collector: Collector,
    at: str | None,
    final: bool,
    cursors: Cursors,
    key: str,
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    markers = harness.incident_markers
    loads = json.loads
    position = offset
    carry = b""
    skipping = False  # inside a record over MAX_RECORD: drop bytes until its newline
    while position < size:
        chunk = os.pread(fd, min(CHUNK, size - position), position)
        if not chunk:
            break
        base = position - len(carry)
        data = carry + chunk
        position += len(chunk)
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            line = data[start:nl]
            line_at = base + start
            start = nl + 1
            if skipping:
                skipping = False
                continue
            if len(line) > MAX_RECORD:
                events += collector.fold(Gap(f"oversized:{line_at}", f"a record over 2 MiB at byte {line_at}"), at)
                continue
            if not markers or not any(m in line for m in markers):
                continue
            try:
                record = loads(line)
            except ValueError:
                if line.lstrip().startswith(b"{"):
                    gap = Gap(f"malformed:{line_at}", f"a malformed structured record at byte {line_at}")
                    events += collector.fold(gap, at)
                continue
            if isinstance(record, dict):
                for fact in harness.incident_facts(record, line_at, cwd):
                    events += collector.fold(fact, at)
        carry = data[start:]
        if len(carry) > MAX_RECORD:
            events += collector.fold(
                Gap(f"oversized:{base + start}", f"a record over 2 MiB at byte {base + start}"), at
            )
            carry, skipping = b"", True
    end = position - len(carry)
    if final and carry.strip():
        events += collector.fold(Gap(f"partial:{end}", f"the turn ended inside a record (byte {end})"), at)
        end = position
    cursors.logs[key] = {"offset": end}
    return events
