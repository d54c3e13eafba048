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
    # isoformat is the fast path (a history of thousands of times is rendered per `show`);
    # it equals strftime("%Y-%m-%dT%H:%M:%S.%fZ") for every year from 1000 on.
    return value.isoformat(timespec="microseconds")[:26] + "Z"


def parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def new_id() -> str:
    """A 16-hex-digit random id: short enough to type a prefix of, wide enough not to collide."""
    import secrets  # imported on first use: read-only commands never need it

    return secrets.token_hex(8)
