"""Copying an agent's output: verbatim to the turn's logs, parsed into events, watched for progress.

stdout goes byte for byte to ``output.log`` (and stderr to ``stderr.log``), both 0600;
stdout is split into lines (linearly, an over-long line capped — the log keeps every byte)
and each line is parsed by the harness into events. A completed step (an assistant message,
a tool result, the result) is progress, which is what the watchdog measures; a keep-alive is
not. The copy ends when both streams close, or soon after the agent process exits: a
background child it left (``cmd &``) may hold the streams open for ever, so once the leader is
gone the copy reads what remains until the streams are quiet for :data:`DRAIN_QUIET_SECONDS`
(or :data:`DRAIN_MAX_SECONDS` have passed), and the turn ends.
"""

from __future__ import annotations

import os
import selectors
import time
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
#: After the agent process exited: the streams are read until they stay quiet this long...
DRAIN_QUIET_SECONDS = 2.0
#: ...or this long at most (a background child that never stops writing does not hold the turn).
DRAIN_MAX_SECONDS = 10.0
#: How often a live agent is checked for having exited while its streams are open.
LEADER_POLL_SECONDS = 0.25


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
        leader_gone: Callable[[], bool] = lambda: False,
        *,
        quiet: float = DRAIN_QUIET_SECONDS,
    ) -> bool:
        """Copy until both streams close, or until they are quiet for ``quiet`` seconds (at most
        :data:`DRAIN_MAX_SECONDS`) after ``leader_gone()`` turned true. ``tick(elapsed)`` runs at
        least once a second and returns how long the next wait may be (the watchdog's remaining
        time). True when both streams closed; False when the copy stopped with one still open
        (call it again to read what is left, and :meth:`flush` once the copy is over)."""
        sel = selectors.DefaultSelector()
        for stream, name in ((stdout, "out"), (stderr, "err")):
            if not stream.closed:
                sel.register(stream, selectors.EVENT_READ, name)
        open_streams = len(sel.get_map())
        drain_from: float | None = None
        last_data = 0.0
        try:
            while open_streams:
                remaining = tick(0.0)
                now = time.monotonic()
                if drain_from is None and leader_gone():
                    drain_from = last_data = now
                if drain_from is not None and (now - last_data >= quiet or now - drain_from >= DRAIN_MAX_SECONDS):
                    break
                wait = min(1.0, remaining, LEADER_POLL_SECONDS if drain_from is None else 0.1)
                for key, _mask in sel.select(timeout=max(0.05, wait)):
                    fd = key.fileobj.fileno()  # type: ignore[union-attr]
                    chunk = os.read(fd, CHUNK)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    last_data = time.monotonic()
                    if key.data == "out":
                        os.write(self.out_fd, chunk)
                        if self.take(self.lines.feed(chunk)):
                            on_progress()
                    else:
                        os.write(self.err_fd, chunk)
                        self._err_tail = (self._err_tail + chunk)[-TAIL_BYTES:]
        finally:
            sel.close()
        return open_streams == 0

    def flush(self) -> bool:
        """Parse a last line that had no newline; True when it was progress."""
        return self.take(self.lines.flush())
