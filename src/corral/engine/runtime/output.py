"""Copying an agent's output: verbatim to the turn's logs, parsed into events, watched for progress.

stdout goes byte for byte to ``output.log`` (and stderr to ``stderr.log``), both 0600;
stdout is split into lines (linearly, an over-long line capped — the log keeps every byte)
and each line is parsed by the harness into events. A completed step (an assistant message,
a tool result, the result) is progress, which is what the watchdog measures; a keep-alive is
not. The copy ends when both streams close.
"""

from __future__ import annotations

import os
import selectors
from collections import deque
from collections.abc import Callable
from typing import IO

from corral.adapters.harness.base import Event, Harness
from corral.engine.runtime.lines import LineBuffer

CHUNK = 256 * 1024
TAIL_BYTES = 64 * 1024
#: Bounded: classification needs only the last events (the result, the last errors), and a
#: 100 MB stream must not grow the supervisor. Counts and the verbatim log keep the rest.
EVENTS_KEPT = 500


class OutputCopier:
    """One attempt's output: the copy, the parsed events, the session id, the stderr tail."""

    def __init__(self, harness: Harness, out_fd: int, err_fd: int) -> None:
        self.harness = harness
        self.out_fd = out_fd
        self.err_fd = err_fd
        self.lines = LineBuffer()
        self.events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        self.session_id: str | None = None
        self._err_tail = b""

    @property
    def stderr_tail(self) -> bytes:
        return self._err_tail

    def take(self, lines: list[bytes]) -> bool:
        """Parse complete lines; True when one of them was progress."""
        progress = False
        for line in lines:
            if not line.strip():
                continue
            for event in self.harness.parse(line):
                if event.kind in ("session", "result") and event.session_id:
                    self.session_id = event.session_id
                if event.kind != "keepalive":
                    self.events.append(event)
                progress = progress or event.is_progress
        return progress

    def pump(
        self,
        stdout: IO[bytes],
        stderr: IO[bytes],
        tick: Callable[[float], float],
        on_progress: Callable[[], None],
    ) -> None:
        """Copy until both streams close. ``tick(elapsed)`` runs at least once a second and
        returns how long the next wait may be (the watchdog's remaining time)."""
        sel = selectors.DefaultSelector()
        sel.register(stdout, selectors.EVENT_READ, "out")
        sel.register(stderr, selectors.EVENT_READ, "err")
        open_streams = 2
        try:
            while open_streams:
                remaining = tick(0.0)
                for key, _mask in sel.select(timeout=max(0.05, min(1.0, remaining))):
                    fd = key.fileobj.fileno()  # type: ignore[union-attr]
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    if key.data == "out":
                        os.write(self.out_fd, chunk)
                        if self.take(self.lines.feed(chunk)):
                            on_progress()
                    else:
                        os.write(self.err_fd, chunk)
                        self._err_tail = (self._err_tail + chunk)[-TAIL_BYTES:]
        finally:
            sel.close()
        if self.take(self.lines.flush()):
            on_progress()
