"""A tiny MCP server on loopback (streamable HTTP), for checking how a real harness reaches one.

The official ``mcp`` SDK's low-level :class:`~mcp.server.lowlevel.Server` with one tool (``ping``
unless told otherwise), served by uvicorn in a thread on ``127.0.0.1:<free port>``::

    with mcp_stub() as stub:
        run the harness with stub.url ...
        assert stub.calls[0].authorization == f"Bearer {token}"

Every tool call is recorded (:class:`Call`: the tool's name, its arguments, the
``Authorization`` header of the HTTP request that carried it, all headers lower-cased) and
answered with ``result_text`` (``"pong"``); ``on_call`` runs at the call, while the client
waits for the answer (e.g. to look at the calling process). Every HTTP request is recorded
too (``stub.requests``: method, path, headers), whatever the MCP layer makes of it. With
``token`` set, a request without ``Authorization: Bearer <token>`` is answered 401 before
the MCP layer sees it, as corral's endpoint does.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    """One ``tools/call`` as the stub received it."""

    name: str
    arguments: dict[str, Any]
    authorization: str | None
    headers: dict[str, str]
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]


@dataclass(frozen=True)
class StubTool:
    """A tool the stub declares: every call of it answers ``result_text``."""

    name: str
    description: str = "Answer pong."
    read_only: bool | None = None  # its ``readOnlyHint`` annotation, when set


class McpStub:
    """The server; use :func:`mcp_stub` to get one that is stopped for you."""

    def __init__(
        self,
        tools: Sequence[StubTool] = (StubTool("ping"),),
        *,
        result_text: str = "pong",
        token: str | None = None,
        on_call: Callable[[Call], None] | None = None,
        name: str = "stub",
    ) -> None:
        self.tools = list(tools)
        self.result_text = result_text
        self.token = token
        self.on_call = on_call
        self.calls: list[Call] = []
        self.requests: list[HttpRequest] = []
        self.hook_errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._server = self._uvicorn(self._app(name))
        self._thread = threading.Thread(target=self._serve, name="mcp-stub", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the MCP stub did not start")
            time.sleep(0.02)

    def tool_calls(self, name: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.name == name]

    # -- plumbing -----------------------------------------------------------------------------

    def _app(self, name: str) -> Any:
        from mcp import types
        from mcp.server.lowlevel import Server

        stub = self

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(
                tools=[
                    types.Tool(
                        name=t.name,
                        description=t.description,
                        input_schema={"type": "object", "properties": {}},
                        annotations=None if t.read_only is None else types.ToolAnnotations(read_only_hint=t.read_only),
                    )
                    for t in stub.tools
                ]
            )

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            request = getattr(ctx, "request", None)
            headers = {k.lower(): v for k, v in request.headers.items()} if request is not None else {}
            call = Call(params.name, dict(params.arguments or {}), headers.get("authorization"), headers)
            with stub._lock:
                stub.calls.append(call)
            if stub.on_call is not None:
                try:
                    stub.on_call(call)
                except BaseException as exc:  # recorded for the test; the client still gets its answer
                    stub.hook_errors.append(exc)
            return types.CallToolResult(content=[types.TextContent(type="text", text=stub.result_text)])

        server: Any = Server(name, on_list_tools=list_tools, on_call_tool=call_tool)
        app = server.streamable_http_app()

        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
                with stub._lock:
                    stub.requests.append(HttpRequest(scope["method"], scope["path"], headers))
                if stub.token is not None and headers.get("authorization") != f"Bearer {stub.token}":
                    await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
                    await send({"type": "http.response.body", "body": b""})
                    return
            await app(scope, receive, send)

        return recorded

    def _uvicorn(self, app: Any) -> Any:
        import uvicorn

        config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
        return uvicorn.Server(config)

    def _serve(self) -> None:
        self._server.run(sockets=[self._sock])

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@contextmanager
def mcp_stub(tools: Sequence[StubTool] = (StubTool("ping"),), **kwargs: Any) -> Iterator[McpStub]:
    """A running :class:`McpStub` on 127.0.0.1 (port chosen by the OS), stopped on exit."""
    stub = McpStub(tools, **kwargs)
    try:
        yield stub
    finally:
        stub.close()
