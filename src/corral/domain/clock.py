"""Time and identity, injected: every timestamp corral writes comes from a ``Clock``.

Tests pass a fake clock to control time; production uses :func:`utcnow`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(value: datetime | None) -> str | None:
    """RFC 3339 UTC with microseconds and a ``Z``: fixed width, so it sorts as text."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    # printf-style formatting is the fastest here (a history of thousands of times is rendered
    # per `show`), and unlike strftime it pads every year to four digits.
    v = value
    return _WHOLE % (v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)


#: :func:`rfc3339`'s text up to the second's fraction, and whole.
_TO_SECOND = "%04d-%02d-%02dT%02d:%02d:%02d."
_WHOLE = _TO_SECOND + "%06dZ"

#: The last second :func:`stamp_text` formatted (a UTC time without its microseconds) with its text up to the
#: fraction, as one tuple replaced whole, so that threads formatting at once never pair a second with another's text.
_last_second: list[tuple[datetime, str]] = [(datetime.min.replace(tzinfo=UTC), "")]
_NO_TIME, _ONE_SECOND = timedelta(0), timedelta(seconds=1)


def stamp_text(value: datetime) -> str:
    """``rfc3339(value)``, the same text, formatted in about half its time for a UTC time: the part up to the
    second is kept from the last call in the same second (the store formats one at every status change)."""
    if value.tzinfo is not UTC:
        return rfc3339(value) or ""
    second, prefix = _last_second[0]
    if not _NO_TIME <= value - second < _ONE_SECOND:
        v = value
        prefix = _TO_SECOND % (v.year, v.month, v.day, v.hour, v.minute, v.second)
        _last_second[0] = (value.replace(microsecond=0), prefix)
    return "%s%06dZ" % (prefix, value.microsecond)  # noqa: UP031 -- the fraction as rfc3339 formats it


def parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def new_id() -> str:
    """A 16-hex-digit random id: short enough to type a prefix of, wide enough not to collide."""
    import secrets  # imported on first use: read-only commands never need it

    return secrets.token_hex(8)
