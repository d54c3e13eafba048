"""Delivering incident notices, once each per channel, with a receipt written after the handoff.

A channel is who hands notices over: ``daemon`` (its log of notices, and the user's
``notify_command`` with the notice as JSON on stdin) and ``wait`` (``corral wait`` prints each
on stderr as it arrives). Receipts are lines of ``notices.<channel>.jsonl`` in the session's
journal directory, fsynced; they are independent of recovery (an incident recovered after it
was told stays told). The rule of what is due is ``corral.domain.attention``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from corral.domain.attention import Notice, due
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.runtime.journal import Journal, read_events


def receipts_file(journal_dir: Path, channel: str) -> Path:
    return journal_dir / f"notices.{channel}.jsonl"


def told(journal_dir: Path, channel: str) -> set[str]:
    """The notice keys and incident ids a channel delivered already."""
    events, _offset, _torn, _bad = read_events(receipts_file(journal_dir, channel))
    out: set[str] = set()
    for event in events:
        out.add(str(event.get("key")))
        out.update(str(i) for i in event.get("incidents") or ())
    return out


def record_told(journal_dir: Path, channel: str, notice: Notice, at: datetime) -> None:
    line = {"key": notice.key, "kind": notice.kind, "incidents": [i.id for i in notice.incidents], "at": at.isoformat()}
    path = receipts_file(journal_dir, channel)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def ended_key(project: Project, task: Task) -> str | None:
    """``completion:<turn>`` or ``lost:<turn>`` once the task's last turn is over; None while it runs."""
    if task.status is Status.WORKING:
        return None
    with project.store.read() as tx:
        turns = tx.turns(task.id, last=1)
    if not turns:
        return None
    kind = "lost" if task.resting_cause is not None and task.resting_cause.code == "turn-lost" else "completion"
    return f"{kind}:{turns[-1].sequence}"


def deliver(
    project: Project, task: Task, channel: str, hand_over: Callable[[Notice], None], now: datetime
) -> Notice | None:
    """Hand over the task's due notice on ``channel`` (if any), then write its receipt."""
    if task.session_id is None:
        return None
    journal_dir = project.paths.journal_dir(task.id, task.session_id)
    if not journal_dir.exists():
        return None
    state = Journal(journal_dir).read()
    notice = due(state, told(journal_dir, channel), now, ended=ended_key(project, task))
    if notice is None:
        return None
    hand_over(notice)  # the receipt follows the handoff: a crash between them tells it again, never never
    record_told(journal_dir, channel, notice, now)
    return notice
