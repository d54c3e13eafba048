"""Polling until something holds: the one helper tests use to wait on a process they do not drive."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(predicate: Callable[[], T], timeout: float = 60.0, what: str = "the condition", poll: float = 0.05) -> T:
    """``predicate()``'s first truthy value, polled every ``poll`` s; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
