"""The no-progress watchdog: how long since the agent's last completed step, and whether that is too long.

It measures real time (it guards a real process), and counts only time an attempt runs:
waiting between attempts is not the agent's silence. Keep-alives are not progress.
"""

from __future__ import annotations

import time


class ProgressClock:
    """The time of the last completed step of one attempt."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout = timeout_seconds
        self.last = time.monotonic()

    def progressed(self) -> None:
        self.last = time.monotonic()

    def remaining(self) -> float:
        return self.timeout - (time.monotonic() - self.last)

    def expired(self) -> bool:
        return self.remaining() <= 0
