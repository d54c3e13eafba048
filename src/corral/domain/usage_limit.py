"""An account's usage limit: when it resets, and what a task does about it (docs/harnesses.md#usage-limits).

A harness that reports its account's usage limit (its own dialect is matched in its adapter)
hands the words here; :func:`reset_of` reads the reset they state — an epoch after a ``|``
(Claude Code's ``usage limit reached|1767225600``), a duration (``try again in 2 hours 5
minutes``, ``resets in 20 minutes``), a date (``Dec 3rd, 2026 4:08 PM``, ``12/19/2026``) or a time
of day (``resets 3:11pm (UTC)``, ``try again at 3:45 PM``, ``2026-12-01T14:00:00Z``).
:func:`verdict` decides: wait for the reset together with every task of that account, or — a
reset beyond the retry budget, which no ladder outlives (a monthly quota) — park blocked with
the date.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from msgspec import Struct

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
_TIME = r"(\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?"
_ZONE = r"(?:\s*\(([A-Za-z_]+(?:/[A-Za-z_+-]+)*)\))?"
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: ``Dec 3rd, 2026 4:08 PM`` (Codex), ``Dec 3, 9:45pm (UTC)`` (Claude Code): a month's name, a day, a year
#: or none, a time of day.
_NAMED = re.compile(
    r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+"
    r"(?:(\d{4}),?\s+)?(?:at\s+)?" + _TIME + _ZONE,
    re.I,
)
_CLOCK = re.compile(r"\b(?:resets?|reset at|again at|at)\s+" + _TIME + r"(?![\d/])" + _ZONE, re.I)
#: A time of day that has just passed (to the minute a message states) is the reset now, not tomorrow's.
JUST_PASSED = timedelta(seconds=60)


def reset_of(text: str, now: datetime, local: tzinfo | None = None) -> datetime | None:
    """The reset ``text`` states, as an aware time, or None when it states none.

    A time of day in a zone the text names (``3:11pm (UTC)``, ``(Europe/Berlin)``) is read there;
    one without a zone in ``local`` (the machine's own zone by default: the harness printed it in
    its local time). A time of day without a date is the next such time — today, or tomorrow when
    it passed more than a minute ago (the text is exact only to the minute).
    """
    if found := _EPOCH.search(text):
        return datetime.fromtimestamp(int(found.group(1)), UTC)
    if found := _ISO.search(text):
        try:
            at = datetime.fromisoformat(found.group(1).replace(" ", "T").replace("Z", "+00:00"))
        except ValueError:
            at = None
        if at is not None:
            return at if at.tzinfo else at.replace(tzinfo=local or _local(now))
    if found := _DURATION.search(text):
        seconds = sum(float(n) * _UNITS[unit.lower()] for n, unit in _PART.findall(found.group(1)))
        if seconds > 0:
            return now + timedelta(seconds=seconds)
    if found := _NAMED.search(text):
        month = _MONTHS.index(found.group(1).lower()[:3]) + 1
        clock = _clock(found.group(4), found.group(5), found.group(6))
        zone = _zone(found.group(7)) or local or _local(now)
        if clock is not None:
            year = int(found.group(3)) if found.group(3) else now.astimezone(zone).year
            try:
                at = datetime(year, month, int(found.group(2)), *clock, tzinfo=zone)
            except ValueError:
                return None
            if not found.group(3) and at < now - JUST_PASSED:
                at = at.replace(year=year + 1)  # no year: the next such date
            return at
    if found := _DATE.search(text):
        month, day, year = (int(g) for g in found.groups())
        try:
            return datetime(year, month, day, tzinfo=local or _local(now))
        except ValueError:
            return None
    if found := _CLOCK.search(text):
        clock = _clock(found.group(1), found.group(2), found.group(3))
        if clock is None:
            return None  # a bare number is no time of day
        zone = _zone(found.group(4)) or local or _local(now)
        at = now.astimezone(zone).replace(hour=clock[0], minute=clock[1], second=0, microsecond=0)
        return at if at > now - JUST_PASSED else at + timedelta(days=1)
    return None


def _clock(hour_text: str, minute_text: str | None, meridian_text: str | None) -> tuple[int, int] | None:
    hour, minute = int(hour_text), int(minute_text or 0)
    meridian = (meridian_text or "").lower().replace(".", "")
    if meridian == "pm" and hour < 12:
        hour += 12
    elif meridian == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59 or (not meridian and minute_text is None):
        return None
    return hour, minute


def _zone(name: str | None) -> tzinfo | None:
    if not name:
        return None
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    try:
        from zoneinfo import ZoneInfo  # only a message that names its zone

        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        return None


def _local(now: datetime) -> tzinfo:
    zone = datetime.now(UTC).astimezone().tzinfo
    return zone or UTC


class Wait(Struct, frozen=True):
    """Wait with the account until ``resets_at``."""

    resets_at: datetime


class Beyond(Struct, frozen=True):
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
