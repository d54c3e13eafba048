"""The supervisor's live report: ``status.json`` rewritten at every phase change and on a heartbeat.

A reader outside (``list``, the reconciler, the daemon) learns from it which supervisor
runs the turn, where the turn is, which agent pid it owns and what is being retried; a
heartbeat older than a bound says the supervisor is frozen or gone.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from corral.domain.clock import rfc3339
from corral.engine.runtime import protocol as proto

HEARTBEAT_SECONDS = 2.0


def now() -> datetime:
    return datetime.now(UTC)


class StatusReporter:
    """Owns ``status.json``: the current phase, attempt, agent pid and retry state, with a heartbeat."""

    def __init__(self, protocol_dir: Path, command_id: str, kind: str) -> None:
        self.dir = protocol_dir
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.status = proto.SupervisorStatus(
            command_id=command_id, pid=os.getpid(), phase="command", kind=kind, started_at=rfc3339(now())
        )

    @property
    def phase(self) -> str:
        return self.status.phase

    def update(self, **changes: object) -> None:
        """Change some fields and write the file at once (not durable: a lost beat is redone)."""
        with self._lock:
            self.status = replace(self.status, **changes, heartbeat_at=rfc3339(now()))  # type: ignore[arg-type]
            proto.write(self.dir, self.status, durable=False)

    def beat(self) -> None:
        while not self._done.wait(HEARTBEAT_SECONDS):
            try:
                self.update()
            except OSError:
                pass  # a missed beat is not a failure; the next one may land

    def start(self) -> None:
        self.update()
        threading.Thread(target=self.beat, daemon=True).start()

    def finish(self) -> None:
        self._done.set()
        self.update(phase="done")
