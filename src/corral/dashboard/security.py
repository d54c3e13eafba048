"""The dashboard's guard: who may talk to it and what a response may do in the browser.

- **The secret.** One per ``CORRAL_HOME`` and user, made once (``daemon/dashboard.secret``, 0600).
  ``corral dashboard`` prints the URL with it (``/?token=…``); the first request that carries it
  gets the session cookie and a redirect to the same URL without it, so the token leaves the
  address bar and the history (as Jupyter's token does).
- **The cookie** is ``HttpOnly; SameSite=Strict; Path=/``: a page of another site cannot send it,
  a script cannot read it. Its value and the CSRF token are HMACs of the secret, so they outlive a
  daemon restart and need no session table. Its name carries the home's hash: cookies do not
  tell ports apart, and two homes' dashboards must not overwrite each other's.
- **Every state-changing request** (every method but GET and HEAD) must carry the CSRF token (the
  ``X-Corral-CSRF`` header htmx sends from the page, or the ``csrf`` form field) and an ``Origin``
  that is this server's own.
- **The Host header** must name the address served (a page on another name that resolves to
  127.0.0.1 — DNS rebinding — is refused 403).
- **Every response** carries a strict Content-Security-Policy (no inline script or style),
  ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer`` and no caching.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from corral.engine import daemons
from corral.errors import CorralError

CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
CSRF_HEADER = "x-corral-csrf"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def secret_file(home: Path) -> Path:
    return daemons.daemon_dir(home) / "dashboard.secret"


def secret(home: Path) -> str:
    """The home's dashboard secret, made once (0600); the same for the CLI and the daemon.

    Made whole beside its place and linked in (never replacing one there), so a crash leaves
    either no secret or a whole one, and two processes making it at once agree on the first.
    """
    path = secret_file(home)
    try:
        return _read(path)
    except FileNotFoundError:
        if path.exists():
            raise CorralError(
                f"The dashboard's secret {path} is not a secret corral made (empty or cut).",
                code="dashboard-secret-unreadable",
                hint=f"Remove it (rm {path}); the next `corral dashboard` makes a new one.",
            ) from None
    from corral.adapters.files import fsync_dir
    from corral.engine.paths import make_private_dir

    make_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process made it first: theirs is the secret
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return _read(path)


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 32:
        raise FileNotFoundError(path)  # an empty or cut file: not a secret (made again only if absent)
    return text


class Keys:
    """What the secret gives: the cookie's name and value, the CSRF token."""

    def __init__(self, home: Path, value: str) -> None:
        self._secret = value.encode()
        self.cookie_name = "corral_" + hashlib.sha256(str(home).encode()).hexdigest()[:10]
        self.cookie_value = self._mac("session")
        self.csrf = self._mac("csrf")

    def _mac(self, what: str) -> str:
        return hmac.new(self._secret, what.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._secret)

    def cookie_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.cookie_value.encode())

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


def allowed_hosts(host: str, port: int) -> set[str]:
    """The Host headers this server answers: the address bound and, on loopback, its loopback names.
    A wildcard bind (``0.0.0.0``, ``::``) answers this machine's names too."""
    names = {host}
    if host in LOOPBACK:
        names |= {"127.0.0.1", "localhost"}
    if host in ("0.0.0.0", "::", ""):
        names |= {"127.0.0.1", "localhost", socket.gethostname(), socket.getfqdn()}
    return {f"{n}:{port}" for n in names if n}


def cookie_header(keys: Keys) -> bytes:
    return f"{keys.cookie_name}={keys.cookie_value}; HttpOnly; SameSite=Strict; Path=/".encode()


def _cookies(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in raw.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep:
            out.setdefault(name, value)
    return out


class Guard:
    """ASGI middleware: Host, then the token exchange or the cookie, then CSRF and Origin, for every request."""

    def __init__(self, app: Any, keys: Keys, host: str, port: Callable[[], int]) -> None:
        self.app = app
        self.keys = keys
        self.host = host
        self.port = port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
        port = self.port()
        hosts = allowed_hosts(self.host, port)
        if headers.get("host") not in hosts:
            await deny(send, 403, "This dashboard answers requests to its own address only.")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = query.get("token", [None])[0]
        if token is not None and scope["method"] in SAFE_METHODS:
            if not self.keys.token_ok(token):
                await deny(send, 401, "That token is not this dashboard's. Run `corral dashboard` for its URL.")
                return
            rest = {k: v for k, v in query.items() if k != "token"}
            location = scope.get("path", "/") + (f"?{urlencode(rest, doseq=True)}" if rest else "")
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [*HEADERS, (b"location", location.encode()), (b"set-cookie", cookie_header(self.keys))],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        public = scope.get("path", "").startswith("/static/") and scope["method"] in SAFE_METHODS
        if not public and not self.keys.cookie_ok(_cookies(headers.get("cookie", "")).get(self.keys.cookie_name)):
            await deny(send, 401, "Not signed in. Open the URL `corral dashboard` prints (it carries a token).")
            return
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is None or origin.removeprefix("http://") not in hosts:
                await deny(send, 403, "Refused: this request did not come from the dashboard's own pages (Origin).")
                return
            given = headers.get(CSRF_HEADER)
            if given is None:
                given, receive = await _form_csrf(headers, receive)
            if not self.keys.csrf_ok(given):
                await deny(send, 403, "Refused: the request carries no valid CSRF token.")
                return

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        await self.app(scope, receive, secured)


async def _form_csrf(headers: dict[str, str], receive: Any) -> tuple[str | None, Any]:
    """The ``csrf`` field of a urlencoded form body (read whole, then replayed to the app)."""
    if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None, receive
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
        if sum(map(len, chunks)) > 1 << 20:
            break
    body = b"".join(chunks)
    given = parse_qs(body.decode("latin-1")).get(CSRF_FIELD, [None])[0]
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return given, replay


async def deny(send: Any, status: int, message: str) -> None:
    from corral.dashboard.html import esc

    body = (
        "<!doctype html><meta charset=utf-8><title>corral</title>"
        f"<link rel=stylesheet href=/static/dashboard.css><p class=refused>{esc(message)}</p>"
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *HEADERS,
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
