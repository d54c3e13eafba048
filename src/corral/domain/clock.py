"""Time and identity, injected: every timestamp corral writes comes from a ``Clock``.

Tests pass a fake clock to control time; production uses :func:`utcnow`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

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
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
    )


def parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def new_id() -> str:
    """A 16-hex-digit random id: short enough to type a prefix of, wide enough not to collide."""
    import secrets  # imported on first use: read-only commands never need it

    return secrets.token_hex(8)
