"""The scripted model server on its own (no CLI): wire format, errors, side requests, hangs."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.model_server import Error, Hang, ScriptedServer, Text, ToolUse, scripted_server

pytestmark = pytest.mark.timeout(30)

TOOLS = [{"name": "Write", "description": "write", "input_schema": {"type": "object"}}]


def post(
    server: ScriptedServer, body: dict[str, Any], path: str = "/v1/messages?beta=true", timeout: float = 10
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers={"content-type": "application/json", "x-api-key": "k"}
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def request(stream: bool = True, **extra: Any) -> dict[str, Any]:
    body = {
        "model": "claude-test",
        "max_tokens": 1000,
        "stream": stream,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "hi"}],
    }
    body.update(extra)
    return body


def sse_events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in data.decode().split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_streams_text() -> None:
    with scripted_server([Text("hello")]) as server:
        status, headers, data = post(server, request())
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(data)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(payload["type"] == name for name, payload in events)
    assert events[0][1]["message"]["model"] == "claude-test"
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "hello"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"
    assert events[4][1]["usage"]["output_tokens"] > 0
    [req] = server.requests
    assert req.kind == "script" and req.step == 0
    assert req.path == "/v1/messages" and req.query == {"beta": ["true"]}
    assert req.headers["x-api-key"] == "k"
    assert req.body["messages"] == [{"role": "user", "content": "hi"}]


def test_streams_tool_use_as_input_json_delta() -> None:
    step = ToolUse("Write", {"file_path": "a.txt", "content": "x"}, id="toolu_1", text="writing")
    with scripted_server([step]) as server:
        _, _, data = post(server, request())
    events = sse_events(data)
    starts = [p["content_block"] for n, p in events if n == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {}},
    ]
    deltas = [p["delta"] for n, p in events if n == "content_block_delta"]
    assert deltas[1]["type"] == "input_json_delta"
    assert json.loads(deltas[1]["partial_json"]) == {"file_path": "a.txt", "content": "x"}
    assert [p["delta"]["stop_reason"] for n, p in events if n == "message_delta"] == ["tool_use"]


def test_answers_json_when_not_streaming() -> None:
    with scripted_server([ToolUse("Bash", {"command": "true"}, id="toolu_9")]) as server:
        status, headers, data = post(server, request(stream=False))
    assert status == 200 and headers["content-type"] == "application/json"
    message = json.loads(data)
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["stop_reason"] == "tool_use"
    assert message["content"] == [{"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "true"}}]


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(401, "authentication_error"), (429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error")],
)
def test_error_replies_have_json_bodies(status: int, error_type: str) -> None:
    with scripted_server([Error(status, headers={"retry-after": "0"})]) as server:
        got, headers, data = post(server, request())
    assert got == status
    assert headers["retry-after"] == "0" and "request-id" in headers
    body = json.loads(data)
    assert body["type"] == "error" and body["error"]["type"] == error_type and body["error"]["message"]


def test_error_in_stream() -> None:
    with scripted_server([Error(529, in_stream=True)]) as server:
        status, _, data = post(server, request())
    assert status == 200
    events = sse_events(data)
    assert [n for n, _ in events] == ["message_start", "error"]
    assert events[1][1] == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_side_requests_do_not_consume_steps() -> None:
    with scripted_server([Text("scripted")]) as server:
        _, _, no_tools = post(server, request(stream=False, tools=[]))
        _, _, quota = post(server, request(stream=False, max_tokens=1))
        _, _, scripted = post(server, request(stream=False))
    assert json.loads(no_tools)["content"][0]["text"] == "ok"
    assert json.loads(quota)["content"][0]["text"] == "ok"
    assert json.loads(scripted)["content"][0]["text"] == "scripted"
    assert [r.kind for r in server.requests] == ["side", "side", "script"]
    assert len(server.side_requests) == 2 and server.remaining == []


def test_custom_side_predicate() -> None:
    def is_haiku(body: dict[str, Any]) -> bool:
        return "haiku" in body.get("model", "")

    with scripted_server([Text("scripted")], side_request=is_haiku, side_text="title") as server:
        _, _, side = post(server, request(stream=False, model="claude-haiku-x"))
        _, _, main = post(server, request(stream=False, tools=[]))
    assert json.loads(side)["content"][0]["text"] == "title"
    assert json.loads(main)["content"][0]["text"] == "scripted"


def test_exhausted_script_answers_a_marker_text() -> None:
    with scripted_server([]) as server:
        _, _, data = post(server, request(stream=False))
    assert json.loads(data)["content"][0]["text"] == "(script exhausted)"
    assert server.script_requests[0].step is None


def test_other_endpoints() -> None:
    with scripted_server([Text("x")]) as server:
        status, _, data = post(server, {"model": "m", "messages": []}, path="/v1/messages/count_tokens")
        assert (status, json.loads(data)) == (200, {"input_tokens": 100})
        parts = urlsplit(server.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        assert resp.status == 404 and json.loads(resp.read())["error"]["type"] == "not_found_error"
        conn.close()
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
        conn.request("HEAD", "/api/hello")
        assert conn.getresponse().status == 200
        conn.close()
    assert [(r.method, r.path, r.kind) for r in server.requests] == [
        ("POST", "/v1/messages/count_tokens", "other"),
        ("GET", "/v1/models", "other"),
        ("HEAD", "/api/hello", "other"),
    ]
    assert server.remaining == [Text("x")]


def test_hang_holds_until_released() -> None:
    hang = Hang()
    got: list[bytes] = []
    with scripted_server([hang]) as server:
        worker = threading.Thread(target=lambda: got.append(post(server, request())[2]))
        worker.start()
        assert server.wait_for_requests(1, timeout=5)
        time.sleep(0.5)
        assert worker.is_alive() and got == []
        hang.release.set()
        worker.join(timeout=5)
    assert not worker.is_alive()
    assert [n for n, _ in sse_events(got[0])] == ["message_start", "content_block_start"]


def test_close_releases_a_hang_before_any_byte() -> None:
    errors: list[BaseException] = []

    def call() -> None:
        try:
            post(server, request())
        except Exception as exc:  # the connection closes with no response
            errors.append(exc)

    server = ScriptedServer([Hang(started=False)])
    worker = threading.Thread(target=call)
    worker.start()
    assert server.wait_for_requests(1, timeout=5)
    started = time.monotonic()
    server.close()
    worker.join(timeout=5)
    assert not worker.is_alive() and time.monotonic() - started < 5
    assert errors and isinstance(errors[0], http.client.RemoteDisconnected)
    server.close()  # twice is fine
