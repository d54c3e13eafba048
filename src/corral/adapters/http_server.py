"""An ASGI application served by uvicorn on a socket of its own, in a thread with its own event loop.

The daemon serves two (the agents' MCP endpoint, the dashboard), each the same way: the socket is
bound first (a free port unless one is given, ``TCP_NODELAY`` so a response's last small write
never waits for the client's delayed acknowledgement), the application is made knowing its port,
and :func:`serve` returns once the server answers, or raises ``CorralError`` with the caller's
code when it did not start within 30 s. :attr:`Served.stop` ends it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any, Literal

from msgspec import Struct

from corral.adapters.loopback import LOOPBACK
from corral.errors import CorralError

#: A connection that has not sent its first request's headers by then is closed: a client that
#: opens connections and says nothing (or says it slowly) must not hold the daemon's descriptors.
HEADER_SECONDS = 10.0
#: Connections one server holds at once; one more is closed as soon as it is accepted, so no local
#: process can take the daemon's descriptors from it (browsers hold six per host, agents one each).
MAX_CONNECTIONS = 512


def _protocol() -> type:
    """uvicorn's h11 protocol with :data:`HEADER_SECONDS` and :data:`MAX_CONNECTIONS`."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Bounded(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > MAX_CONNECTIONS:
                transport.close()
                return
            self._header_timer = self.loop.call_later(HEADER_SECONDS, self._no_headers)

        def _no_headers(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

    return Bounded


def allowed_hosts(host: str, port: int) -> set[str]:
    """The Host headers this server answers: the address bound and, on loopback, its loopback names.
    A wildcard bind (``0.0.0.0``, ``::``) answers this machine's names too. An IPv6 address is
    bracketed, as a browser sends it."""
    names = {host.strip("[]")}
    if host in LOOPBACK:
        names |= {"127.0.0.1", "localhost"}
    if host in ("0.0.0.0", "::", ""):
        names |= {"127.0.0.1", "localhost", socket.gethostname(), socket.getfqdn()}
    return {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names if n}


class Served(Struct):
    base: str  # http://HOST:PORT (an IPv6 host in brackets)
    port: int
    stop: Callable[[], None]


def serve(
    make_app: Callable[[int], Any],
    host: str,
    *,
    name: str,
    what: str,
    code: str,
    port: int = 0,
    lifespan: Literal["on", "off"] = "off",
    graceful_seconds: int = 1,
    force_exit: bool = False,
) -> Served:
    """Serve ``make_app(port)`` on ``host`` in a thread named ``name``; ``what`` names it in the error
    (code ``code``) when it does not start. ``force_exit``: stop without waiting for open requests
    (event streams never end by themselves)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit the listener's option.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    bound = int(sock.getsockname()[1])
    config = uvicorn.Config(
        make_app(bound),
        log_level="warning",
        access_log=False,
        lifespan=lifespan,
        timeout_graceful_shutdown=graceful_seconds,
        http=_protocol(),
    )
    server = uvicorn.Server(config)
    ready = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            asyncio.set_event_loop(loop)

            async def main() -> None:
                serving = asyncio.ensure_future(server.serve(sockets=[sock]))
                while not server.started and not serving.done():
                    await asyncio.sleep(0.01)
                ready.set()
                await serving

            loop.run_until_complete(main())
        except BaseException as exc:  # reported to serve(), which raises it in the caller's thread
            failed.append(exc)
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    ready.wait(30)
    if failed or not server.started:
        sock.close()
        why = f"{type(failed[0]).__name__}: {failed[0]}" if failed else "it did not start within 30 s"
        raise CorralError(f"{what} did not start: {why}", code=code)

    def stop() -> None:
        server.should_exit = True
        server.force_exit = force_exit
        thread.join(10)
        sock.close()

    shown = f"[{host}]" if ":" in host else host
    return Served(f"http://{shown}:{bound}", bound, stop)
