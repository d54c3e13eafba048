"""Failure classes, the one retry policy, the crash-loop detector, the watchdog's rule, the causes never auto-resumed.

Each harness maps its own output onto :class:`FailureClass`; a classifier that is
unsure says ``unknown``, because a wrong ``fatal_*`` blocks work that would have
healed. :func:`decide` is a pure function of (class, attempt, elapsed) and is the
only place cadence is decided; the budgets' defaults are settings
(``corral.domain.settings``). :func:`decide_watchdog_retry` is the same decision after a
watchdog's no-progress kill. The signals every harness shares are in
:mod:`corral.domain.classifiers`; how a process ended, in words, in :mod:`corral.domain.exits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from msgspec import Struct

from corral.domain.delays import Delays
from corral.domain.settings import default

#: Bytes of a failure's reason kept in the live retry state and in the receipt (and the most of one
#: a reader takes from another host's live facts or shared pauses).
RETRY_REASON_BYTES = 300


class FailureClass(StrEnum):
    TRANSIENT_OVERLOAD = "transient_overload"
    TRANSIENT_NETWORK = "transient_network"
    TRANSIENT_UNREACHABLE = "transient_unreachable"
    FATAL_AUTH = "fatal_auth"
    FATAL_CONFIG = "fatal_config"
    UNKNOWN = "unknown"


TRANSIENT = frozenset(
    {FailureClass.TRANSIENT_OVERLOAD, FailureClass.TRANSIENT_NETWORK, FailureClass.TRANSIENT_UNREACHABLE}
)
FATAL = frozenset({FailureClass.FATAL_AUTH, FailureClass.FATAL_CONFIG})


class Budgets(Struct, frozen=True):
    """How long each class may keep retrying; the defaults are the ``budget_*`` settings."""

    overload_seconds: float = default("budget_overload", float)
    network_seconds: float = default("budget_network", float)
    unreachable_attempts: int = default("budget_unreachable", int)
    unknown_attempts: int = default("budget_unknown", int)


#: Fast unclassified failures in a row (each shorter than the ``crash_loop_window``) that are a crash loop.
FAST_FAILURES_FOR_LOOP = 3


def fast_run(recent_durations: Sequence[float], delays: Delays = Delays()) -> int:
    """How many of the newest failed attempts in a row were fast (each shorter than the crash-loop window)."""
    run = 0
    for duration in reversed(list(recent_durations)):
        if duration >= delays.crash_loop_window:
            break
        run += 1
    return run


def attempts_bound(
    failure_class: str | None, recent_durations: Sequence[float], budgets: Budgets, delays: Delays = Delays()
) -> int | None:
    """The "m" of "attempt n of m" a person reads while a turn retries: the bound :func:`decide` applies.

    An unclassified failure that came fast is bounded by the crash-loop detector (its third in a
    row ends the turn), a slow one by the budget of attempts; an unreachable provider by its budget;
    overload and network failures by time, so they have no count (None).
    """
    if failure_class == FailureClass.UNKNOWN.value:
        fast = fast_run(recent_durations, delays)
        if fast:
            return min(budgets.unknown_attempts, len(list(recent_durations)) - fast + FAST_FAILURES_FOR_LOOP)
        return budgets.unknown_attempts
    if failure_class == FailureClass.TRANSIENT_UNREACHABLE.value:
        return budgets.unreachable_attempts
    return None


class Retry(Struct, frozen=True):
    delay: float


class Stop(Struct, frozen=True):
    reason: str  # fatal | budget-exhausted | crash-loop


Decision = Retry | Stop


def decide(
    failure_class: FailureClass,
    attempt: int,
    elapsed: float,
    budgets: Budgets = Budgets(),
    recent_durations: Sequence[float] = (),
    delays: Delays = Delays(),
) -> Decision:
    """What to do after attempt number ``attempt`` failed with ``failure_class``.

    ``elapsed`` is the wall time since the turn's first attempt started;
    ``recent_durations`` the run time of each failed attempt so far, newest last
    (for the fast crash-loop detector, which applies to ``unknown`` only: a 429
    comes back in milliseconds, so three fast transients are not a crash loop).
    An unclassified attempt that failed fast (within the crash-loop window of its start) is
    retried on the fast steps (1 s, then 2 s by default) and the third fast one in a row ends the
    turn as a crash loop, so a deterministic failure is in front of a person within seconds; a
    slow one takes the unknown ladder. The steps and the window are the turn's ``delays``.
    """
    if failure_class in FATAL:
        return Stop("fatal")
    if failure_class is FailureClass.UNKNOWN:
        fast = fast_run(recent_durations, delays)
        if fast >= FAST_FAILURES_FOR_LOOP:
            return Stop("crash-loop")
        if attempt >= budgets.unknown_attempts:
            return Stop("budget-exhausted")
        if fast:  # it failed at once: soon again, and the third such failure ends the turn
            return Retry(delays.fast_step(fast))
        return Retry(delays.unknown_step(attempt))
    delay = delays.transient_step(attempt)
    if failure_class is FailureClass.TRANSIENT_UNREACHABLE:
        if attempt >= budgets.unreachable_attempts:
            return Stop("budget-exhausted")
        return Retry(delay)
    limit = budgets.overload_seconds if failure_class is FailureClass.TRANSIENT_OVERLOAD else budgets.network_seconds
    if elapsed + delay > limit:
        return Stop("budget-exhausted")
    return Retry(delay)


#: The watchdog's rule: how often a turn killed for making no progress is relaunched (once: a second
#: kill ends the turn, which then rests for a person), and how long a process has between SIGTERM and SIGKILL.
WATCHDOG_RELAUNCHES = 1
#: The ``term_grace`` setting's default: what a version-1 command, which carried no grace, is read with.
TERM_GRACE_SECONDS = default("term_grace", float)


def decide_watchdog_retry(work_captured: bool, relaunches: int, limit: int = WATCHDOG_RELAUNCHES) -> bool:
    """After a no-progress kill: relaunch (True) only when nothing was captured, at most ``limit`` times (once).

    "Work captured" is a new commit or a dirty worktree. When the commit probe cannot
    read git, the caller passes False (fail toward retrying).
    """
    return not work_captured and relaunches < limit


#: Resting causes after which auto-resume must never fire: the task needs a person.
NO_AUTO_RESUME = frozenset({"merge-and-fix-failed", "internal-fault"})
