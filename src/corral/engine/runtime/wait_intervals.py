"""Persisted wait intervals: how long an agent waited on its subtasks, apart from its own time.

``<state root>/waits/intervals.jsonl``: a start line when a wait begins and an end line when it
settles (written by ``runtime/wait_markers.track_wait``), folded on read (:func:`intervals`). An
interval whose end never came (its writer died mid-wait) reads ``ended_at: null, outcome: null``,
open, bounded by its turn's end (:func:`waited_seconds`). This is what lets ``show --json`` report
a turn's waited time apart from its agent time. On the shared store a worker ships them with the
turn's live facts, and they are read from there when this host has none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.files import private_dirs
from corral.domain.clock import parse_time, rfc3339
from corral.engine.project import Project
from corral.engine.runtime.mark_writer import safely
from corral.store import Tx

#: Under the project's state root: the persisted wait intervals (JSON Lines, append-only).
INTERVALS = Path("waits") / "intervals.jsonl"

#: The most a reader takes of the intervals file (a file beyond it is read from its end).
INTERVALS_MAX_BYTES = 64 * 1024 * 1024


class WaitInterval(Struct, frozen=True):
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


def intervals_file(project: Project) -> Path:
    return project.paths.root / INTERVALS


def append(project: Project, line: dict[str, Any]) -> None:
    """Add one start or end line to the intervals file (the caller runs it through ``safely``)."""
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
    found = safely("read the wait intervals", lambda: _fold(intervals_file(project), task_id))
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
