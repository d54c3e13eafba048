"""The task agents' door: MCP over streamable HTTP on loopback, served by the daemon, the caller known by its token.

Every turn corral launches gets a bearer token (the engine's ``find_grant``);
its grant names the caller's task and project, and nothing a request says can change that:
there is one endpoint, ``/mcp``, and no task in the URL. A request without a live token is
answered 401 before the SDK sees it; each tool call checks the token again, so a turn that
ended mid-session loses its tools at once.

On a worker host this is that host's daemon, serving the agents of the turns its worker runs: the
grant names the worker's clone and carries the turn's fence, so the agent's writes reach the shared
store only while its worker's lease holds (:func:`corral.engine.operations.turn_fence.fenced`).

Only loopback is served, and a request whose ``Host`` is not the loopback address and port
served here, or whose ``Origin`` (when a browser sends one) is not that same origin, is
refused 403 — a web page cannot reach the daemon by DNS rebinding.

The server runs in a thread of the daemon with its own event loop (:func:`start`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.http_server import allowed_hosts
from corral.engine.api import LiveCache, fenced, find_grant, gates
from corral.mcp.calling import Calling
from corral.mcp.server import Projects, build

HOST = "127.0.0.1"
PATH = "/mcp"


class Served(Struct):
    url: str
    stop: Callable[[], None]


def bearer(headers: Any) -> str | None:
    value = headers.get("authorization") if headers is not None else None
    if not isinstance(value, str) or not value.lower().startswith("bearer "):
        return None
    return value[7:].strip() or None


def _allowed_hosts(port: int) -> set[str]:
    return allowed_hosts(HOST, port)


def _allowed_origins(port: int) -> set[str]:
    return {f"http://{h}" for h in _allowed_hosts(port)}


class Guard:
    """ASGI middleware: loopback Host and Origin only, and a token corral minted."""

    def __init__(self, app: Any, home: Path, port: Callable[[], int]) -> None:
        self.app = app
        self.home = home
        self.port = port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        port = self.port()
        origin = headers.get("origin")
        if headers.get("host") not in _allowed_hosts(port) or (
            origin is not None and origin not in _allowed_origins(port)
        ):
            await _deny(
                send, 403, "forbidden-origin", "corral's MCP endpoint answers loopback requests from itself only."
            )
            return
        token = bearer(headers)
        grant = find_grant(self.home, token) if token is not None else None
        if grant is None:
            await _deny(send, 401, "agent-token-invalid", "A bearer token corral minted for a running turn is needed.")
            return
        path = scope.get("path", "")
        if path != PATH:
            # ``/mcp/<task>``: a caller naming the task it acts as. Its task is the token's, never the
            # URL's: naming another is refused outright; naming its own is the one endpoint.
            named = path[len(PATH) + 1 :].split("/", 1)[0] if path.startswith(PATH + "/") else None
            if named is None:
                await _deny(send, 404, "not-found", f"corral serves MCP at {PATH} only.")
                return
            if named not in (grant.task_id, grant.task_ref):
                await _deny(
                    send, 403, "agent-identity-mismatch", f"This token is {grant.task_ref}'s; it cannot act as {named}."
                )
                return
            scope = {**scope, "path": PATH, "raw_path": PATH.encode()}
        await self.app(scope, receive, send)


async def _deny(send: Any, status: int, code: str, message: str) -> None:
    import json

    body = json.dumps({"error": {"code": code, "message": message, "hint": None}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="corral"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def app(home: Path, port: Callable[[], int], log: logging.Logger | None = None) -> Any:
    """The ASGI application: corral's tools for the agent each request's token names.

    The SDK's own application is built on the first request that passes the :class:`Guard`
    (:class:`Deferred`), not when the daemon starts: loading the SDK costs about half a second of
    CPU (its protocol models), which a daemon whose agents never call a tool never pays, and which a
    command waiting for the daemon's endpoint to be served no longer waits on.
    """

    def sdk_app() -> Any:
        from mcp.server.transport_security import TransportSecuritySettings

        projects = Projects()
        live = LiveCache()

        def resolve(ctx: Any) -> Calling:
            request = getattr(ctx, "request", None)
            grant = gates.grant_of(home, bearer(getattr(request, "headers", None)))
            project = projects.get(grant.repo, grant.state)
            caller = gates.agent(project, grant)
            # A worker's turn: every write its agent makes holds the turn's fence (fenced).
            return Calling(
                lambda: fenced(projects.get(grant.repo, grant.state), caller), caller, settles=False, live=live
            )

        server = build(resolve)
        p = port()
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted(_allowed_hosts(p)),
            allowed_origins=sorted(_allowed_origins(p)),
        )
        return server.streamable_http_app(streamable_http_path=PATH, host=HOST, transport_security=security)

    return Guard(Deferred(sdk_app), home, port)


class Deferred:
    """ASGI: an application built by ``make`` on its first request, its lifespan entered then.

    ``make`` runs in a worker thread (the import does not hold the event loop: requests the
    :class:`Guard` refuses are answered meanwhile), once, however many requests arrive together. The
    built application's lifespan (the SDK's session manager) is held by a task of its own, entered
    before the first request is passed on and left when the server shuts down. A ``make`` that
    fails fails that request, and the next request tries again.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.built: Any = None
        self._lock: asyncio.Lock | None = None
        self._closing: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        built = self.built if self.built is not None else await self._build()
        await built(scope, receive, send)

    async def _build(self) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.built is None:
                built = await asyncio.to_thread(self.make)
                entered, closing = asyncio.Event(), asyncio.Event()
                holder = asyncio.create_task(self._hold(built, entered, closing))
                waiting = asyncio.create_task(entered.wait())
                await asyncio.wait({holder, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if not entered.is_set():
                    waiting.cancel()
                    holder.result()  # its lifespan failed: that failure is this request's
                self._holder, self._closing, self.built = holder, closing, built
        return self.built

    @staticmethod
    async def _hold(built: Any, entered: asyncio.Event, closing: asyncio.Event) -> None:
        async with built.router.lifespan_context(built):
            entered.set()
            await closing.wait()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._holder is not None and self._closing is not None:
                    self._closing.set()
                    await asyncio.gather(self._holder, return_exceptions=True)
                await send({"type": "lifespan.shutdown.complete"})
                return


def start(home: Path, log: logging.Logger | None = None) -> Served:
    """Serve the agents' door on a free loopback port in a thread; returns once it answers."""
    from corral.adapters.http_server import serve

    served = serve(
        lambda port: app(home, lambda: port, log),
        HOST,
        name="corral-mcp",
        what="The MCP endpoint",
        code="mcp-unavailable",
        lifespan="on",
        graceful_seconds=2,
    )
    return Served(served.base + PATH, served.stop)
