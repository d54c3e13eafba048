"""The scan that fills a session's failure journal from a turn's output log (docs/incidents.md).

``failures.cursor.json`` in the journal's directory holds where each output log's scan stopped (its
byte offset, the file's identity, first bytes and the bytes before the offset) and the collector's
memory, replaced atomically after each scan; the same cursor is written into the journal with the
events it covers (:func:`commit`), and whichever of the two is later (its ``serial``) is the one
read. A log whose first bytes changed, or that shrank, was rewritten or truncated: that is
reported, and it is scanned again from its start. A log of another identity with the same first
bytes and the same bytes before the offset is a copy of the one scanned (a log replaced by an
identical copy): it is scanned on from the cursor. Whatever is scanned again, the journal takes
each event once (its identity, ``journal.identity``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from corral.adapters.files import read_bounded, write_atomic
from corral.domain.bounded_json import Reason, Unparseable, decode
from corral.domain.collector import Collector, Fact, Gap, ToolEnd, ToolStart, operation_of
from corral.engine.runtime import provenance
from corral.engine.runtime.journal import MAX_RECORD, Journal, stamp

CURSOR = "failures.cursor.json"
HEAD_BYTES = 64
#: The bytes before a log's cursor whose digest tells a copy of the log from another log.
TAIL_BYTES = 4096
#: Log bytes scanned since the cursor was last written into the journal that make it due there even
#: with no event (a lost cursor file then costs a rescan of at most about this much).
RECORD_EVERY = 8 << 20
#: A cursor up to this size is written into the journal with every batch of events; a larger one (a
#: confined run's collector remembers its whole state) once the events since the last one come to
#: :data:`RECORD_SHARE` bytes each of it, so cursor records never outgrow the events they cover.
RECORD_SMALL = 4 << 10
RECORD_SHARE = 256
#: Room for what the journal adds to a cursor as it writes it (its ``kind``, the line's end).
RECORD_MARGIN = 64
#: How much of a log one read of the scan takes.
CHUNK = 1 << 20
#: The most open failures whose marks are searched for to pass a run of calls at once (``_Lines._unmarked``).
MAX_MARKED = 4


class Facts(Protocol):
    """What a scan needs of a harness adapter: its prefilter and its structured facts.

    A harness may also have ``incident_unread``: how the lines begin that hold no fact whatever their
    text says (Pi's text deltas), never parsed; ``incident_pair(data, start, end)``: for a tool call's
    start at ``data[start]`` ended successfully on the next line, in a shape whose facts are certain
    unparsed, (its call id, tool name, arguments' JSON, where the next line begins), else None;
    ``incident_start(data, start, end)``: the same for a start line alone (its call id, tool name and
    arguments' JSON); ``incident_run(data, start, limit)`` for a run of such pairs (where it ends and
    how many calls it holds) and ``incident_run_calls`` for its calls one by one (with
    ``incident_next_call``, the first of them: its tool, arguments, where it begins and ends, its call
    id); and, to pass a run while failures are open, ``incident_plain_run(data, start, limit)`` (a
    run whose calls' bytes spell their facts: where it ends and how many calls it holds) with
    ``incident_call_marks(name, args)`` (bytes one of which the start line of any call of ``name``
    with those arguments in such a run holds). See :class:`corral.adapters.harness.pi.PiHarness`.
    """

    incident_markers: tuple[bytes, ...]

    def incident_facts(self, data: dict[str, Any], offset: int, cwd: str) -> list[Fact]: ...


class Cursors:
    """Where each log's scan stopped, and the collector's memory, for one journal."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / CURSOR if directory is not None else None
        doc = self._load()
        #: The last cursor the journal holds, as its text (None: none): a final scan that found nothing new repeats it.
        self.recorded: str | None = None
        if directory is not None:  # the cursor the journal holds, if it is the later one (a lost or stale file)
            recorded = Journal(directory).last_cursor()
            self.recorded = _cursor_text(recorded) if recorded is not None else None
            if recorded is not None and _serial(recorded) > _serial(doc):
                doc = recorded
        self.serial = _serial(doc)
        self.logs: dict[str, dict[str, Any]] = dict(doc.get("logs") or {})
        self.collector = Collector.from_json(doc.get("collector") or {})
        self.unrecorded = 0  # log bytes scanned since the cursor was last written into the journal
        self.unrecorded_events = 0  # and events journaled since
        # Trust is decided once per scan, when it first meets a log: these cursors are that scan, so
        # the decisions live as long as they do. A scan loaded anew (a restarted observer, the
        # reconciler's last look at a lost turn) decides again, its bounded wait started afresh.
        self.trust: dict[str, bool] = {}
        self.waiting: dict[str, float] = {}  # log -> when this scan began waiting for its provenance
        self.noted: set[str] = set()  # logs this scan took under the exact rule for want of provenance

    def _load(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        raw, _problem, _size = read_bounded(self.path, 16 * 1024 * 1024)
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {}
        return doc if isinstance(doc, dict) else {}

    def doc(self) -> dict[str, Any]:
        """The cursor as it stands, numbered one past the last one taken (``serial``)."""
        self.serial += 1
        return {"serial": self.serial, "logs": self.logs, "collector": self.collector.to_json()}

    def save(self, doc: dict[str, Any] | None = None) -> None:
        if self.path is None:
            return
        doc = doc if doc is not None else self.doc()
        write_atomic(self.path, json.dumps(doc, sort_keys=True).encode("utf-8"), durable=False)


def _cursor_text(doc: dict[str, Any]) -> str:
    """What a cursor says, as text (its serial number and record kind aside)."""
    return json.dumps({k: v for k, v in doc.items() if k not in ("serial", "kind")}, sort_keys=True)


def _same_cursor(doc: dict[str, Any], recorded: str | None) -> bool:
    """Whether ``doc`` says what the journal's last cursor (``recorded``, as text) says."""
    return recorded is not None and _cursor_text(doc) == recorded


def commit(journal: Journal, cursors: Cursors, events: list[dict[str, Any]], *, final: bool = False) -> bool:
    """Append a scan's ``events`` to ``journal`` with the cursor that covers them, in one write, then save
    the cursor file; False (nothing saved, the events kept in the journal's memory) if the write failed.

    The cursor goes into the journal with events, every :data:`RECORD_EVERY` bytes of log and at the
    turn's end; a large one (past :data:`RECORD_SMALL`) with events only once enough of them came since
    the last (:data:`RECORD_SHARE`); never one a reader would not take (past :data:`MAX_RECORD`: the
    collector remembers every failing call, named by ids the agent's stream chose, and a record read
    as damaged would be an observation gap the agent made). The cursor file holds it all the same."""
    doc = cursors.doc()
    cursors.unrecorded_events += len(events)
    record = None
    if final or cursors.unrecorded >= RECORD_EVERY:
        record = doc
    elif events:
        size = len(json.dumps(doc["collector"]))
        if size <= RECORD_SMALL or cursors.unrecorded_events * RECORD_SHARE >= size:
            record = doc
    if record is not None and len(json.dumps(record)) + RECORD_MARGIN > MAX_RECORD:
        record = None
    if record is not None and not events and not journal.pending and _same_cursor(record, cursors.recorded):
        # The journal's last cursor says this already (a reconciler's catch-up after the supervisor's own last
        # scan): written again, every recorded turn would add a copy of every log's cursor to the session's journal.
        record = None
    if not journal.append(events, cursor=record):
        return False
    if record is not None:
        cursors.unrecorded = cursors.unrecorded_events = 0
        cursors.recorded = _cursor_text(record)  # a copy: the cursor's own dictionaries change with the next scan
    cursors.save(doc)
    return True


def _serial(doc: dict[str, Any]) -> int:
    serial = doc.get("serial")
    return serial if isinstance(serial, int) and not isinstance(serial, bool) else 0


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
    return stamp(_scan(log, harness, cwd, cursors, at, final, evidence_of))


def _scan(
    log: Path, harness: Facts, cwd: str, cursors: Cursors, at: str | None, final: bool, evidence_of: str | None
) -> list[dict[str, Any]]:
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
        if not stat.S_ISREG(info.st_mode):
            return collector.fold(Gap(f"log-unreadable:{log.name}", f"the output log {log.name} is not a file"), at)
        head = os.pread(fd, HEAD_BYTES, 0)
        identity = [info.st_dev, info.st_ino]
        digest = hashlib.sha256(head).hexdigest()[:16]
        known = cursors.logs.get(key)
        trusted = _trusted(log, cursors, key, final)
        if trusted is None:
            return events  # its provenance cannot be read yet: the scan waits for it (bounded)
        collector.trusted = trusted
        collector.exact_note = None
        if key in cursors.noted:
            gap = Gap(
                f"provenance-unreadable:{collector.evidence_of}",
                f"the provenance of {collector.evidence_of}'s run could not be read: its intents and "
                "dispositions are not honoured, the exact-retry rule applies",
            )
            note = f"incomplete:{gap.key}"
            if gap.key not in collector.gaps:
                collector.notes[note] = []
            collector.exact_note = note if note in collector.notes else None
            events += collector.fold(gap, at)
        known = known if known is not None and "identity" in known else None  # None: first scanned now
        offset = int(known["offset"]) if known else 0
        if known and known.get("identity") != identity and _copy_of(fd, known, head, offset, info.st_size):
            known["identity"] = identity  # the same bytes at another inode (replaced by a copy): read on
        if known and (known.get("identity") != identity or info.st_size < offset or not _same_head(known, head)):
            gap = Gap(
                f"log-rewritten:{log.name}:{known.get('head')}", f"the output log {log.name} was truncated or rewritten"
            )
            events += collector.fold(gap, at)
            offset = 0
        try:
            events += _scan_bytes(fd, offset, info.st_size, harness, cwd, collector, at, final, cursors, key)
        except OSError as exc:  # a read the file refuses (an I/O error, a special file): reported, never raised
            return events + collector.fold(
                Gap(f"log-unreadable:{log.name}", f"the output log {log.name} cannot be read: {exc.strerror or exc}"),
                at,
            )
        events += collector.close_notes(at)
        cursor = cursors.logs[key]
        cursor["identity"] = identity
        cursor["head"] = digest
        cursor["head_len"] = len(head)
        cursor["head_bytes"] = head.hex()
        cursor["tail"] = _tail(fd, int(cursor["offset"]))
        cursors.unrecorded += max(0, int(cursor["offset"]) - offset)
    finally:
        os.close(fd)
    return events


def _tail(fd: int, offset: int) -> str:
    """A digest of the :data:`TAIL_BYTES` before ``offset``: with the head, what tells a copy from another log."""
    size = min(TAIL_BYTES, offset)
    return hashlib.sha256(os.pread(fd, size, offset - size)).hexdigest()[:16]


def _copy_of(fd: int, known: dict[str, Any], head: bytes, offset: int, size: int) -> bool:
    """Whether the file at ``fd`` holds the bytes the cursor ``known`` was scanned over: its first bytes and
    those before the cursor the same (a log replaced by a copy of itself, then perhaps grown)."""
    return (
        size >= offset
        and isinstance(known.get("tail"), str)
        and _same_head(known, head)
        and _tail(fd, offset) == known["tail"]
    )


def _trusted(log: Path, cursors: Cursors, key: str, final: bool) -> bool | None:
    """Whether ``log``'s run is trusted (its intents and dispositions honoured), decided once per scan,
    when it first meets the log; None while its provenance is unreadable and the bounded wait
    (:data:`provenance.WAIT_SECONDS`, or the turn's end) is not over. Unreadable past the wait: not
    trusted, and the log is noted (``cursors.noted``) for its ``Observation incomplete`` note."""
    decided = cursors.trust.get(key)
    if decided is not None:
        return decided
    found = provenance.trust(log.parent)
    if found is provenance.Trust.UNREADABLE:
        first = cursors.waiting.setdefault(key, time.time())
        if not final and time.time() - first < provenance.WAIT_SECONDS:
            return None
        cursors.noted.add(key)
    trusted = found is provenance.Trust.TRUSTED
    cursors.trust[key] = trusted
    cursors.logs.setdefault(key, {})["trusted"] = trusted
    return trusted


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
    """The events of ``fd``'s complete lines from ``offset`` to ``size``; the cursor stops after the last.

    Only lines holding one of the harness's markers are parsed, and of those none that begins as a
    record of no fact (``incident_unread``). They are found with byte searches, not line by line, and a
    harness's ``incident_pair`` (optional) spares the parse of a tool call begun and ended
    successfully on the next line when no failure of its operation is open: that pair's facts
    change nothing but the collector's sequence. While failures are open, a run of such calls
    none of whose start lines holds an open failure's mark (``incident_call_marks``) is passed at
    once: none of them is an exact retry; the one that is (and a start line in the plain shape,
    ``incident_start``) is folded from its match, unparsed. Whatever a shortcut passes or folds is
    what parsing every marked line would fold (tests/failures/test_scan_fast_paths.py).
    """
    events: list[dict[str, Any]] = []
    markers = tuple(harness.incident_markers)
    by_line = any(not m or b"\n" in m for m in markers)  # a marker a byte search would not find per line
    lines = _Lines(harness, cwd, collector, at, events)
    position = offset
    carry = b""
    # Inside a record over MAX_RECORD (reported once, where it began): bytes are dropped until its
    # newline, by this scan and, when the log ends inside it, by the next (the cursor says so).
    skipping = bool(cursors.logs.get(key, {}).get("skipping")) and offset > 0
    while position < size:
        # The line left incomplete is read again with what follows it: buffers of one size, where
        # joining it to the next read would cost more than reading (a fresh buffer each time).
        base = position - len(carry)
        data = os.pread(fd, min(max(CHUNK, len(carry) + CHUNK // 4), size - base), base)
        if len(data) <= len(carry):
            break
        position = base + len(data)
        start, end = 0, data.rfind(b"\n") + 1  # the complete lines are data[start:end]
        if skipping and not end:  # still inside the oversized record: nothing of it is kept
            carry = b""
            continue
        if skipping:
            start, skipping = data.find(b"\n") + 1, False
        if start < end:
            if by_line:
                lines.each(data, start, end, base, markers)
            else:
                lines.marked(data, start, end, base, markers)
        carry = data[end:]
        if len(carry) > MAX_RECORD:
            events += collector.fold(Gap(f"oversized:{base + end}", f"a record over 2 MiB at byte {base + end}"), at)
            carry, skipping = b"", True
    end = position - len(carry)
    if final and carry.strip():
        events += collector.fold(Gap(f"partial:{end}", f"the turn ended inside a record (byte {end})"), at)
        end = position
    cursors.logs.setdefault(key, {})["offset"] = end
    if skipping:
        cursors.logs[key]["skipping"] = True
    else:
        cursors.logs[key].pop("skipping", None)
    return events


class _Lines:
    """The complete lines of a buffer, folded into ``events`` in order (a helper of :func:`_scan_bytes`)."""

    def __init__(self, harness: Facts, cwd: str, collector: Collector, at: str | None, events: list[dict[str, Any]]):
        self.harness = harness
        self.cwd = cwd
        self.collector = collector
        self.at = at
        self.events = events
        self.pair: Callable[[bytes, int, int], tuple[str, str, bytes, int] | None] | None = getattr(
            harness, "incident_pair", None
        )
        #: line beginnings never parsed (a harness's records of no fact)
        self.unread: tuple[bytes, ...] = tuple(getattr(harness, "incident_unread", ()))
        self.run: Callable[[bytes, int, int], tuple[int, int] | None] | None = getattr(harness, "incident_run", None)
        self.start: Callable[[bytes, int, int], tuple[str, str, bytes] | None] | None = getattr(
            harness, "incident_start", None
        )
        self.run_calls: Callable[[bytes, int, int], Iterable[tuple[str, bytes, int, int, str]]] = getattr(
            harness, "incident_run_calls", lambda *_: ()
        )
        # the first of those calls (a harness's ``incident_next_call``: the same, without a generator per call)
        self.next_call: Callable[[bytes, int, int], tuple[str, bytes, int, int, str] | None] = getattr(
            harness, "incident_next_call", None
        ) or (lambda data, start, end: next(iter(self.run_calls(data, start, end)), None))
        #: (tool, its arguments' JSON) -> its operation and its arguments decoded; None: they do not decode
        self.operations: dict[tuple[str, bytes], tuple[str, Any] | None] = {}
        self.plain_run: Callable[[bytes, int, int], tuple[int, int] | None] | None = getattr(
            harness, "incident_plain_run", None
        )
        self.call_marks: Callable[[str, Any], tuple[bytes, ...]] | None = getattr(harness, "incident_call_marks", None)
        self.args_of: dict[str, Any] = {}  # operation -> the arguments of a call of it this scan parsed
        self.marks_of: tuple[str, ...] | None = None  # the open operations ``marks`` stand for
        self.marks: tuple[bytes, ...] = ()
        self.marks_by: dict[str, tuple[bytes, ...]] = {}  # operation -> its marks
        self.ahead_in: bytes | None = None  # the buffer ``ahead`` is of
        self.ahead: dict[bytes, int] = {}  # mark -> where it next occurs in that buffer (-1: nowhere)

    def each(self, data: bytes, start: int, end: int, base: int, markers: tuple[bytes, ...]) -> None:
        """Every line of ``data[start:end]`` tested for a marker in turn."""
        while start < end:
            nl = data.find(b"\n", start, end)
            line = data[start:nl]
            if len(line) > MAX_RECORD:
                self.oversized(base + start)
            elif markers and any(m in line for m in markers) and not line.startswith(self.unread):
                self.parse(line, base + start)
            start = nl + 1

    def marked(self, data: bytes, start: int, end: int, base: int, markers: tuple[bytes, ...]) -> None:
        """The lines of ``data[start:end]`` (``data[end - 1]`` a newline) that hold a marker, and those too long."""
        find, rfind, unread = data.find, data.rfind, self.unread
        big = _oversized(data, start, end)
        next_big = big.pop(0) if big else end
        # Each marker's next occurrence from ``start`` on, searched only as far as the nearest one
        # found (the first marker, the commonest, bounds the search of the rarer): ``seen[i]`` is
        # marker i's occurrence found, ``clear[i]`` where it is known to be absent up to.
        seen = [-1] * len(markers)
        clear = [start] * len(markers)
        while True:
            hit = end
            for i, marker in enumerate(markers):
                at = seen[i]
                if at < start:
                    since = clear[i] if clear[i] > start else start
                    if since >= hit:
                        continue
                    at = find(marker, since, hit)
                    if at < 0:
                        clear[i] = hit
                        continue
                    seen[i] = at
                if at < hit:
                    hit = at
            if hit >= end:
                break
            line_start = rfind(b"\n", start, hit) + 1 or start
            while next_big <= line_start:
                self.oversized(base + next_big)
                skip = next_big == line_start
                next_big = big.pop(0) if big else end
                if skip:
                    break
            else:
                skip = False
            line_end = find(b"\n", hit, end)
            after = line_end + 1
            if not skip and not (unread and data.startswith(unread, line_start)):
                after = self.line(data, line_start, line_end, end, base, next_big)
            start = after
        while next_big < end:
            self.oversized(base + next_big)
            next_big = big.pop(0) if big else end

    def line(self, data: bytes, start: int, nl: int, end: int, base: int, limit: int | None = None) -> int:
        """Fold the marked line ``data[start:nl]`` (and its pair, if it begins one); where the next line starts.

        With no call begun, a run of successful pairs (the harness's ``incident_run``) changes
        nothing but the collector's sequence — up to the first pair that would recover an open
        failure — so it is passed over: block by block when no failure is open, else pair by pair,
        each stretch of pairs that holds no open failure's mark at once (:meth:`_unmarked`), and
        the pair that recovers one folded from its match; never past ``limit`` (the next line too
        long to be a record).
        """
        collector = self.collector
        if collector.trusted:  # a trusted run folds every call: intents, attempts and evidence count
            self.parse(data[start:nl], base + start)
            return nl + 1
        no_pair = False  # known not to begin a pair here
        if self.run is not None and not collector.starts:
            bound = end if limit is None else min(limit, end)
            if not collector.failed:
                run = self.run(data, start, bound)
                if run is not None:
                    collector.sequence += 2 * run[1]  # each call's start and end: folded, they leave nothing else
                    return run[0]
                no_pair = bound == end  # a pair up to ``end`` would have been a run of one
            else:  # failures are open: pass over the pairs up to the first that would recover one
                passed, single_until = start, -1
                while True:
                    call = self.next_call(data, passed, bound)  # the next call, checked
                    if call is None:
                        no_pair = passed == start and bound == end  # as above
                        break
                    if self._recovers(call[0], call[1]):
                        known = self._operation(call[0], call[1])
                        if known is None:
                            break  # its arguments do not decode: the line is parsed, and its gap reported
                        self._fold_start(call[4], call[0], known)  # the exact retry, folded as parsed
                        self.events += collector.fold(ToolEnd(call[4], False, name=call[0]), self.at)
                        return call[3]
                    collector.sequence += 2
                    passed = call[3]
                    if passed >= single_until:  # and the unmarked ones after it, at once
                        passed, single_until = self._unmarked(data, passed, bound, end)
                if passed > start:
                    return passed  # the loop reads on from there (what follows the run)
        if self.pair is not None and not no_pair:
            pair = self.pair(data, start, end)
            if pair is not None and pair[3] - nl - 2 <= MAX_RECORD and not self._recovers(pair[1], pair[2]):
                collector = self.collector
                collector.sequence += 2  # its start and its end: folded, they would leave nothing else
                if collector.starts:
                    collector.starts.pop(pair[0], None)
                return pair[3]
        if self.start is not None:  # a start line in the plain shape: its facts without parsing it
            begun = self.start(data, start, nl + 1)
            known = self._operation(begun[1], begun[2]) if begun is not None else None
            if begun is not None and known is not None:
                self._fold_start(begun[0], begun[1], known)
                return nl + 1
        self.parse(data[start:nl], base + start)
        return nl + 1

    def _unmarked(self, data: bytes, start: int, bound: int, end: int) -> tuple[int, int]:
        """Past the run of plain pairs (the harness's ``incident_plain_run``) from ``data[start]`` up to
        the first line holding a mark of an open failure (``incident_call_marks``), its calls
        counted (``start`` when there is none); and where that line is when the run stopped short of it
        (-1 otherwise): up to there, the calls left are checked one by one, no run is tried again. A call
        whose start line holds no mark is no exact retry of an open failure, so it recovers none: this
        is the check of every such call at once.
        """
        if self.plain_run is None or self.call_marks is None or len(self.collector.failed) > MAX_MARKED:
            return start, -1  # each failure's marks are searches of their own: past a few, checking each costs less
        marks = self._marks()
        if data is not self.ahead_in:
            self.ahead_in, self.ahead = data, {}
        ahead = self.ahead
        cut = bound
        for mark in marks:
            at = ahead.get(mark)
            if at is None or 0 <= at < start:
                at = ahead[mark] = data.find(mark, start, end)
            if 0 <= at < cut:
                cut = at
        if cut < bound:
            cut = data.rfind(b"\n", start, cut) + 1 or start  # the marked line's start
        if cut <= start:
            return start, -1
        run = self.plain_run(data, start, cut)
        if run is None:
            return start, cut
        self.collector.sequence += 2 * run[1]  # each call's start and end: folded, they would leave nothing else
        return run[0], (cut if run[0] < cut else -1)

    def _marks(self) -> tuple[bytes, ...]:
        """The marks of the open failures: for each, bytes one of which an exact retry's start line holds."""
        failed = self.collector.failed
        if self.marks_of != tuple(failed):
            assert self.call_marks is not None
            marks: dict[bytes, None] = {}
            for operation in failed:
                known = self.marks_by.get(operation)
                if known is None:
                    name, colon, _digest = operation.rpartition(":")
                    # a tool's operation (``operation_of``); the model's is recovered by no call
                    known = self.call_marks(name, self.args_of.get(operation)) if colon else ()
                    if len(self.marks_by) >= 4096:
                        self.marks_by.clear()
                    self.marks_by[operation] = known
                marks.update(dict.fromkeys(known))
            self.marks, self.marks_of = tuple(marks), tuple(failed)
        return self.marks

    def _recovers(self, name: str, args: bytes) -> bool:
        """Whether a successful call of ``name`` with ``args`` (JSON) would recover an open failure."""
        failed = self.collector.failed
        if not failed:
            return False
        known = self._operation(name, args)
        return known is None or known[0] in failed  # undecodable: not passed over, the line is parsed

    def _operation(self, name: str, args: bytes) -> tuple[str, Any] | None:
        """The operation of a call of ``name`` with ``args`` (JSON) in this scan's directory and the arguments
        decoded; None when they do not decode. Worked out once per scan for each (a turn repeats its calls)."""
        key = (name, args)
        if key not in self.operations:
            if len(self.operations) >= 4096:
                self.operations.clear()
            decoded = decode(args, max_bytes=MAX_RECORD)
            if isinstance(decoded, Unparseable):
                self.operations[key] = None
            else:
                self.operations[key] = (operation_of(name, decoded.value, self.cwd), decoded.value)
        return self.operations[key]

    def _fold_start(self, call_id: str, name: str, known: tuple[str, Any]) -> None:
        """Fold a call's start unparsed, its operation and arguments ``known``: the fact parsing its line gives
        an untrusted collector."""
        start = ToolStart(call_id, name, known[1], self.cwd, operation=known[0])
        self.events += self.collector.fold(start, self.at)
        if self.call_marks is not None:
            self._started(start)

    def parse(self, line: bytes, line_at: int) -> None:
        decoded = decode(line, max_bytes=MAX_RECORD)
        if isinstance(decoded, Unparseable):
            if decoded.reason is Reason.TOO_DEEP:
                self.gap(f"too-deep:{line_at}", f"a record {decoded.detail} at byte {line_at}")
            elif decoded.reason is Reason.TOO_LARGE:
                self.oversized(line_at)
            elif line.lstrip().startswith(b"{"):
                self.gap(f"malformed:{line_at}", f"a malformed structured record at byte {line_at}")
            return
        record = decoded.value
        if isinstance(record, dict):
            for fact in self.harness.incident_facts(record, line_at, self.cwd):
                self.events += self.collector.fold(fact, self.at)
                if isinstance(fact, ToolStart) and self.call_marks is not None:
                    self._started(fact)

    def _started(self, fact: ToolStart) -> None:
        """Remember the arguments of a call just begun, by its operation: if it fails, its marks are theirs."""
        started = self.collector.starts.get(fact.call_id)
        if started is not None:
            if len(self.args_of) >= 4096:
                self.args_of.clear()  # a failure whose arguments are forgotten is marked by its tool's name
            self.args_of[started[0]] = fact.args

    def oversized(self, line_at: int) -> None:
        self.gap(f"oversized:{line_at}", f"a record over 2 MiB at byte {line_at}")

    def gap(self, key: str, summary: str) -> None:
        self.events += self.collector.fold(Gap(key, summary), self.at)


def _oversized(data: bytes, start: int, end: int) -> list[int]:
    """Where the lines of ``data[start:end]`` longer than ``MAX_RECORD`` begin (a jump per 2 MiB, not per line)."""
    found = []
    while start < end:
        last = data.rfind(b"\n", start, min(end, start + MAX_RECORD + 1))
        if last >= 0:
            start = last + 1
            continue
        found.append(start)
        start = data.find(b"\n", start, end) + 1
    return found
