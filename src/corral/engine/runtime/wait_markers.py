"""Wait markers: the subtasks an agent waits on right now, as only its tool call can tell.

``waiting.json`` in the caller task's protocol directory holds the active waits (the target's ref
and since when), each stamped with the writing process's pid and start time
(``runtime/mark_writer``), so a reader that finds the writer gone believes none of its waits.
:func:`track_wait` adds a call's entries on entering and removes them in a ``finally`` on leaving —
also when the client disconnected and the call was cancelled — and records the call's interval
(``runtime/wait_intervals``). Consecutive calls on one target (the agent calls ``wait`` again after
a call's bound ran out) read as one stretch: a wait on a target whose previous wait timed out at
most :data:`CONTINUE_SECONDS` earlier keeps its ``since``. A wait that cannot be recorded still waits.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.locks import lock
from corral.domain.agent_tools import WAIT_TARGET_CAP
from corral.domain.clock import new_id, parse_time, rfc3339
from corral.domain.sanitize import one_line
from corral.engine.project import Project
from corral.engine.runtime import marked, wait_intervals
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.mark_writer import read_marker, safely, writer, writer_alive

#: The wait marker, in the caller task's protocol directory.
WAITING = "waiting.json"
#: Taken for the read-modify-write of :data:`WAITING` (two waits of one caller at once).
WAITING_LOCK = "waiting.lock"

#: How the wait a call began may end.
OUTCOMES = ("rested", "timeout", "cancelled", "error")
#: A wait on a target whose previous wait timed out at most this long ago continues its stretch.
CONTINUE_SECONDS = 60.0


class ActiveWait(Struct, frozen=True):
    """One target an agent waits on right now, since when (read from a believed marker)."""

    target: str
    since: datetime


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


def update_marker(protocol_dir: Path, change: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None]) -> None:
    """Read the marker, let ``change`` edit its waits and recent stretches, write it back (or remove it)."""
    if not protocol_dir.is_dir():
        return  # no turn was ever launched there: nothing to mark
    path = protocol_dir / WAITING
    with _marker_lock(protocol_dir):
        data = read_marker(path)
        waits, recent = _entries(data, "waits"), _entries(data, "recent")
        change(waits, recent)
        if not waits and not recent:
            proto.remove(protocol_dir, WAITING)
            return
        pid, start = writer()
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

    now = safely("read the clock", project.clock) or datetime.now().astimezone()
    if turn_sequence is None:
        turn_sequence = safely("find the turn's sequence", lambda: _next_sequence(project, caller_task_id))

    def enter(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
        pid, start = writer()
        _prune(recent, now)
        for target in wanted:
            since = _continued_since(recent, target, now) or rfc3339(now)
            waits.append({"call": call, "target": target, "since": since, "pid": pid, "pid_start": start})

    safely("mark the wait", lambda: update_marker(protocol_dir, enter))
    safely(
        "record the wait's start",
        lambda: wait_intervals.append(
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
        ended = safely("read the clock", project.clock) or datetime.now().astimezone()

        def leave(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
            mine = [w for w in waits if w.get("call") == call]
            waits[:] = [w for w in waits if w.get("call") != call]
            _prune(recent, ended)
            if outcome == "timeout":  # the agent calls again: the next call continues this stretch
                pid, start = writer()
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

        safely("clear the wait's marker", lambda: update_marker(protocol_dir, leave))
        safely(
            "record the wait's end",
            lambda: wait_intervals.append(
                project,
                {"event": "end", "id": call, "task_id": caller_task_id, "ended_at": rfc3339(ended), "outcome": outcome},
            ),
        )


def active_waits(protocol_dir: Path) -> list[ActiveWait]:
    """The waits a believed marker names, oldest first; none when there is no marker or its
    writers are gone (a SIGKILLed daemon's marker reads as no waits, never as a lie)."""
    data = read_marker(protocol_dir / WAITING)
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
