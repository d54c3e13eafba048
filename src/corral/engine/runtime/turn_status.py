"""``status.json``, ``progress.json`` and ``stop.json``: a running turn's live reports (``protocol``'s face).

What ``list`` and the working sweep read of every running turn, so this module loads nothing
beyond the records themselves.
"""

from __future__ import annotations

from typing import ClassVar

from corral.engine.runtime.wire import PROGRESS, STATUS, STOP, Wire


class RetryState(Wire, frozen=True):
    """What is being retried right now and when the next attempt starts (rendered by ``domain.substate``).

    ``by`` says whose retry it is: ``corral`` (its ladder waits between attempts) or ``harness``
    (a harness that keeps its own retries announced one; ``next_delay_ms`` is 0 when it gave none).
    """

    attempt: int
    failure_class: str
    reason: str
    next_delay_ms: int
    by: str = "corral"
    #: The most attempts the turn gets at this rate (the "m" of "attempt n of m", the bound corral's
    #: policy applies: the crash-loop detector's for a fast unclassified failure); None when time bounds it.
    attempts: int | None = None
    #: corral's schedule (its ladder's own figures, ``corral.engine.runtime.ladder.schedule``): when the
    #: next attempt starts (RFC 3339); for a class bounded by time, the moment after which no attempt
    #: starts and the most attempts that fit before it; the waits still ahead if every attempt fails.
    next_at: str | None = None
    gives_up_by: str | None = None
    at_most: int | None = None
    waits_left_ms: int | None = None


class AccountWait(Wire, frozen=True):
    """A turn waiting with its harness account for a usage limit's reset (``corral.engine.runtime.usage_pause``).

    ``resets_at`` is when the limit clears (RFC 3339); ``behind_first`` says the reset has passed
    and the turn waits for the first task after it to get through.
    """

    resets_at: str | None
    harness: str
    behind_first: bool = False


class SupervisorStatus(Wire, frozen=True):
    """The supervisor's live report: who it is, where the turn is, and its heartbeat.

    ``pid_start`` and ``agent_start`` are the start times (``/proc/<pid>/stat`` field 22) of
    the supervisor and its agent, so a reader never takes another process that holds the pid
    since for them; ``heartbeat_mono`` is the beat on the system's monotonic clock (no wall
    clock step, no suspend, counts as staleness). Files without them are still read.
    """

    FILE: ClassVar[str] = STATUS

    command_id: str
    pid: int
    phase: str  # command | sync | work | retrying | check | response | done
    kind: str | None = None
    agent_pid: int | None = None
    attempt: int = 0
    retry: RetryState | None = None
    started_at: str | None = None
    heartbeat_at: str | None = None
    pid_start: int | None = None
    agent_start: int | None = None
    heartbeat_mono: float | None = None
    waiting: AccountWait | None = None


class Progress(Wire, frozen=True):
    """An agent's latest progress line: ephemeral, latest wins, never kept in the task's history (a
    worker ships the latest to the store's live row, for reviewers on other hosts: docs/workers.md)."""

    FILE: ClassVar[str] = PROGRESS

    message: str
    pid: int
    at: str


class StopRequest(Wire, frozen=True):
    """Who asked for the running turn to end (read by the supervisor when SIGTERM arrives)."""

    FILE: ClassVar[str] = STOP

    actor: str
