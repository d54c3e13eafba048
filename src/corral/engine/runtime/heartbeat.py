"""The supervisor's live report: ``status.json`` rewritten at every phase change and on a heartbeat.

A reader outside (``list``, the reconciler, the daemon) learns from it which supervisor
runs the turn (its pid and start time), where the turn is, which agent pid it owns and
what is being retried. It beats every ``heartbeat_interval`` (the turn's delays,
``corral.domain.delays``); a heartbeat older than ten of them (``Delays.stale_heartbeat``, read
by the reader from its own settings) says the supervisor is frozen, stopped or gone
(:func:`heartbeat_age` is the one reading of it).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from msgspec.structs import replace

from corral.adapters.pid_identity import start_ticks
from corral.domain.clock import parse_time, rfc3339
from corral.domain.delays import Delays
from corral.engine.runtime import protocol as proto


def now() -> datetime:
    return datetime.now(UTC)


class StatusReporter:
    """Owns ``status.json``: the current phase, attempt, agent pid and retry state, with a heartbeat."""

    def __init__(self, protocol_dir: Path, command_id: str, kind: str, interval: float | None = None) -> None:
        self.dir = protocol_dir
        #: Seconds between beats: the command's ``heartbeat_interval`` (the default when none is given).
        self.interval = interval if interval is not None else Delays().heartbeat_interval
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.status = proto.SupervisorStatus(
            command_id=command_id,
            pid=os.getpid(),
            pid_start=start_ticks(os.getpid()),
            phase="command",
            kind=kind,
            started_at=rfc3339(now()),
        )

    @property
    def phase(self) -> str:
        return self.status.phase

    def update(self, **changes: object) -> None:
        """Change some fields and write the file at once (not durable: a lost beat is redone)."""
        with self._lock:
            self.status = replace(
                self.status,
                **changes,
                heartbeat_at=rfc3339(now()),
                heartbeat_mono=time.monotonic(),
            )
            proto.write(self.dir, self.status, durable=False)

    def beat(self) -> None:
        while not self._done.wait(self.interval):
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


def heartbeat_age(status: proto.SupervisorStatus, *, mono_now: float | None = None) -> float | None:
    """Seconds since the supervisor's last beat; None when it never beat.

    Read on the monotonic clock when the file carries it (the system's, shared by every
    process: a wall-clock step or a suspended laptop does not age a beat), else on the wall
    clock (a file of an older supervisor).
    """
    mono = time.monotonic() if mono_now is None else mono_now
    if status.heartbeat_mono is not None and status.heartbeat_mono <= mono + 1.0:
        return max(0.0, mono - status.heartbeat_mono)
    try:
        beat = parse_time(status.heartbeat_at)
        if beat is None:
            return None
        return max(0.0, (now() - beat).total_seconds())
    except (ValueError, TypeError):  # a timestamp corral did not write: no beat to read
        return None
