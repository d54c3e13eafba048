"""The MCP SDK is loaded on the endpoint's first request that passes the guard, not when the daemon starts.

Loading it costs about half a second of CPU; a daemon whose agents call no tool never pays it, and a
command that waits for the daemon's endpoint does not wait on it. The door's own tests
(test_http_door.py, test_agent_door.py) show real tool calls through it once it is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from corral.mcp.http import Deferred

SERVED = r"""
import json, sys, urllib.error, urllib.request
from pathlib import Path
from corral.mcp import http

def sdk_loaded():
    return sorted(m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "mcp_types")))

served = http.start(Path(sys.argv[1]))
before = sdk_loaded()
host = served.url.split("/")[2]
answers = []
for headers in ({"Host": host}, {"Host": host, "Authorization": "Bearer not-a-token"}, {"Host": "evil.example"}):
    request = urllib.request.Request(served.url, data=b"{}", headers=headers, method="POST")
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as exc:
        answers.append(exc.code)
served.stop()
print(json.dumps({"before": before, "after": sdk_loaded(), "answers": answers}))
"""


def test_the_endpoint_is_served_and_refuses_strangers_without_loading_the_sdk(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", SERVED, str(home)], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["answers"] == [401, 401, 403]
    assert report["before"] == [] and report["after"] == [], report


class Built:
    """What a ``make`` built and how its lifespan went."""

    def __init__(self, fail: int = 0) -> None:
        self.made = 0
        self.fail = fail
        self.entered = 0
        self.left = 0

    def make(self) -> Any:
        self.made += 1
        if self.made <= self.fail:
            raise RuntimeError("the SDK could not load")

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self.entered += 1
            try:
                yield
            finally:
                self.left += 1

        async def hello(_request: Any) -> PlainTextResponse:
            return PlainTextResponse(f"hello, entered {self.entered}")

        return Starlette(routes=[Route("/mcp", hello, methods=["POST"])], lifespan=lifespan)


async def request(app: Deferred) -> tuple[int, str]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], "query_string": b"", "root_path": ""}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()


async def lifespan(app: Deferred, steps: asyncio.Queue[dict[str, Any]], answers: list[str]) -> None:
    async def send(message: dict[str, Any]) -> None:
        answers.append(message["type"])

    await app({"type": "lifespan"}, steps.get, send)


def test_concurrent_first_requests_build_once_and_the_lifespan_is_left_at_shutdown() -> None:
    built = Built()

    async def scenario() -> list[Any]:
        app = Deferred(built.make)
        steps: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        answers: list[str] = []
        server = asyncio.create_task(lifespan(app, steps, answers))
        await steps.put({"type": "lifespan.startup"})
        await asyncio.sleep(0)
        served = await asyncio.gather(*(request(app) for _ in range(5)))
        await steps.put({"type": "lifespan.shutdown"})
        await server
        return [served, answers]

    served, answers = asyncio.run(scenario())
    assert served == [(200, "hello, entered 1")] * 5
    assert (built.made, built.entered, built.left) == (1, 1, 1)
    assert answers == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_a_build_that_fails_fails_its_request_and_the_next_one_builds_again() -> None:
    built = Built(fail=1)

    async def scenario() -> tuple[int, str]:
        app = Deferred(built.make)
        with pytest.raises(RuntimeError, match="could not load"):
            await request(app)
        return await request(app)

    assert asyncio.run(scenario()) == (200, "hello, entered 1")
    assert (built.made, built.entered) == (2, 1)


def test_a_shutdown_before_any_request_builds_nothing() -> None:
    built = Built()

    async def scenario() -> list[str]:
        app = Deferred(built.make)
        steps: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        answers: list[str] = []
        await steps.put({"type": "lifespan.startup"})
        await steps.put({"type": "lifespan.shutdown"})
        await lifespan(app, steps, answers)
        return answers

    assert asyncio.run(scenario()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert built.made == 0
