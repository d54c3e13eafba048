"""Copying an agent's output: verbatim to the turn's logs, indexed, parsed into events, watched for progress.

stdout goes byte for byte to ``output.log`` (and stderr to ``stderr.log``), both 0600;
their order is kept in ``output.index`` (:class:`OutputIndex`), so a reader can interleave them;
stdout is split into lines (linearly, an over-long line capped — the log keeps every byte)
and each line is parsed by the harness into events. A completed step (an assistant message,
a tool result, the result) is progress, which is what the watchdog measures; a keep-alive is
not. The copy ends when both streams close, or soon after the agent process exits: a
background child it left (``cmd &``) may hold the streams open for ever, so once the leader is
gone the copy reads what remains until the streams are quiet for the turn's ``drain_quiet``
(or its ``drain_longest`` has passed: ``corral.domain.delays``), and the turn ends.
"""

from __future__ import annotations

import json
import os
import selectors
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import IO

from corral.adapters.harness.base import Event, Harness, parsed
from corral.domain.delays import Delays
from corral.engine.paths import OUTPUT_INDEX
from corral.engine.runtime.lines import LineBuffer

CHUNK = 256 * 1024
TAIL_BYTES = 64 * 1024
#: Bounded: classification needs only the last events (the result, the last errors), and a
#: 100 MB stream must not grow the supervisor. Counts and the verbatim log keep the rest.
EVENTS_KEPT = 500
#: The drain's waits when a caller gives none: the settings' defaults.
_DRAIN = Delays()
#: How often a live agent is checked for having exited while its streams are open.
LEADER_POLL_SECONDS = 0.25


#: A stream that keeps writing gets a fresh index record at most this often, so its lines have times.
INDEX_TICK_SECONDS = 1.0


class OutputIndex:
    """The order of a turn's stdout and stderr: ``output.index``, JSON Lines, append-only, 0600.

    Each record is ``{"k": KIND, "o": OUT, "e": ERR, "t": TIME}``: ``OUT`` and ``ERR`` are the
    sizes of ``output.log`` and ``stderr.log`` at that moment, ``TIME`` the wall clock (Unix
    seconds). Kind ``"a"`` marks where an attempt's copy begins; ``"o"`` and ``"e"`` say that
    stdout (or stderr) bytes follow. Between one record and the next only the stream the first
    names grew, and after the last record only its stream grows. A record is written before
    the bytes it announces, with the same unbuffered ``write``, and only when the stream changes
    (or :data:`INDEX_TICK_SECONDS` passed), so it costs one short line per switch, never per
    byte. A failure to write it (a full disk) ends the index, never the copy.
    """

    def __init__(self, fd: int, out_pos: int, err_pos: int) -> None:
        self.fd: int | None = fd
        self.pos = {"o": out_pos, "e": err_pos}
        self._last: str | None = None
        self._last_at = 0.0
        self._closer = weakref.finalize(self, _close_fd, fd)

    @classmethod
    def in_dir(cls, log_dir: str | os.PathLike[str], out_fd: int, err_fd: int) -> OutputIndex | None:
        """The index of the logs open on ``out_fd`` and ``err_fd`` in ``log_dir``; None when it cannot be opened."""
        try:
            fd = os.open(os.path.join(log_dir, OUTPUT_INDEX), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return None
        return cls(fd, os.fstat(out_fd).st_size, os.fstat(err_fd).st_size)

    def _record(self, kind: str) -> None:
        if self.fd is None:
            return
        now = time.time()
        line = json.dumps({"k": kind, "o": self.pos["o"], "e": self.pos["e"], "t": round(now, 3)}) + "\n"
        try:
            os.write(self.fd, line.encode())
        except OSError:
            self.close()
            return
        self._last, self._last_at = kind, now

    def begin(self) -> None:
        """An attempt's copy begins here."""
        self._record("a")

    def before(self, stream: str, size: int) -> None:
        """``size`` bytes of ``stream`` ("o" or "e") are about to be written."""
        if stream != self._last or time.time() - self._last_at >= INDEX_TICK_SECONDS:
            self._record(stream)
        self.pos[stream] += size

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            self._closer.detach()
            _close_fd(fd)


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class OutputCopier:
    """One attempt's output: the copy, its index, the parsed events, the session id, the stderr tail.

    ``index`` is where the order of the two streams goes (``OutputIndex.in_dir`` of the turn's
    log directory); None keeps no index, and the logs are then read as stdout alone.
    ``on_event`` sees every event as it is parsed, while the agent runs: the supervisor acts
    on a harness's retry line at once instead of after the harness's own retries.
    """

    def __init__(
        self,
        harness: Harness,
        out_fd: int,
        err_fd: int,
        index: OutputIndex | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.harness = harness
        self.on_event = on_event
        self.out_fd = out_fd
        self.err_fd = err_fd
        self.index = index
        if self.index is not None:
            self.index.begin()
        self.lines = LineBuffer()
        self.events: deque[Event] = deque(maxlen=EVENTS_KEPT)
        self.session_id: str | None = None
        self._err_tail = b""

    @property
    def stderr_tail(self) -> bytes:
        return self._err_tail

    def take(self, lines: list[bytes]) -> bool:
        """Parse complete lines; True when one of them was progress.

        A line is the agent's output, untrusted: one its harness's parser cannot read (the bounded
        decode refused it, or the parser failed on it) is an ``unparseable`` event — an observation
        gap of the attempt (``observer.unread_gap``) — and the copy goes on.
        """
        progress = False
        for line in lines:
            if not line.strip():
                continue
            for event in parsed(self.harness, line):
                if event.kind in ("session", "result") and event.session_id:
                    self.session_id = event.session_id
                if event.kind != "keepalive":
                    self.events.append(event)
                    if self.on_event is not None:
                        self.on_event(event)
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
        quiet: float = _DRAIN.drain_quiet,
        longest: float = _DRAIN.drain_longest,
    ) -> bool:
        """Copy until both streams close, or until they are quiet for ``quiet`` seconds (at most
        ``longest``) after ``leader_gone()`` turned true. ``tick(elapsed)`` runs at
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
                if drain_from is not None and (now - last_data >= quiet or now - drain_from >= longest):
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
                        self._index("o", len(chunk))
                        os.write(self.out_fd, chunk)
                        if self.take(self.lines.feed(chunk)):
                            on_progress()
                    else:
                        self._index("e", len(chunk))
                        os.write(self.err_fd, chunk)
                        self._err_tail = (self._err_tail + chunk)[-TAIL_BYTES:]
        finally:
            sel.close()
        return open_streams == 0

    def _index(self, stream: str, size: int) -> None:
        if self.index is not None:
            self.index.before(stream, size)

    def flush(self) -> bool:
        """Parse a last line that had no newline (the copy is over: the index is closed); True when it was progress."""
        if self.index is not None:
            self.index.close()
        return self.take(self.lines.flush())
