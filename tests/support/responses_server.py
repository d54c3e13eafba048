"""A scripted OpenAI Responses API server on loopback, for driving the real Codex CLI.

Test seam 2 (see DESIGN.md "Two test seams" and "Harnesses"): point the real ``codex`` binary
at this server through a custom model provider (``tests/support/codex.py`` builds the ``-c``
options and the environment) and script what "the model" answers, one step per request::

    with responses_server([ExecCommand("echo hi > a.txt"), Message("done")]) as srv:
        run codex exec ...
        assert srv.script_requests[1].function_call_outputs()[0]["output"]

Steps, consumed one per ``POST /v1/responses``, in order:

- ``Message(text)`` — one assistant ``message`` item with one ``output_text`` part (streamed as
  one ``response.output_text.delta``), then ``response.completed``: the turn ends.
- ``FunctionCall(name, arguments, call_id=None, text=None)`` — an optional assistant message,
  then one ``function_call`` item (``arguments`` is a JSON string on the wire; a dict is dumped),
  then ``response.completed``: Codex runs the tool and sends another request with a
  ``function_call_output`` item for ``call_id``. ``ExecCommand(cmd, **more)`` is the
  ``exec_command`` call Codex 0.171 declares (``{"cmd": ..., "workdir"?, "login"?, ...}``).
- ``Error(status, message=None, type=None, code=None, headers={}, body=None)`` — an HTTP error
  with the OpenAI JSON body ``{"error": {"message", "type", "param": null, "code"}}`` (401
  ``invalid_api_key``, 429 ``rate_limit_exceeded``, 500 ``server_error``, 503 overloaded, ...);
  ``body`` replaces that body with its own JSON (e.g. ChatGPT's 429 ``{"error": {"type":
  "usage_limit_reached", "resets_at": <epoch>, ...}}``).
- ``Failed(code, message)`` — a 200 stream whose ``response.created`` is followed by
  ``response.failed`` carrying ``{"error": {"code", "message"}}``, as the real API reports a
  failure that happens after the stream began.
- ``Hang(started=True)`` — hold the request open: with ``started`` the 200 headers and
  ``response.created`` are sent first (a stream that stalls), without it nothing is sent. It
  returns when ``step.release`` is set or the server closes.

When the script runs out, a request is answered ``Message(exhausted_text)`` ("(script
exhausted)") so a test fails on its assertions rather than hanging; check
``server.remaining == []`` to assert that the whole script was used.

Wire format: every success is ``text/event-stream`` with ``event: <type>`` / ``data: <json>``
records — ``response.created``, then per output item ``response.output_item.added`` (message
items with empty ``content``), for a message one ``response.output_text.delta``, then
``response.output_item.done`` (the full item), and last ``response.completed`` whose
``response`` carries ``id``, ``status: "completed"``, ``output`` and ``usage``
(``input_tokens`` 100, ``output_tokens`` 10, ``total_tokens`` 110 with the ``*_details``
objects). Every event also carries a ``sequence_number``. Every response has an
``x-request-id`` header and ``Connection: close``. ``GET``, and a ``POST`` to any other path,
answer a 404 JSON error. Every request is recorded in ``server.requests`` (method, path, query,
headers lower-cased, parsed JSON body, ``kind``: ``"script"`` or ``"other"``).

What Codex 0.171.0 was seen to send here (``codex exec --json`` with a ``wire_api="responses"``
provider whose ``base_url`` is this server's ``/v1``):

- Nothing but ``POST /v1/responses`` — one per model turn, no model-list or websocket probes.
  Headers: ``authorization: Bearer <value of env_key>``, ``accept: text/event-stream``,
  ``originator: codex_exec``, ``user-agent: codex_exec/0.171.0 (...)``, ``session-id`` /
  ``thread-id`` / ``x-client-request-id`` (all the thread id), ``x-codex-turn-metadata`` (JSON:
  ``sandbox_mode``, ``workspaces``, ``model``, ``turn_id``, ...), ``x-codex-window-id``.
- Body keys: ``model``, ``stream: true``, ``input``, ``tools``, ``tool_choice: "auto"``,
  ``parallel_tool_calls: true``, ``reasoning: {"summary": "auto"}``, ``store: false``,
  ``include: ["reasoning.encrypted_content"]``, ``prompt_cache_key`` (the thread id),
  ``client_metadata``.
- ``input``: two ``developer`` messages (the Codex system prompt, then skills), a ``user``
  message with ``<environment_context>`` (cwd, shell, sandbox), then the prompt as a ``user``
  message of ``input_text``; later requests append the assistant's items and
  ``{"type": "function_call_output", "call_id", "output": "Chunk ID: …\\nWall time: …\\n
  Process exited with code 0\\nOriginal token count: …\\nOutput:\\n…"}``.
- ``tools``: function tools ``exec_command`` (required ``cmd``; optional ``workdir``,
  ``login``, ``tty``, ``shell``, ``yield_time_ms``, ``max_output_tokens``,
  ``sandbox_permissions``, ``justification``, ``prefix_rule``), ``write_stdin``,
  ``request_user_input``, ``view_image``, ``get_goal`` / ``create_goal`` / ``update_goal``, a
  ``namespace`` ``multi_agent_v1``, and ``{"type": "web_search"}``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.scripted_http import ScriptLoop

# ---------------------------------------------------------------------------------------------
# Script steps


@dataclass(frozen=True)
class Message:
    """An assistant message of one ``output_text`` part; the turn ends."""

    text: str


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` output item (optionally after an assistant message)."""

    name: str
    arguments: dict[str, Any] | str
    call_id: str | None = None
    text: str | None = None

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


def ExecCommand(cmd: str, *, call_id: str | None = None, text: str | None = None, **more: Any) -> FunctionCall:
    """Codex's shell tool: ``exec_command`` with ``{"cmd": cmd, **more}`` (e.g. ``workdir``)."""
    return FunctionCall("exec_command", {"cmd": cmd, **more}, call_id=call_id, text=text)


@dataclass(frozen=True)
class Error:
    """An HTTP error reply with the OpenAI JSON error body."""

    status: int
    message: str | None = None
    type: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # the whole JSON body, instead of the OpenAI error body


@dataclass(frozen=True)
class Failed:
    """A stream that starts (``response.created``) and then reports ``response.failed``."""

    code: str = "server_error"
    message: str = "The server had an error processing your request."


@dataclass(frozen=True)
class Hang:
    """Hold the request open without finishing it, like a stuck stream.

    With ``started=True`` (the default) the 200 status, headers and ``response.created`` are
    sent first; with ``started=False`` nothing at all is sent. The handler returns when
    ``release`` is set or the server is closed.
    """

    started: bool = True
    release: threading.Event = field(default_factory=threading.Event, compare=False)


Step = Message | FunctionCall | Error | Failed | Hang

_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.",
    ),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again in 1s."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def error_body(
    status: int, message: str | None = None, type_: str | None = None, code: str | None = None
) -> dict[str, Any]:
    default_type, default_code, default_message = _ERRORS.get(status, ("server_error", None, f"HTTP {status}"))
    return {
        "error": {
            "message": message or default_message,
            "type": type_ or default_type,
            "param": None,
            "code": code or default_code,
        }
    }


USAGE: dict[str, Any] = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 10,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 110,
}

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
    kind: str = "other"  # "script" (a POST /v1/responses) | "other"
    step: int | None = None  # index of the consumed step; None when the script was exhausted
    at: float = field(default_factory=time.time)  # when it arrived (epoch seconds)

    @property
    def input(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict) and isinstance(self.body.get("input"), list):
            return [i for i in self.body["input"] if isinstance(i, dict)]
        return []

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def tools(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict) and isinstance(self.body.get("tools"), list):
            return [t for t in self.body["tools"] if isinstance(t, dict)]
        return []

    def tool(self, name: str) -> dict[str, Any] | None:
        """The declared tool called ``name`` (top-level tools only)."""
        return next((t for t in self.tools if t.get("name") == name), None)

    def items(self, type_: str) -> list[dict[str, Any]]:
        return [i for i in self.input if i.get("type", "message") == type_]

    def function_call_outputs(self) -> list[dict[str, Any]]:
        return self.items("function_call_output")

    def texts(self, role: str | None = None) -> list[str]:
        """The text parts of the ``message`` items in ``input`` (optionally of one ``role``)."""
        found: list[str] = []
        for item in self.items("message"):
            if role is not None and item.get("role") != role:
                continue
            content = item.get("content")
            if isinstance(content, str):
                found.append(content)
                continue
            for part in content or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    found.append(part["text"])
        return found


class ResponsesServer(ScriptLoop[Step]):
    """The server; use :func:`responses_server` to get one that is closed for you."""

    def __init__(self, steps: Sequence[Step], *, exhausted_text: str = "(script exhausted)") -> None:
        self.exhausted_text = exhausted_text
        super().__init__(steps, _handler_for(self), "responses-server")

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def _handler_for(server: ResponsesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        owner = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    owner: ResponsesServer
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
            body = None  # e.g. a compressed body (content-encoding); kept in ``raw``
        parts = urlsplit(self.path)
        return Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
        )

    def _record(self, req: Request) -> None:
        with self.owner._lock:
            self.owner.requests.append(req)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", self.owner.new_id("req"))
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
        self.send_header("x-request-id", self.owner.new_id("req"))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self._sequence = itertools.count()

    def _event(self, data: dict[str, Any]) -> None:
        data = {**data, "sequence_number": next(self._sequence)}
        self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    # -- verbs --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(self._read())
        self._send_json(404, error_body(404, "Not found", code="not_found"))

    def do_POST(self) -> None:
        req = self._read()
        if req.path != "/v1/responses" or not isinstance(req.body, dict):
            self._record(req)
            self._send_json(404, error_body(404, "Not found", code="not_found"))
            return
        req.kind = "script"
        with self.owner._lock:  # take the step and record in one go, so order is kept
            index, taken = self.owner._take_step()
            req.step = index
            self.owner.requests.append(req)
        step = taken if taken is not None else Message(self.owner.exhausted_text)
        try:
            self._reply(req, step)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed, or gave up)

    do_PUT = do_POST
    do_DELETE = do_GET

    # -- replies ------------------------------------------------------------------------------

    def _response(self, rid: str, model: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": model,
            "output": output,
            "usage": USAGE if status == "completed" else None,
            "error": None,
        }

    def _reply(self, req: Request, step: Step) -> None:
        model = str(req.body.get("model") or "scripted-model")
        if isinstance(step, Error):
            body = step.body if step.body is not None else error_body(step.status, step.message, step.type, step.code)
            self._send_json(step.status, body, step.headers)
            return
        rid = self.owner.new_id("resp")
        if isinstance(step, Hang):
            if step.started:
                self._start_sse()
                self._event({"type": "response.created", "response": self._response(rid, model, "in_progress", [])})
            while not (step.release.is_set() or self.owner.stopped.is_set()):
                step.release.wait(0.1)
            self.close_connection = True
            return
        self._start_sse()
        self._event({"type": "response.created", "response": self._response(rid, model, "in_progress", [])})
        if isinstance(step, Failed):
            failed = self._response(rid, model, "failed", [])
            failed["error"] = {"code": step.code, "message": step.message}
            self._event({"type": "response.failed", "response": failed})
            return
        output: list[dict[str, Any]] = []
        text = step.text
        if text is not None:
            output.append(self._message(text, len(output)))
        if isinstance(step, FunctionCall):
            output.append(self._function_call(step, len(output)))
        self._event({"type": "response.completed", "response": self._response(rid, model, "completed", output)})

    def _message(self, text: str, index: int) -> dict[str, Any]:
        item_id = self.owner.new_id("msg")
        item = {
            "type": "message",
            "id": item_id,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        self._event({"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}})
        self._event(
            {
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "delta": text,
            }
        )
        self._event({"type": "response.output_item.done", "output_index": index, "item": item})
        return item

    def _function_call(self, step: FunctionCall, index: int) -> dict[str, Any]:
        item = {
            "type": "function_call",
            "id": self.owner.new_id("fc"),
            "status": "completed",
            "call_id": step.call_id or self.owner.new_id("call"),
            "name": step.name,
            "arguments": step.arguments_json,
        }
        self._event({"type": "response.output_item.added", "output_index": index, "item": item})
        self._event({"type": "response.output_item.done", "output_index": index, "item": item})
        return item


@contextmanager
def responses_server(steps: Sequence[Step], **kwargs: Any) -> Iterator[ResponsesServer]:
    """A running :class:`ResponsesServer` on 127.0.0.1 (port chosen by the OS), closed on exit."""
    server = ResponsesServer(steps, **kwargs)
    try:
        yield server
    finally:
        server.close()
