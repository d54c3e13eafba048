"""The daemon's HTTP servers (the MCP endpoint, the dashboard) bound what a client may hold: a
connection that sends no request is closed, and connections past the cap are closed at once."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from corral.adapters import http_server
from corral.adapters.http_server import Served, serve


async def slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers in pieces over a second, as an event stream does."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for n in range(5):
        await asyncio.sleep(0.25)
        await send({"type": "http.response.body", "body": f"{n}\n".encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"end\n"})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setattr(http_server, "HEADER_SECONDS", 0.4)
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 3)
    served = serve(lambda _port: slow_app, "127.0.0.1", name="corral-test", what="The test server", code="x")
    yield served
    served.stop()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def get(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/")
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def test_a_connection_that_sends_no_request_is_closed(server: Served) -> None:
    silent = connect(server.port)
    slow = connect(server.port)
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # headers begun, never ended
    started = time.monotonic()
    assert closed_within(silent, 5) and closed_within(slow, 5)
    assert time.monotonic() - started < 4


def test_a_response_that_takes_longer_than_the_header_limit_is_not_cut(server: Served) -> None:
    assert get(server.port) == "0\n1\n2\n3\n4\nend\n"  # 1.25 s, past the 0.4 s limit


def test_connections_past_the_cap_are_closed_at_once_and_the_server_serves_on(server: Served) -> None:
    held = [connect(server.port) for _ in range(3)]
    time.sleep(0.1)
    extra = connect(server.port)
    assert closed_within(extra, 0.3)  # closed before the header limit could have closed it
    for sock in held:
        assert closed_within(sock, 5)  # the silent ones go at the header limit
    assert get(server.port).endswith("end\n")  # and the server answers again
