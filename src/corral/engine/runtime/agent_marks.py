"""What only an agent's tool call can tell: the subtasks it waits on, and the line it says it is at.

Three pieces of bookkeeping, written by the process that serves the agent's tool calls (the
daemon's MCP endpoint) and read by every surface through ``liveness.live_facts`` and the one
substate derivation (``domain/substate``):

- **Wait markers** — ``waiting.json`` in the caller task's protocol directory: the active waits
  (the target's ref and since when), each stamped with the writing process's pid and start time
  (``/proc/<pid>/stat`` field 22), so a reader that finds the writer gone (a SIGKILLed daemon)
  or its pid held by another process believes none of its waits. :func:`track_wait` adds a
  call's entries on entering and removes them in a ``finally`` on leaving — also when the
  client disconnected and the call was cancelled. Consecutive calls on one target (the agent
  calls ``wait`` again after a call's bound ran out) read as one stretch: a wait on a target
  whose previous wait timed out at most :data:`CONTINUE_SECONDS` earlier keeps its ``since``.
- **Persisted wait intervals** — ``<state root>/waits/intervals.jsonl``: a start line when a
  wait begins and an end line when it settles, folded on read (:func:`intervals`). An interval
  whose end never came (its writer died mid-wait) reads ``ended_at: null, outcome: null``, open,
  bounded by its turn's end (:func:`waited_seconds`). This is what lets ``show --json`` report
  a turn's waited time apart from its agent time.
- **Progress** — ``progress.json`` (the protocol's :class:`~corral.engine.runtime.protocol.Progress`):
  the agent's latest line, whitespace collapsed and capped at
  :data:`~corral.domain.agent_tools.PROGRESS_CAP` characters at write (:func:`post_progress`)
  and again at read, with the writer's pid. Ephemeral, latest wins, never in the database;
  ``launch.clear_protocol`` removes it when a new command is written.

Bookkeeping never breaks the call it observes: every write here is wrapped, so a wait that
cannot be recorded still waits and a progress line that cannot be written is only lost.
:func:`clear` (a turn's teardown) and :func:`clear_owned` (a clean daemon stop) remove markers.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from corral.adapters.files import private_dirs, read_bounded
from corral.adapters.locks import lock
from corral.adapters.pid_identity import proc_info
from corral.domain.agent_tools import PROGRESS_CAP, WAIT_TARGET_CAP
from corral.domain.clock import new_id, parse_time, rfc3339
from corral.domain.record import record
from corral.domain.sanitize import one_line
from corral.engine.project import Project
from corral.engine.runtime import marked
from corral.engine.runtime import protocol as proto
from corral.store import Tx

#: The logger a failed piece of bookkeeping is reported to (the daemon's log, where it runs).
LOGGER = "corral.agent_marks"

#: The wait marker, in the caller task's protocol directory.
WAITING = "waiting.json"
#: Taken for the read-modify-write of :data:`WAITING` (two waits of one caller at once).
WAITING_LOCK = "waiting.lock"
#: Under the project's state root: the persisted wait intervals (JSON Lines, append-only).
INTERVALS = Path("waits") / "intervals.jsonl"
#: How the wait a call began may end.
OUTCOMES = ("rested", "timeout", "cancelled", "error")
#: A wait on a target whose previous wait timed out at most this long ago continues its stretch.
CONTINUE_SECONDS = 60.0
#: The most a reader takes of the intervals file (a file beyond it is read from its end).
INTERVALS_MAX_BYTES = 64 * 1024 * 1024
#: The most a reader takes of a marker file.
MARKER_MAX_BYTES = 256 * 1024


@record
class Posted:
    """What :func:`post_progress` kept: the line as shown, and whether it was cut to the cap."""

    message: str
    truncated: bool


@record
class ActiveWait:
    """One target an agent waits on right now, since when (read from a believed marker)."""

    target: str
    since: datetime


@record
class WaitInterval:
    """One wait call's interval, folded from its start line and (once it settled) its end line."""

    id: str
    task_id: str
    targets: tuple[str, ...]
    turn_sequence: int | None  # best-effort: the next unused sequence when the wait began
    started_at: datetime
    ended_at: datetime | None = None  # None: its end never came (the writer died mid-wait)
    outcome: str | None = None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WaitInterval | None:
        """A :meth:`to_json` document (one shipped from another host), None when it is not one."""
        started = parse_time(doc.get("started_at"))
        targets, seq = doc.get("targets"), doc.get("turn_sequence")
        if started is None or not isinstance(doc.get("id"), str) or not isinstance(targets, list):
            return None
        outcome = doc.get("outcome")
        return cls(
            id=doc["id"],
            task_id=str(doc.get("task_id")),
            targets=tuple(str(t) for t in targets),
            turn_sequence=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
            started_at=started,
            ended_at=parse_time(doc.get("ended_at")),
            outcome=outcome if isinstance(outcome, str) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "targets": list(self.targets),
            "turn_sequence": self.turn_sequence,
            "started_at": rfc3339(self.started_at),
            "ended_at": rfc3339(self.ended_at),
            "outcome": self.outcome,
        }


# -- who writes: this process, proved by its pid and start time -----------------------------

_me: tuple[int, int | None] | None = None


def _writer() -> tuple[int, int | None]:
    """This process's pid and start time (asked again after a fork)."""
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        info = proc_info(pid)
        _me = (pid, info.start if info is not None else None)
    return _me


def writer_alive(pid: object, start: object) -> bool:
    """Whether the process that wrote a marker still runs: its pid is live and, when the marker
    gave its start time, held by that very process (not one that took the pid since)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    info = proc_info(pid)
    if info is None:
        return False
    return not (isinstance(start, int) and not isinstance(start, bool) and info.start != start)


def _safely(what: str, fn: Callable[[], Any]) -> Any:
    """Run one piece of bookkeeping; a failure is logged, never raised."""
    try:
        return fn()
    except Exception as exc:  # bookkeeping never breaks the call it observes
        import logging  # only a failure needs it: a read command never loads logging for this

        logging.getLogger(LOGGER).warning("agent-marks: could not %s: %s", what, exc)
        return None


# -- wait markers ---------------------------------------------------------------------------


def _read_json(path: Path, max_bytes: int = MARKER_MAX_BYTES) -> dict[str, Any] | None:
    raw, _problem, _size = read_bounded(path, max_bytes)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def _marker_lock(protocol_dir: Path) -> Iterator[None]:
    fd = lock(protocol_dir / WAITING_LOCK, timeout=5.0, poll=0.005)
    try:
        yield  # without the lock after five seconds the update goes ahead: a marker is best-effort
    finally:
        if fd is not None:
            os.close(fd)


def _entries(data: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    found = data.get(key) if data else None
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def _update_marker(protocol_dir: Path, change: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None]) -> None:
    """Read the marker, let ``change`` edit its waits and recent stretches, write it back (or remove it)."""
    if not protocol_dir.is_dir():
        return  # no turn was ever launched there: nothing to mark
    path = protocol_dir / WAITING
    with _marker_lock(protocol_dir):
        data = _read_json(path)
        waits, recent = _entries(data, "waits"), _entries(data, "recent")
        change(waits, recent)
        if not waits and not recent:
            proto.remove(protocol_dir, WAITING)
            return
        pid, start = _writer()
        marked.note(protocol_dir)  # first: a reader that finds no entry has no marker to miss
        proto.write_json(path, {"pid": pid, "pid_start": start, "waits": waits, "recent": recent}, durable=False)


def _continued_since(recent: list[dict[str, Any]], target: str, now: datetime) -> str | None:
    for entry in recent:
        if entry.get("target") != target or not writer_alive(entry.get("pid"), entry.get("pid_start")):
            continue
        try:
            ended = parse_time(entry.get("ended_at"))
        except (TypeError, ValueError):
            continue
        since = entry.get("since")
        if ended is not None and isinstance(since, str) and (now - ended).total_seconds() <= CONTINUE_SECONDS:
            return since
    return None


def _prune(recent: list[dict[str, Any]], now: datetime) -> None:
    def keep(entry: dict[str, Any]) -> bool:
        try:
            ended = parse_time(entry.get("ended_at"))
        except (TypeError, ValueError):
            return False
        return ended is not None and (now - ended).total_seconds() <= CONTINUE_SECONDS

    recent[:] = [e for e in recent if keep(e)]


def _next_sequence(project: Project, task_id: str) -> int | None:
    with project.store.read() as tx:
        last = tx.turns(task_id, last=1)
    return (last[-1].sequence + 1) if last else 1


@contextlib.contextmanager
def track_wait(
    project: Project, caller_task_id: str, targets: Sequence[str], turn_sequence: int | None
) -> Iterator[Callable[[str], None]]:
    """Mark ``caller_task_id`` as waiting on ``targets`` (refs) for the body's duration.

    Yields a callable that sets the outcome (one of :data:`OUTCOMES`). Left unset, the outcome
    is ``cancelled`` when the body was cancelled (a ``BaseException`` such as
    ``asyncio.CancelledError``: the client went away) and ``error`` otherwise. The marker's
    entries are removed in a ``finally`` and the interval's end line is written there; nothing
    here raises into the call it observes. ``turn_sequence`` None is looked up (best-effort:
    the next unused sequence).
    """
    protocol_dir = project.paths.protocol_dir(caller_task_id)
    wanted = [t for t in dict.fromkeys(str(t) for t in targets) if t]
    call = new_id()
    chosen: list[str] = []

    def settle_as(outcome: str) -> None:
        chosen[:] = [outcome if outcome in OUTCOMES else "error"]

    now = _safely("read the clock", project.clock) or datetime.now().astimezone()
    if turn_sequence is None:
        turn_sequence = _safely("find the turn's sequence", lambda: _next_sequence(project, caller_task_id))

    def enter(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
        pid, start = _writer()
        _prune(recent, now)
        for target in wanted:
            since = _continued_since(recent, target, now) or rfc3339(now)
            waits.append({"call": call, "target": target, "since": since, "pid": pid, "pid_start": start})

    _safely("mark the wait", lambda: _update_marker(protocol_dir, enter))
    _safely(
        "record the wait's start",
        lambda: _append(
            project,
            {
                "event": "start",
                "id": call,
                "task_id": caller_task_id,
                "targets": wanted,
                "turn_sequence": turn_sequence,
                "started_at": rfc3339(now),
            },
        ),
    )
    try:
        yield settle_as
    except BaseException as exc:
        if not chosen:
            settle_as("error" if isinstance(exc, Exception) else "cancelled")
        raise
    finally:
        outcome = chosen[0] if chosen else "error"
        ended = _safely("read the clock", project.clock) or datetime.now().astimezone()

        def leave(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
            mine = [w for w in waits if w.get("call") == call]
            waits[:] = [w for w in waits if w.get("call") != call]
            _prune(recent, ended)
            if outcome == "timeout":  # the agent calls again: the next call continues this stretch
                pid, start = _writer()
                recent[:] = [e for e in recent if e.get("target") not in {w.get("target") for w in mine}]
                recent.extend(
                    {
                        "target": w.get("target"),
                        "since": w.get("since"),
                        "ended_at": rfc3339(ended),
                        "pid": pid,
                        "pid_start": start,
                    }
                    for w in mine
                )

        _safely("clear the wait's marker", lambda: _update_marker(protocol_dir, leave))
        _safely(
            "record the wait's end",
            lambda: _append(
                project,
                {"event": "end", "id": call, "task_id": caller_task_id, "ended_at": rfc3339(ended), "outcome": outcome},
            ),
        )


def active_waits(protocol_dir: Path) -> list[ActiveWait]:
    """The waits a believed marker names, oldest first; none when there is no marker or its
    writers are gone (a SIGKILLed daemon's marker reads as no waits, never as a lie)."""
    data = _read_json(protocol_dir / WAITING)
    if data is None:
        return []
    alive: dict[tuple[object, object], bool] = {}
    found: list[ActiveWait] = []
    for entry in _entries(data, "waits"):
        key = (entry.get("pid"), entry.get("pid_start"))
        if key not in alive:
            alive[key] = writer_alive(*key)
        target, since = entry.get("target"), entry.get("since")
        if not alive[key] or not isinstance(target, str) or not isinstance(since, str):
            continue
        try:
            when = parse_time(since)
        except ValueError:
            continue
        if when is not None:
            found.append(ActiveWait(one_line(target, WAIT_TARGET_CAP), when))
    found.sort(key=lambda w: (w.since, w.target))
    return found


# -- progress -------------------------------------------------------------------------------


def post_progress(project: Project, task_id: str, text: str) -> Posted:
    """Replace the task's progress line; returns what was kept and whether it was cut to the cap.

    Never raises: a line that cannot be written is lost, and the call goes on.
    """
    whole = one_line(str(text))
    line = one_line(whole, PROGRESS_CAP)
    posted = Posted(line, truncated=len(whole) > PROGRESS_CAP)

    def write() -> None:
        protocol_dir = project.paths.protocol_dir(task_id)
        if not protocol_dir.is_dir():
            return
        if not line:
            proto.remove(protocol_dir, proto.PROGRESS)
            return
        pid, start = _writer()
        at = rfc3339(project.clock()) or ""
        doc = {**proto.Progress(message=line, pid=pid, at=at).to_json(), "pid_start": start}
        marked.note(protocol_dir)
        proto.write_json(protocol_dir / proto.PROGRESS, doc, durable=False)

    _safely("write the progress line", write)
    return posted


def progress(protocol_dir: Path) -> str | None:
    """The agent's progress line as a surface shows it, or None (none, unusable, or its writer gone)."""
    data = _read_json(protocol_dir / proto.PROGRESS)
    if data is None:
        return None
    try:
        found = proto.Progress.from_json(data)
    except (proto.ShapeError, ValueError, TypeError):
        return None
    if not writer_alive(found.pid, data.get("pid_start")):
        return None
    return one_line(found.message, PROGRESS_CAP) or None


# -- clearing -------------------------------------------------------------------------------


def clear(protocol_dir: Path) -> None:
    """A turn's teardown: its waits and its progress line go (never raises)."""

    def remove() -> None:
        proto.remove(protocol_dir, WAITING, proto.PROGRESS)
        marked.forget(protocol_dir)  # after the markers: an entry is never missing beside one

    _safely("clear the turn's markers", remove)


def clear_owned(project: Project, pid: int) -> None:
    """A clean stop of the process ``pid`` (the daemon): remove every marker it wrote (never raises)."""

    def drop(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
        waits[:] = [w for w in waits if w.get("pid") != pid]
        recent[:] = [e for e in recent if e.get("pid") != pid]

    def sweep() -> None:
        try:
            entries = list(os.scandir(project.paths.tasks))
        except FileNotFoundError:
            return
        for entry in entries:
            _safely("clear a stopped writer's markers", functools.partial(_clear_one, entry.name))

    def _clear_one(task_id: str) -> None:
        protocol_dir = project.paths.protocol_dir(task_id)
        if (protocol_dir / WAITING).exists():
            _update_marker(protocol_dir, drop)
        found = _read_json(protocol_dir / proto.PROGRESS)
        if found is not None and found.get("pid") == pid:
            proto.remove(protocol_dir, proto.PROGRESS)

    _safely("clear the markers a stopped process wrote", sweep)


# -- persisted intervals --------------------------------------------------------------------


def intervals_file(project: Project) -> Path:
    return project.paths.root / INTERVALS


def _append(project: Project, line: dict[str, Any]) -> None:
    path = intervals_file(project)
    private_dirs(path.parent)
    payload = (json.dumps(line, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, payload)  # one write of one line: O_APPEND keeps concurrent writers' lines whole
    finally:
        os.close(fd)


def intervals(project: Project, task_id: str, tx: Tx | None = None) -> list[WaitInterval]:
    """The task's wait intervals, folded from their start and end lines, oldest first.

    An interval whose end line never came reads ``ended_at`` None and ``outcome`` None: open,
    the "died mid-wait" shape. A file that cannot be read reads as no intervals. With none here, the
    intervals a worker on another host shipped are read, in ``tx`` when the caller holds one.
    """
    found = _safely("read the wait intervals", lambda: _fold(intervals_file(project), task_id))
    if found:
        return list(found)
    if tx is not None:
        return _shipped(tx, task_id)
    with project.store.read() as own:
        return _shipped(own, task_id)


def _shipped(tx: Tx, task_id: str) -> list[WaitInterval]:
    """The intervals a worker on another host shipped with the turn's live facts (docs/workers.md#shipped)."""
    live = tx.live([task_id]).get(task_id)
    docs = live[1].get("intervals") if live is not None else None
    if not isinstance(docs, list):
        return []
    shipped = (WaitInterval.from_json(d) for d in docs if isinstance(d, dict))
    return [i for i in shipped if i is not None and i.task_id == task_id]


def _fold(path: Path, task_id: str) -> list[WaitInterval]:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > INTERVALS_MAX_BYTES:
                fh.seek(size - INTERVALS_MAX_BYTES)
                fh.readline()  # the first line read from the middle is partial
            data = fh.read()
    except FileNotFoundError:
        return []
    needle = f'"task_id":{json.dumps(task_id)}'.encode()
    starts: dict[str, WaitInterval] = {}
    ends: dict[str, tuple[datetime | None, str | None]] = {}
    for raw in data.splitlines():
        if needle not in raw:
            continue
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or line.get("task_id") != task_id or not isinstance(line.get("id"), str):
                continue
            if line.get("event") == "start":
                started = parse_time(line.get("started_at"))
                targets = line.get("targets")
                seq = line.get("turn_sequence")
                if started is None or not isinstance(targets, list):
                    continue
                starts[line["id"]] = WaitInterval(
                    id=line["id"],
                    task_id=task_id,
                    targets=tuple(str(t) for t in targets),
                    turn_sequence=seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
                    started_at=started,
                )
            elif line.get("event") == "end":
                outcome = line.get("outcome")
                ends[line["id"]] = (parse_time(line.get("ended_at")), outcome if isinstance(outcome, str) else None)
        except (ValueError, TypeError):
            continue  # a torn or foreign line is skipped, never the whole file
    out = []
    for key, interval in starts.items():
        if key in ends:
            ended, outcome = ends[key]
            interval = WaitInterval(
                interval.id, task_id, interval.targets, interval.turn_sequence, interval.started_at, ended, outcome
            )
        out.append(interval)
    out.sort(key=lambda i: i.started_at)
    return out


def waited_seconds(found: Sequence[WaitInterval], start: datetime, end: datetime) -> float:
    """Seconds within ``[start, end]`` (a turn's window) that at least one wait covered.

    Overlapping waits count once; an open interval (its end never came) is bounded by ``end``
    (the turn's end, or now for a turn still running).
    """
    spans = []
    for i in found:
        lo = max(i.started_at, start)
        hi = min(i.ended_at or end, end)
        if hi > lo:
            spans.append((lo, hi))
    spans.sort()
    total = 0.0
    cur: tuple[datetime, datetime] | None = None
    for lo, hi in spans:
        if cur is None or lo > cur[1]:
            if cur is not None:
                total += (cur[1] - cur[0]).total_seconds()
            cur = (lo, hi)
        elif hi > cur[1]:
            cur = (cur[0], hi)
    if cur is not None:
        total += (cur[1] - cur[0]).total_seconds()
    return total
