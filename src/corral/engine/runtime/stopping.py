"""A stop request reaching a running supervisor: SIGTERM from ``corral stop`` (with ``stop.json``
naming who asked), waking any wait between attempts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.engine.runtime import protocol as proto


class Stopped(Exception):
    """A person (or a gate) asked for the turn to end."""


class StopFlag:
    """Set once a stop was asked for; remembers who asked (``stop.json``'s actor, else the system)."""

    def __init__(self, protocol_dir: Path, sleep: Callable[[float], bool] | None = None) -> None:
        self.dir = protocol_dir
        self.event = threading.Event()
        self.by: str | None = None
        self._sleep = sleep

    def on_sigterm(self, _signum: int, _frame: Any) -> None:
        request = proto.read_record(self.dir / proto.STOP, proto.StopRequest)
        self.by = request.actor if request else "system"
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> None:
        """Sleep between attempts; a stop request wakes it (raises :class:`Stopped`).

        Tests inject ``sleep`` (virtual time): it returns True to simulate a stop arriving.
        """
        if self._sleep is not None:
            if self._sleep(seconds) or self.event.is_set():
                raise Stopped
            return
        if self.event.wait(seconds):
            raise Stopped
