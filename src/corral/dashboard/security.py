"""The dashboard's guard: who may talk to it and what a response may do in the browser.

- **The secret.** One per ``CORRAL_HOME`` and user, made once (``daemon/dashboard.secret``, 0600).
  ``corral dashboard`` prints the URL with it (``/<root>/?token=…``); the first request that
  carries it gets the session cookie and a redirect to ``/<root>/``, so the token leaves the
  address bar and the history (as Jupyter's token does).
- **The root.** Every page lives under a path derived from the secret (``Keys.root``), and the
  cookie is scoped to it (``Path=/<root>/``). Cookies do not tell ports apart: without it, any
  server on 127.0.0.1 — a preview server an agent started, on another port — would receive the
  cookie from the person's browser. A path nobody else knows is never asked for elsewhere.
- **The cookie** is ``HttpOnly; SameSite=Strict``: a page of another site cannot send it, a script
  cannot read it. Its value is its issue time with an HMAC of it (valid :data:`SESSION_DAYS`);
  the CSRF token is an HMAC of the secret too, so neither needs a session table and both outlive
  a daemon restart. Its name carries the home's hash, so two homes' dashboards never mix.
- **Every state-changing request** (every method but GET and HEAD) must carry the CSRF token (the
  ``X-Corral-CSRF`` header htmx sends from the page, or the ``csrf`` form field) and an ``Origin``
  that is this server's own; its body is at most :data:`MAX_BODY` bytes.
- **The Host header** must name the address served (a page on another name that resolves to
  127.0.0.1 — DNS rebinding — is refused 403).
- **Every response** carries a strict Content-Security-Policy (no inline script or style),
  ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer`` and no caching. WebSocket
  requests are refused: the dashboard has none.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from corral.adapters.http_server import allowed_hosts
from corral.engine.api import daemons
from corral.errors import CorralError

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'self'; form-action 'self'"
)
#: How long a session cookie holds before the URL's token is needed again.
SESSION_DAYS = 30
#: The largest body a state-changing request may carry (a feedback text is far smaller).
MAX_BODY = 1 << 20
CSRF_HEADER = "x-corral-csrf"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD"})

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
        pass
    if path.exists():  # absent a moment ago and linked in since by another process, or not whole
        try:
            return _read(path)
        except FileNotFoundError:
            raise CorralError(
                f"The dashboard's secret {path} is not a secret corral made (empty or cut).",
                code="dashboard-secret-unreadable",
                hint=f"Remove it (rm {path}); the next `corral dashboard` makes a new one.",
            ) from None
    from corral.adapters.files import create_once

    create_once(path, (secrets.token_urlsafe(32) + "\n").encode("ascii"))  # another's, if it linked first
    return _read(path)


def signed_url(base: str, home: Path) -> str:
    """The URL a person opens: the server's ``base``, the secret root, the token to trade for a cookie."""
    token = secret(home)
    return f"{base}{Keys(home, token).prefix}/?token={token}"


def open_file(url: str, home: Path) -> Path:
    """A private page that sends the browser on to ``url``: opening it keeps the token out of the
    browser's command line, which other users of the machine can read (as Jupyter does)."""
    from corral.adapters.files import write_atomic
    from corral.dashboard.html import esc

    path = daemons.daemon_dir(home) / "dashboard-open.html"
    refresh = f'<meta http-equiv="refresh" content="0;url={esc(url)}">'
    page = f"<!doctype html><meta charset=utf-8>{refresh}<title>corral</title>"
    write_atomic(path, page.encode("utf-8"))
    os.chmod(path, 0o600)
    return path


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii").strip()
    if len(text) < 32:
        raise FileNotFoundError(path)  # an empty or cut file: not a secret (made again only if absent)
    return text


class Keys:
    """What the secret gives: the root every page lives under, the cookie's name and value, the CSRF token."""

    def __init__(self, home: Path, value: str, clock: Callable[[], float] = time.time) -> None:
        self._secret = value.encode()
        self.clock = clock
        self.cookie_name = "corral_" + hashlib.sha256(str(home).encode()).hexdigest()[:10]
        self.root = "d" + self._mac("root")[:24]
        self.csrf = self._mac("csrf")

    def _mac(self, what: str) -> str:
        return hmac.new(self._secret, what.encode(), hashlib.sha256).hexdigest()

    @property
    def prefix(self) -> str:
        """The path every page is under: ``/<root>``."""
        return f"/{self.root}"

    def cookie_value(self) -> str:
        issued = str(int(self.clock()))
        return f"{issued}.{self._mac('session:' + issued)}"

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._secret)

    def cookie_ok(self, given: str | None) -> bool:
        issued, _, mac = (given or "").partition(".")
        if not issued.isdigit() or not hmac.compare_digest(mac.encode(), self._mac("session:" + issued).encode()):
            return False
        return 0 <= self.clock() - int(issued) <= SESSION_DAYS * 86400

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


def cookie_header(keys: Keys) -> bytes:
    days = SESSION_DAYS * 86400
    value = f"{keys.cookie_name}={keys.cookie_value()}"
    return f"{value}; HttpOnly; SameSite=Strict; Path={keys.prefix}/; Max-Age={days}".encode()


def _cookies(raw: str, name: str) -> list[str]:
    """Every value the request sends under ``name`` (a page elsewhere may have added its own)."""
    found = []
    for part in raw.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            found.append(value)
    return found


class Guard:
    """ASGI middleware: Host, then the token exchange or the cookie, then CSRF and Origin, for every request."""

    def __init__(self, app: Any, keys: Keys, host: str, port: Callable[[], int]) -> None:
        self.app = app
        self.keys = keys
        self.host = host
        self.port = port

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # the dashboard speaks none
            return
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
        path = scope.get("path", "")
        prefix = self.keys.prefix
        if path != prefix and not path.startswith(prefix + "/"):
            await deny(send, 404, "Nothing here. Open the URL `corral dashboard` prints.")
            return
        inner = path[len(prefix) :] or "/"
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        token = query.get("token", [None])[0]
        if token is not None and scope["method"] in SAFE_METHODS:
            if not self.keys.token_ok(token):
                await deny(send, 401, "That token is not this dashboard's. Run `corral dashboard` for its URL.")
                return
            # Always to the root: a path of the request's choosing would make this an open redirect.
            location = f"{prefix}/"
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [*HEADERS, (b"location", location.encode()), (b"set-cookie", cookie_header(self.keys))],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        public = inner.startswith("/static/") and scope["method"] in SAFE_METHODS
        sent = _cookies(headers.get("cookie", ""), self.keys.cookie_name)
        if not public and not any(self.keys.cookie_ok(value) for value in sent):
            await deny(send, 401, "Not signed in. Open the URL `corral dashboard` prints (it carries a token).")
            return
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is None or origin.removeprefix("http://") not in hosts:
                await deny(send, 403, "Refused: this request did not come from the dashboard's own pages (Origin).")
                return
            body = await _body(headers, receive)
            if body is None:
                await deny(send, 413, f"Refused: a request body is at most {MAX_BODY // 1024} KiB.")
                return
            given = headers.get(CSRF_HEADER) or _form_csrf(headers, body)
            if not self.keys.csrf_ok(given):
                await deny(send, 403, "Refused: the request carries no valid CSRF token.")
                return
            receive = _replay(body, receive)

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        scope = {**scope, "path": inner, "raw_path": inner.encode("latin-1", "replace")}
        await self.app(scope, receive, secured)


async def _body(headers: dict[str, str], receive: Any) -> bytes | None:
    """The whole request body, or None once it is over :data:`MAX_BODY` (read no further)."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def _form_csrf(headers: dict[str, str], body: bytes) -> str | None:
    """The ``csrf`` field of a urlencoded form body."""
    if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    return parse_qs(body.decode("latin-1")).get(CSRF_FIELD, [None])[0]


def _replay(body: bytes, receive: Any) -> Any:
    """``receive`` for the app: the body already read, then whatever the connection says next."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()
        return message

    return replay


async def deny(send: Any, status: int, message: str) -> None:
    from corral.dashboard.html import esc

    body = (f"<!doctype html><meta charset=utf-8><title>corral</title><p class=refused>{esc(message)}</p>").encode()
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
