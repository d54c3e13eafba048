"""A scripted Anthropic Messages API server on loopback, for driving the real Claude Code CLI.

Test seam 2 (see DESIGN.md "Two test seams"): point the real ``claude`` binary at this server
with ``ANTHROPIC_BASE_URL`` (``tests/support/claude.py`` builds the whole environment) and
script what "the model" answers, one step per request::

    with scripted_server([ToolUse("Write", {"file_path": "a.txt", "content": "hi\n"}), Text("done")]) as srv:
        run claude ...
        assert srv.script_requests[1].tool_results()[0]["content"].startswith("File created")

Steps, consumed one per model request, in order:

- ``Text(text)`` — one text block, ``stop_reason: end_turn``.
- ``ToolUse(name, input, id=None, text=None)`` — an optional text block, then one ``tool_use``
  block streamed as ``input_json_delta``, ``stop_reason: tool_use``.
- ``Error(status, message=None, type=None, headers={}, in_stream=False)`` — an HTTP error with
  the API's JSON body ``{"type": "error", "error": {"type": ..., "message": ...}}`` (401
  ``authentication_error``, 429 ``rate_limit_error``, 529 ``overloaded_error``, ...). With
  ``in_stream=True`` a streaming request gets a 200 stream whose ``message_start`` is followed
  by an ``event: error`` instead, as the real API does when it overloads mid-stream.
- ``Hang(started=True)`` — hold the request open: with ``started`` the 200 headers,
  ``message_start`` and a text ``content_block_start`` are sent first (a stream that stalls),
  without it nothing is sent. It returns when ``step.release`` is set or the server closes.

When the script runs out, a model request is answered ``Text(exhausted_text)``
("(script exhausted)") so a test fails on its assertions rather than hanging; check
``server.remaining == []`` to assert that the whole script was used.

Wire format: ``POST /v1/messages`` (Claude Code adds ``?beta=true``) streams Server-Sent Events
when the body says ``"stream": true`` — ``message_start``, then per block
``content_block_start`` / ``content_block_delta`` (``text_delta`` or ``input_json_delta``) /
``content_block_stop``, then ``message_delta`` (``stop_reason``, ``usage``) and
``message_stop`` — and answers one JSON message otherwise. Every response carries a
``request-id`` header and ``Connection: close``. ``POST /v1/messages/count_tokens`` answers
``{"input_tokens": 100}``; ``HEAD`` answers an empty 200; any other ``GET``/``POST`` answers a
404 JSON error. Every request is recorded in ``server.requests`` (method, path, query, headers
lower-cased, parsed JSON body, and ``kind``: ``"script"``, ``"side"`` or ``"other"``).

What Claude Code 2.1.332 was seen to send here (``-p --output-format stream-json``):

- With ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``: nothing but ``POST /v1/messages?beta=true``
  — one per model turn, always ``"stream": true``, ``max_tokens`` 128000 (32000 for
  ``--model claude-sonnet-4-5``), with ``tools`` (12 of them), ``system``, ``thinking``,
  ``metadata``; headers ``x-api-key``, ``anthropic-version: 2023-06-01``, ``anthropic-beta``,
  ``user-agent: claude-cli/<version> (external, sdk-cli)``, ``x-claude-code-session-id``,
  ``x-stainless-retry-count``. ``messages`` holds the user prompt (after context
  ``<system-reminder>`` text blocks) and also a ``{"role": "system"}`` message (environment
  notes). Without that variable it also sends ``HEAD /api/hello`` (a connectivity probe)
  before the first model call, and tries to post telemetry elsewhere (it fails offline and is
  spooled under ``$HOME/.claude/telemetry``).
- ``--resume <id>`` sends the whole earlier conversation in ``messages`` (same session id).
- Retries: an HTTP 401/429/529 is retried ``CLAUDE_CODE_MAX_RETRIES`` times (401 too, once
  with ``MAX_RETRIES=1``), so a test that wants the error to stick scripts ``max_retries + 1``
  errors. A mid-stream ``event: error`` (``Error(..., in_stream=True)``) is retried as a
  stream, then falls back to ONE non-streaming request (``"stream": false``,
  ``max_tokens`` 64000) — hence the non-streaming JSON path.
- No side requests were seen in ``-p`` mode (title generation, topic detection, quota check
  and the like belong to the interactive UI), with or without nonessential traffic.

Side requests — the rule: a ``POST /v1/messages`` whose body carries no ``tools`` (absent or
empty), or asks for ``max_tokens <= 1`` (the quota / model-validation probe shape), is a side
request: it is answered ``Text(side_text)`` ("ok") and does NOT consume a step. Every agent-loop
request Claude Code sends carries its tool list, so a script is never skipped by it. Forked
helper queries of the interactive UI reuse the main request's tools and system prompt (for the
prompt cache) and cannot be told apart by shape; a test that meets one passes its own
``side_request=`` predicate (body -> bool).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.scripted_http import ScriptLoop

# ---------------------------------------------------------------------------------------------
# Script steps


@dataclass(frozen=True)
class Text:
    """An assistant reply of one text block, ending the turn (``stop_reason: end_turn``)."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """An assistant reply calling one tool (``stop_reason: tool_use``), optionally after some text."""

    name: str
    input: dict[str, Any]
    id: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error reply with the Anthropic JSON error body."""

    status: int
    message: str | None = None
    type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    in_stream: bool = False


@dataclass(frozen=True)
class Hang:
    """Hold the request open without finishing it, like a stuck stream.

    With ``started=True`` (the default) the 200 status, headers, ``message_start`` and the
    start of a text block are sent first, so the client sees a stream that stalls; with
    ``started=False`` nothing at all is sent. The handler returns when ``release`` is set or
    the server is closed.
    """

    started: bool = True
    release: threading.Event = field(default_factory=threading.Event, compare=False)


Step = Text | ToolUse | Error | Hang

_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}


def error_body(status: int, message: str | None = None, type_: str | None = None) -> dict[str, Any]:
    default_type, default_message = _ERROR_TYPES.get(status, ("api_error", f"HTTP {status}"))
    return {"type": "error", "error": {"type": type_ or default_type, "message": message or default_message}}


# ---------------------------------------------------------------------------------------------
# Recorded requests


@dataclass
class Request:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: Any  # parsed JSON, or None
    raw: bytes
    kind: str = "other"  # "script" (consumed a step) | "side" | "other" (not a model call)
    step: int | None = None  # index of the consumed step; None when the script was exhausted
    at: float = field(default_factory=time.time)  # when it arrived (epoch seconds)

    @property
    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict):
            return list(self.body.get("messages") or [])
        return []

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    def blocks(self, type_: str, role: str | None = None) -> list[dict[str, Any]]:
        """Every content block of ``type_`` in ``messages`` (optionally only of ``role``)."""
        found: list[dict[str, Any]] = []
        for message in self.messages:
            if role is not None and message.get("role") != role:
                continue
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            found.extend(b for b in content or [] if isinstance(b, dict) and b.get("type") == type_)
        return found

    def tool_results(self) -> list[dict[str, Any]]:
        return self.blocks("tool_result", role="user")

    def texts(self, role: str | None = None) -> list[str]:
        return [b.get("text", "") for b in self.blocks("text", role=role)]


SidePredicate = Callable[[dict[str, Any]], bool]


class ScriptedServer(ScriptLoop[Step]):
    """The server; use :func:`scripted_server` to get one that is closed for you."""

    def __init__(
        self,
        steps: Sequence[Step],
        *,
        side_request: SidePredicate | None = None,
        side_text: str = "ok",
        exhausted_text: str = "(script exhausted)",
    ) -> None:
        self.side_request: SidePredicate = side_request or is_side_request
        self.side_text = side_text
        self.exhausted_text = exhausted_text
        super().__init__(steps, _handler_for(self), "model-server")

    @property
    def side_requests(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.kind == "side"]


def is_side_request(body: dict[str, Any]) -> bool:
    """The default rule (see the module docstring): no tools, or a ``max_tokens`` of at most 1."""
    if not body.get("tools"):
        return True
    max_tokens = body.get("max_tokens")
    return isinstance(max_tokens, int) and max_tokens <= 1


def _handler_for(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -----------------------------------------------------------------------------

    def _read(self) -> Request:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        req = Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
        )
        return req

    def _record(self, req: Request) -> None:
        with self.owner._lock:
            self.owner.requests.append(req)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", self.owner.new_id("req"))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", self.owner.new_id("req"))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    # -- verbs --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(self._read())
        self._send_json(404, error_body(404))

    def do_HEAD(self) -> None:
        # Claude Code's connectivity probe (HEAD /api/hello) when nonessential traffic is on.
        self._record(self._read())
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def do_POST(self) -> None:
        req = self._read()
        if req.path == "/v1/messages/count_tokens":
            self._record(req)
            self._send_json(200, {"input_tokens": 100})
            return
        if req.path != "/v1/messages" or not isinstance(req.body, dict):
            self._record(req)
            self._send_json(404, error_body(404))
            return
        step: Step
        if self.owner.side_request(req.body):
            req.kind = "side"
            self._record(req)
            step = Text(self.owner.side_text)
        else:
            req.kind = "script"
            with self.owner._lock:  # take the step and record in one go, so order is kept
                index, taken = self.owner._take_step()
                req.step = index
                self.owner.requests.append(req)
            step = taken if taken is not None else Text(self.owner.exhausted_text)
        try:
            self._reply(req, step)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed, or gave up)

    do_PUT = do_POST
    do_DELETE = do_GET

    # -- replies ------------------------------------------------------------------------------

    def _reply(self, req: Request, step: Step) -> None:
        model = req.body.get("model") or "claude-test"
        if isinstance(step, Error) and step.in_stream and req.body.get("stream"):
            self._start_sse()
            self._event("message_start", {"type": "message_start", "message": self._message(model, [], None)})
            self._event("error", error_body(step.status, step.message, step.type))
            return
        if isinstance(step, Error):
            self._send_json(step.status, error_body(step.status, step.message, step.type), step.headers)
            return
        stream = bool(req.body.get("stream"))
        if isinstance(step, Hang):
            if step.started:
                self._start_sse()
                self._event("message_start", {"type": "message_start", "message": self._message(model, [], None)})
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                )
            while not (step.release.is_set() or self.owner.stopped.is_set()):
                step.release.wait(0.1)
            self.close_connection = True
            return
        blocks, stop_reason = self._blocks(step)
        if stream:
            self._stream(model, blocks, stop_reason)
        else:
            self._send_json(200, self._message(model, blocks, stop_reason, output_tokens=10))

    def _blocks(self, step: Text | ToolUse) -> tuple[list[dict[str, Any]], str]:
        if isinstance(step, Text):
            return [{"type": "text", "text": step.text}], "end_turn"
        blocks: list[dict[str, Any]] = []
        if step.text:
            blocks.append({"type": "text", "text": step.text})
        blocks.append(
            {"type": "tool_use", "id": step.id or self.owner.new_id("toolu"), "name": step.name, "input": step.input}
        )
        return blocks, "tool_use"

    def _message(
        self, model: str, content: list[dict[str, Any]], stop_reason: str | None, output_tokens: int = 1
    ) -> dict[str, Any]:
        return {
            "id": self.owner.new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 100,
                "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def _stream(self, model: str, blocks: list[dict[str, Any]], stop_reason: str) -> None:
        self._start_sse()
        self._event("message_start", {"type": "message_start", "message": self._message(model, [], None)})
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            self._event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            self._event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        )
        self._event("message_stop", {"type": "message_stop"})


@contextmanager
def scripted_server(steps: Sequence[Step], **kwargs: Any) -> Iterator[ScriptedServer]:
    """A running :class:`ScriptedServer` on 127.0.0.1 (port chosen by the OS), closed on exit."""
    server = ScriptedServer(steps, **kwargs)
    try:
        yield server
    finally:
        server.close()
