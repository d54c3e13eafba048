"""What every scripted loopback server of the tests shares: a script of steps consumed one per
request, the recorded requests, and a threaded HTTP server on 127.0.0.1 that closes cleanly.

Each server (the Anthropic Messages one, the OpenAI Responses one) supplies its request
handler and its wire format; a step with a ``release`` event (a hang) is released on close.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Self, TypeVar

StepT = TypeVar("StepT")


class ScriptLoop(Generic[StepT]):
    def __init__(self, steps: Sequence[StepT], handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self.steps: list[StepT] = list(steps)
        self.requests: list[Any] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._next_step = 0
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name=name, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The origin, ``http://127.0.0.1:PORT``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def consumed(self) -> int:
        return self._next_step

    @property
    def remaining(self) -> list[StepT]:
        return self.steps[self._next_step :]

    @property
    def script_requests(self) -> list[Any]:
        """The requests that consumed a step (or found the script exhausted), in order."""
        with self._lock:
            return [r for r in self.requests if r.kind == "script"]

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until ``count`` script requests have arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.script_requests) >= count:
                return True
            time.sleep(0.02)
        return len(self.script_requests) >= count

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):024d}"

    def _take_step(self) -> tuple[int | None, StepT | None]:
        # Called with self._lock held.
        if self._next_step >= len(self.steps):
            return None, None
        index = self._next_step
        self._next_step += 1
        return index, self.steps[index]

    def close(self) -> None:
        """Stop serving; hung requests are released. Safe to call twice."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        for step in self.steps:
            release = getattr(step, "release", None)
            if isinstance(release, threading.Event):
                release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
