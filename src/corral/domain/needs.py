"""What a task needs from the person: the one grouping every view shows (``list``, ``watch``, the
dashboard), so no view sorts tasks by a rule of its own.

- **review** — the agent's turn is over and the next move is the person's: blocked, conflict
  (files to decide), submitted.
- **failed** — it stopped because something went wrong: interrupted, zombie, or parked after a
  failed turn (its resting cause carries failure evidence).
- **working** — a turn, a pair or a merge is under way.
- **backlog** — never started.

A finished task (complete, abandoned) needs nothing: :func:`need_of` gives None.
"""

from __future__ import annotations

from enum import StrEnum

from corral.domain.records import READ_ONLY_KEPT, Task
from corral.domain.status import Status


class Need(StrEnum):
    REVIEW = "review"
    FAILED = "failed"
    WORKING = "working"
    BACKLOG = "backlog"


#: The order views show the groups in: what waits for the person first.
ORDER: tuple[Need, ...] = (Need.REVIEW, Need.FAILED, Need.WORKING, Need.BACKLOG)

TITLES: dict[Need, str] = {
    Need.REVIEW: "Waiting for review",
    Need.FAILED: "Failed",
    Need.WORKING: "Working",
    Need.BACKLOG: "Backlog",
}

_BY_STATUS: dict[Status, Need] = {
    Status.BACKLOG: Need.BACKLOG,
    Status.WORKING: Need.WORKING,
    Status.PAIRING: Need.WORKING,
    Status.MERGING: Need.WORKING,
    Status.INTERRUPTED: Need.FAILED,
    Status.ZOMBIE: Need.FAILED,
    Status.BLOCKED: Need.REVIEW,
    Status.CONFLICT: Need.REVIEW,
    Status.SUBMITTED: Need.REVIEW,
}


def need_of(task: Task) -> Need | None:
    """The group ``task`` belongs in, or None once it is finished."""
    need = _BY_STATUS.get(task.status)
    if need is Need.REVIEW:
        cause = task.resting_cause
        if cause is not None and cause.evidence is not None and cause.code != READ_ONLY_KEPT:
            return Need.FAILED
    return need


def need_of_status(status: Status) -> Need | None:
    """The group a task in ``status`` belongs in unless its resting cause says it failed (a chart of
    statuses colours each as its group); None for a finished status."""
    return _BY_STATUS.get(status)
