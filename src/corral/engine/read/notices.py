"""Delivering incident notices, once each per channel, with a receipt written after the handoff.

A channel is who hands notices over: ``daemon`` (its log of notices, and the user's
``notify_command`` with the notice as JSON on stdin) and ``wait`` (``corral wait`` prints each
on stderr as it arrives). Receipts are lines of ``notices.<channel>.jsonl`` in the session's
journal directory, fsynced; they are independent of recovery (an incident recovered after it
was told stays told). The rule of what is due is ``corral.domain.attention``.

A lost turn is told as soon as it is recorded lost (``lost:<turn>``), once, whether the task rests
or auto-resume already started its next turn; while the task rests on that loss, an observation
gap found after that notice is told at once (``gaps:…``), once, since no later notice may follow. A receipt storage will
not take is kept in this process's memory, counted as delivered, and written again at each later
delivery until storage takes it (receipts are retried on later reads).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from corral.domain.attention import Notice, due
from corral.domain.incidents import FailureState, Label
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.runtime.journal import Journal, read_events


def receipts_file(journal_dir: Path, channel: str) -> Path:
    return journal_dir / f"notices.{channel}.jsonl"


#: Receipts storage refused, by receipts file: written again before the next delivery on that channel;
#: and why storage refused them (what the daemon logs).
_unwritten: dict[Path, list[dict[str, Any]]] = {}
_refused: dict[Path, str] = {}
#: A lost turn's record: the failure code of the agent turn the reconciler writes for it.
LOST_CODES = frozenset({"turn-lost", "receipt-missing"})


def told(journal_dir: Path, channel: str) -> set[str]:
    """The notice keys and incident ids a channel delivered already (receipts not yet stored included)."""
    path = receipts_file(journal_dir, channel)
    events, _offset, _torn, _bad = read_events(path)
    out: set[str] = set()
    for event in [*events, *_unwritten.get(path, ())]:
        out.add(str(event.get("key")))
        out.update(str(i) for i in event.get("incidents") or ())
    return out


def record_told(journal_dir: Path, channel: str, notice: Notice, at: datetime) -> bool:
    """The notice's receipt, fsynced, after any storage refused before; False (kept in memory, retried
    at the next delivery) when storage refuses it."""
    line: dict[str, Any] = {
        "key": notice.key,
        "kind": notice.kind,
        "incidents": [i.id for i in notice.incidents],
        "at": at.isoformat(),
    }
    path = receipts_file(journal_dir, channel)
    waiting = _unwritten.setdefault(path, [])
    waiting.append(line)
    return _flush(path)


def _flush(path: Path) -> bool:
    waiting = _unwritten.get(path)
    if not waiting:
        return True
    payload = b"".join(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n" for line in waiting)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        try:
            written = 0
            while written < len(payload):
                written += os.write(fd, payload[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:  # told all the same: the receipt waits in memory for storage to take it
        _refused[path] = f"{exc.strerror or exc} ({path})"
        return False
    del _unwritten[path]
    _refused.pop(path, None)
    return True


def unwritten(journal_dir: Path, channel: str) -> str | None:
    """Why the channel's receipts held in memory could not be stored, while some are; None when none are."""
    path = receipts_file(journal_dir, channel)
    return _refused.get(path) if _unwritten.get(path) else None


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


def lost_key(project: Project, task: Task) -> str | None:
    """``lost:<turn>`` of the task's latest turn recorded lost, if one of its last few turns was: a turn
    auto-resume followed at once is lost all the same."""
    with project.store.read() as tx:
        turns = tx.turns(task.id, last=6)
    for turn in reversed(turns):
        if turn.failure is not None and turn.failure.code in LOST_CODES:
            return f"lost:{turn.sequence}"
    return None


def pending(
    state: FailureState, told_: set[str], now: datetime, *, ended: str | None, lost: str | None
) -> Notice | None:
    """The notice due now: a lost turn's first, once (``lost``, even while the turn auto-resume started
    runs); after it, while the task rests on that loss (``ended == lost``: no later notice may follow),
    the gaps found since, at once and once; else what :func:`corral.domain.attention.due` says (a
    resumed turn's gaps wait for its end, as any running turn's do)."""
    if lost is not None and ended in (None, lost):
        if lost not in told_:
            return due(state, told_, now, ended=lost)
        if ended == lost:
            late = tuple(i for i in state.by_label(Label.INCOMPLETE) if i.id not in told_)
            if not late:
                return None
            return Notice("lost", f"gaps:{lost}:" + ",".join(sorted(i.id for i in late)), late)
    return due(state, told_, now, ended=ended)


def deliver(
    project: Project, task: Task, channel: str, hand_over: Callable[[Notice], None], now: datetime
) -> Notice | None:
    """Hand over the task's due notice on ``channel`` (if any), then write its receipt."""
    if task.session_id is None:
        return None
    journal_dir = project.paths.journal_dir(task.id, task.session_id)
    if not journal_dir.exists():
        return None
    _flush(receipts_file(journal_dir, channel))  # a receipt storage refused before: written now if it can be
    state = Journal(journal_dir).read()
    done = told(journal_dir, channel)
    notice = pending(state, done, now, ended=ended_key(project, task), lost=lost_key(project, task))
    if notice is None:
        return None
    hand_over(notice)  # the receipt follows the handoff: a crash between them tells it again, never never
    record_told(journal_dir, channel, notice, now)
    return notice
