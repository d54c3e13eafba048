"""The dashboard over a shared PostgreSQL store: a change committed by another process, on this host
or another, reaches an open page though nothing on this host's disk changed."""

from __future__ import annotations

import http.client
import queue
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from tests.conftest import CLI
from tests.dashboard.conftest import Dash
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database


@pytest.fixture
def shared(two: tuple[CLI, CLI], pg_database: str, monkeypatch: pytest.MonkeyPatch) -> Dash:
    monkeypatch.setenv("CORRAL_DATABASE_URL", pg_database)  # the CLIs and the daemon they start
    a, b = two
    a.ok("create", "Alpha task", "--ref", "alpha-one")
    b.ok("create", "Beta task", "--ref", "beta-one")
    return Dash(a.json("dashboard")["url"], a, b)


class Stream:
    """The board's event stream, read event by event."""

    def __init__(self, dash: Dash) -> None:
        self.conn = http.client.HTTPConnection(dash.host, dash.port, timeout=60)
        headers = {"Host": f"{dash.host}:{dash.port}", "Cookie": dash.cookie()}
        self.conn.request("GET", dash.root + "/events/board", headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.response.fp:
                self.lines.put(line.decode())
        except (OSError, ValueError):  # closed at the test's end
            pass

    def events(self, seconds: float) -> Iterator[str]:
        """Each board event's data that arrives within ``seconds``."""
        deadline = time.monotonic() + seconds
        name, data = "", []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                continue
            if line.startswith("event: "):
                name = line[7:].strip()
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "\n" and name:
                if name == "board":
                    yield "".join(data)
                name, data = "", []

    def close(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # the reader's blocked read returns at once
        self.conn.close()

    def board_with(self, text: str, seconds: float = 10) -> str:
        for board in self.events(seconds):
            if text in board:
                return board
        raise AssertionError(f"no board with {text!r} within {seconds} s")


def test_a_task_made_and_one_closed_elsewhere_reach_the_open_board_with_nothing_working(shared: Dash) -> None:
    stream = Stream(shared)
    try:
        first = stream.board_with("alpha-one")
        assert "beta-one" in first and "beta-two" not in first
        shared.b.ok("create", "Made elsewhere", "--ref", "beta-two")
        assert "alpha-one" in stream.board_with("beta-two", seconds=5)
        shared.a.ok("close", "alpha-one", "-m", "not needed")
        board = stream.board_with("Finished (latest 1)", seconds=5)
        assert 'data-ref="alpha-one"' not in board and 'data-ref="beta-two"' in board
    finally:
        stream.close()
