"""The dashboard's fixtures: two repositories under one CORRAL_HOME, the fake agent, the daemon that
``corral dashboard`` starts (stopped after the test), and Debian's chromium driven by Playwright."""

from __future__ import annotations

import http.client
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.conftest import CLI, FakeAgent, git

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
]


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text(f"# {path.name}\n")  # another first commit: another repository
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    return path


class Dash:
    """The dashboard a test opened: its URL with the token, its base, the two repositories' CLIs."""

    def __init__(self, url: str, a: CLI, b: CLI) -> None:
        self.url = url
        self.base = url.split("/?token=", 1)[0]  # the server and the dashboard's secret root
        self.token = url.split("?token=", 1)[1]
        self.a, self.b = a, b
        parts = urlsplit(self.base)
        self.host, self.port = parts.hostname or "", parts.port or 0
        self.root = parts.path  # /<root>: every page lives under it
        self.server = f"{parts.scheme}://{parts.netloc}"

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: str | None = None,
        outside: bool = False,
    ) -> http.client.HTTPResponse:
        """``path`` under the dashboard's root (``outside``: as given, from the server's top)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        sent = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        target = path if outside else self.root + path
        conn.request(method, target, body=body.encode() if body is not None else None, headers=sent)
        response = conn.getresponse()
        response.read()
        conn.close()
        return response

    def cookie(self) -> str:
        """``name=value`` of the session cookie, from the token exchange."""
        response = self.request("GET", f"/?token={self.token}")
        assert response.status == 303
        return response.getheader("set-cookie", "").split(";", 1)[0]

    def task_path(self, cli: CLI, ref: str) -> str:
        """The task page's path: /p/<state directory>/t/<task id>."""
        state = Path(cli.json("paths")["paths"]["state"]).name
        return f"/p/{state}/t/{cli.json('show', ref)['task']['id']}"


@pytest.fixture
def two(tmp_path: Path, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CLI, CLI]]:
    """Two repositories (alpha, beta) under the test's CORRAL_HOME, their claude the fake agent."""
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    a = CLI(make_repo(tmp_path / "alpha"))
    b = CLI(make_repo(tmp_path / "beta"))
    yield a, b
    a("daemon", "stop")


@pytest.fixture
def dash(two: tuple[CLI, CLI]) -> Dash:
    a, b = two
    a.ok("create", "Alpha task", "--ref", "alpha-one")
    b.ok("create", "Beta task", "--ref", "beta-one")
    doc = a.json("dashboard")
    return Dash(doc["url"], a, b)


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Any]:
    # Per module, never per session: while Playwright's sync API is open it keeps an event loop
    # running in this thread, and every later test of the worker that runs asyncio would fail.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


#: The zone of a browser that is not the server's (a half-hour offset, no summer time): times shown in it.
ZONE = "Asia/Kolkata"


@pytest.fixture
def browser(playwright_driver: Any) -> Iterator[Any]:
    """A fresh chromium profile: a page whose dialogs (an alert) are recorded, never answered."""
    yield from _browser(playwright_driver)


@pytest.fixture
def zoned_browser(playwright_driver: Any) -> Iterator[Any]:
    """A fresh chromium profile whose person lives in :data:`ZONE`."""
    yield from _browser(playwright_driver, timezone_id=ZONE)


def _browser(playwright_driver: Any, **options: Any) -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix="corral-chromium-") as profile:
        context = playwright_driver.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, **options
        )
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


class Watched:
    """A page, and every dialog, console error and refused request it met."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.console: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))


@pytest.fixture
def page(browser: Any) -> Watched:
    return Watched(browser.pages[0] if browser.pages else browser.new_page())


@pytest.fixture
def zoned_page(zoned_browser: Any) -> Watched:
    return Watched(zoned_browser.pages[0] if zoned_browser.pages else zoned_browser.new_page())


def show(cli: CLI, ref: str) -> dict[str, Any]:
    return json.loads(cli.ok("show", ref, "--json").stdout)
