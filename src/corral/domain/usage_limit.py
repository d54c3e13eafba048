"""An account's usage limit: when it resets, and what a task does about it (docs/harnesses.md#usage-limits).

A harness that reports its account's usage limit (its own dialect is matched in its adapter)
hands the words here; :func:`reset_of` reads the reset they state — an epoch after a ``|``
(Claude Code's ``usage limit reached|1767225600``), a duration (``try again in 2 hours 5
minutes``, ``resets in 20 minutes``), or a clock time or date (``resets 2pm``, ``try again at
3:45 PM``, ``resets at 2026-12-01T14:00:00Z``). :func:`verdict` decides: wait for the reset
together with every task of that account, or — a reset beyond the retry budget, which no
ladder outlives (a monthly quota) — park blocked with the date.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from corral.domain.record import record

#: How often a task waiting on an account looks again (for the reset, or for the first one through).
POLL_SECONDS = 1.0
#: How long the first task after a reset may take to get a model response before another goes.
FIRST_THROUGH_SECONDS = 300.0

_EPOCH = re.compile(r"\|\s*(\d{9,11})\b")
_UNITS = {"second": 1, "sec": 1, "minute": 60, "min": 60, "hour": 3600, "hr": 3600, "day": 86400}
_DURATION = re.compile(
    r"\b(?:in|after)\s+((?:\d+(?:\.\d+)?\s*(?:days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)[\s,]*(?:and\s+)?)+)",
    re.I,
)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(day|hour|hr|minute|min|second|sec)s?", re.I)
_ISO = re.compile(r"\b(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)")
_DATE = re.compile(r"\b(?:on\s+)?(\d{1,2})/(\d{1,2})/(\d{4})\b")
_CLOCK = re.compile(r"\b(?:resets?|reset at|again at|at)\s+(\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?(?![\d/])", re.I)


def reset_of(text: str, now: datetime) -> datetime | None:
    """The reset ``text`` states, as an aware UTC time, or None when it states none.

    A clock time without a date is the next such time (today, or tomorrow when it has passed);
    a clock time or date without a zone is read as UTC.
    """
    if found := _EPOCH.search(text):
        return datetime.fromtimestamp(int(found.group(1)), UTC)
    if found := _ISO.search(text):
        try:
            at = datetime.fromisoformat(found.group(1).replace(" ", "T").replace("Z", "+00:00"))
        except ValueError:
            at = None
        if at is not None:
            return at if at.tzinfo else at.replace(tzinfo=UTC)
    if found := _DURATION.search(text):
        seconds = sum(float(n) * _UNITS[unit.lower()] for n, unit in _PART.findall(found.group(1)))
        if seconds > 0:
            return now + timedelta(seconds=seconds)
    if found := _DATE.search(text):
        month, day, year = (int(g) for g in found.groups())
        try:
            return datetime(year, month, day, tzinfo=UTC)
        except ValueError:
            return None
    if found := _CLOCK.search(text):
        hour, minute = int(found.group(1)), int(found.group(2) or 0)
        meridian = (found.group(3) or "").lower().replace(".", "")
        if meridian == "pm" and hour < 12:
            hour += 12
        elif meridian == "am" and hour == 12:
            hour = 0
        if hour > 23 or minute > 59 or (not meridian and found.group(2) is None):
            return None  # a bare number is no time of day
        at = now.astimezone(UTC).replace(hour=hour, minute=minute, second=0, microsecond=0)
        return at if at > now else at + timedelta(days=1)
    return None


@record
class Wait:
    """Wait with the account until ``resets_at``."""

    resets_at: datetime


@record
class Beyond:
    """The reset is past what the retry budget would wait: park blocked, naming the date."""

    resets_at: datetime
    reason: str


def verdict(resets_at: datetime, now: datetime, budget_seconds: float) -> Wait | Beyond:
    """Wait for a reset within ``budget_seconds`` (the transient overload budget); else park."""
    if (resets_at - now).total_seconds() <= budget_seconds:
        return Wait(resets_at)
    return Beyond(
        resets_at,
        f"the account's usage limit resets {resets_at.strftime('%Y-%m-%d %H:%M UTC')}, beyond the "
        f"{budget_seconds / 3600:g} h retry budget for transient_overload: no retry outlives it",
    )


def reset_words(resets_at: datetime | str | None, now: datetime | None = None) -> str:
    """``resets 14:00`` (local time, the same day), ``resets Dec 2 14:00`` otherwise, ``reset unknown``."""
    if resets_at is None:
        return "reset unknown"
    at = datetime.fromisoformat(resets_at.replace("Z", "+00:00")) if isinstance(resets_at, str) else resets_at
    local = at.astimezone()
    today = (now or datetime.now(UTC)).astimezone().date()
    return f"resets {local:%H:%M}" if local.date() == today else f"resets {local:%b} {local.day} {local:%H:%M}"
