"""The dashboard: a Starlette app the daemon serves on loopback, in a thread with its own event loop.

Pages are server-rendered HTML (:mod:`corral.dashboard.board_page`, :mod:`corral.dashboard.task_page`)
with htmx for the buttons (vendored under ``static/``, pinned by its file name) and update by
server-sent events, swapped in by ``static/dashboard.js`` (one stream per page, closed while the
page is hidden):

- ``GET /`` — the board of every project under ``CORRAL_HOME`` (``board.board``, not settled: the
  daemon's ticks keep its projects settled); ``GET /events/board`` sends it again whenever it
  changes (a project's database or the live line of a working task).
- ``GET /p/<state>/t/<task>`` — one task (``queries.show_task``), its diff (``tasks.diff``, its tip recorded
  as shown and carried by the page's Accept) and its latest turn's output; ``GET /events/p/<state>/t/<task>``
  sends its parts (head, actions, details) and the diff when they change, each new output line, and
  each phase of an accept started here.
- ``POST /p/<state>/t/<task>/<action>`` — start, unblock (with protected-file decisions), resume,
  ask, stop, accept, reject, close, reopen: the engine operations the CLI calls, as ``human``. Accept
  first answers with its question (the task, its target, the tip the page's diff showed); the merge starts
  when the person confirms it, and its phases follow on the page.
- ``POST /create`` — a task created as ``corral create`` creates it, in the project the form names.

A page is rendered from the store as it is when the page is asked for (the change marks read anew), so a
page fetched right after a change shows it.

What every open page shares (the projects, the renders read once per change) is
:mod:`corral.dashboard.hub`; what a button does, :mod:`corral.dashboard.task_actions`.
:mod:`corral.dashboard.security` guards every request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from msgspec import Struct

from corral.dashboard import board_page, security, task_actions, task_page, views
from corral.dashboard.html import Markup, path
from corral.dashboard.hub import POLL_SECONDS, Follower, Hub
from corral.errors import CorralError

HOST = "127.0.0.1"
STATIC = Path(__file__).resolve().parent / "static"
#: A keep-alive comment on a quiet stream, so a dead connection is found.
KEEPALIVE_SECONDS = 15.0


class Served(Struct):
    url: str
    stop: Callable[[], None]


def sse(event: str, data: str) -> str:
    lines = data.split("\n") or [""]
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


def app(home: Path, host: str, port: Callable[[], int], log: logging.Logger | None = None) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    keys = security.Keys(home, security.secret(home))
    hub = Hub(home)
    hub.reads.submit(hub.warm)  # the modules a board needs and its projects, loaded before the first page
    logger = log or logging.getLogger("corral.dashboard")

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status)

    async def board_route(request: Request) -> Response:
        fragment = await hub.board(fresh=True)  # a page asked for right after a change shows it
        return html(board_page.board_page(keys, fragment, await hub.run(hub.project_names)))

    async def find(state: str, given: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = await hub.run(hub.show, state, given)
        except CorralError:
            return None
        return doc

    def missing(state: str, given: str) -> HTMLResponse:
        body = views.note(f"No task '{given}' in project '{state}'.", "problem")
        return html(views.page("corral — not found", keys, body), 404)

    async def task_route(request: Request) -> Response:
        state, given = request.path_params["state"], request.path_params["task"]
        doc = await find(state, given)
        if doc is None:
            return missing(state, given)
        tid = doc["task"]["id"]
        parts, status, updated = await hub.parts(state, tid, fresh=True)
        told = list(hub.narration.get(tid, []))
        shown = {
            **parts,
            "diff": await hub.diff(state, tid, updated, status),
            "narration": task_page.narration_items(told),
        }
        return html(task_page.task_page(keys, state, tid, f"corral — {doc['task']['ref']}", shown))

    def stream(gen: AsyncIterator[str]) -> StreamingResponse:
        return StreamingResponse(
            gen, media_type="text/event-stream", headers={"cache-control": "no-store", "x-accel-buffering": "no"}
        )

    async def board_events(request: Request) -> Response:
        async def gen() -> AsyncIterator[str]:
            last: str | None = None
            quiet = time.monotonic()
            yield ": corral\n\n"
            while True:
                fragment = await hub.board()
                if fragment != last:
                    last = fragment
                    quiet = time.monotonic()
                    yield sse("board", fragment)
                elif time.monotonic() - quiet > KEEPALIVE_SECONDS:
                    quiet = time.monotonic()
                    yield ": keep-alive\n\n"
                await asyncio.sleep(POLL_SECONDS)

        return stream(gen())

    async def task_events(request: Request) -> Response:
        state, given = request.path_params["state"], request.path_params["task"]
        found = await find(state, given)
        if found is None:
            return missing(state, given)
        tid = found["task"]["id"]
        told = 0  # a stream sends everything when it opens (the page empties what it appends to)
        follower = Follower(hub, state, tid)

        async def gen() -> AsyncIterator[str]:
            nonlocal told
            last: dict[str, str] | None = None
            last_diff: str | None = None
            narrated: list[Any] | None = hub.narration.get(tid)
            quiet = time.monotonic()
            yield ": corral\n\n"
            while True:
                sent = False
                parts, status, updated = await hub.parts(state, tid)
                # Everything once when the stream opens (the page may be older than it), then what changed.
                for name, fragment in parts.items():
                    if last is None or last.get(name) != fragment:
                        yield sse(name, fragment)
                        sent = True
                last = dict(parts)
                diff = await hub.diff(state, tid, updated, status)
                if diff != last_diff:
                    yield sse("diff", diff)
                    sent = True
                    last_diff = diff
                events = hub.narration.get(tid)
                if events is not narrated:  # a new accept began here: its narration starts afresh
                    narrated, told = events, 0
                if events is not None and len(events) > told:
                    fresh, told = events[told:], len(events)
                    yield sse("narration", task_page.narration_items(list(fresh)))
                    sent = True
                try:
                    lines = await hub.run(follower.poll)
                except Exception:
                    logger.exception("dashboard: reading the output of %s", tid)
                    lines = []
                if lines:
                    yield sse("output", task_page.output_lines(lines))
                    sent = True
                if sent:
                    quiet = time.monotonic()
                elif time.monotonic() - quiet > KEEPALIVE_SECONDS:
                    quiet = time.monotonic()
                    yield ": keep-alive\n\n"
                await asyncio.sleep(POLL_SECONDS)

        return stream(gen())

    async def action(request: Request) -> Response:
        state, given, name = (request.path_params[k] for k in ("state", "task", "action"))
        if name not in task_actions.ACTIONS:
            return html(views.flash(f"There is no action '{name}'.", error=True), 404)
        form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        doc = await find(state, given)
        if doc is None:
            return missing(state, given)
        tid = doc["task"]["id"]
        loop = asyncio.get_running_loop()
        if name == "accept" and (form.get("confirm") or [""])[0] != "yes":  # asked first, as `corral accept` asks
            shown_tip = (form.get("tip") or [""])[0].strip() or None
            base = path("p", state, "t", tid)
            return html(task_page.confirm_accept(base, doc["task"]["ref"], doc["task"].get("target"), shown_tip))
        if name == "accept":
            hub.narration[tid] = [{"event": "phase", "label": "accept", "state": "requested", "position": None}]
            shown = (form.get("tip") or [""])[0].strip() or None  # the tip the page's diff showed
            future = loop.run_in_executor(hub.acts, task_actions.accept, hub, state, tid, shown, doc["task"]["ref"])

            def failed(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is not None:
                    logger.error("dashboard: accept failed: %r", f.exception())

            future.add_done_callback(failed)
            return html(views.flash(f"Accepting {doc['task']['ref']}: its phases follow below."))
        try:
            said: Markup = await loop.run_in_executor(hub.acts, task_actions.act, hub, state, tid, name, form)
        except CorralError as exc:
            return html(views.flash(exc.message, error=True, hint=exc.hint))  # the text stays, to be fixed
        if 'class="flash error"' in said:
            return html(said)
        return html(said + task_page.message_box(oob=True))  # sent: the box is emptied

    async def create(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        loop = asyncio.get_running_loop()
        try:
            said: Markup = await loop.run_in_executor(hub.acts, task_actions.create, hub, form)
        except CorralError as exc:
            return html(views.flash(exc.message, error=True, hint=exc.hint))  # the form stays, to be fixed
        if 'class="flash error"' in said:
            return html(said)
        projects = await hub.run(hub.project_names)
        return html(said + board_page.create_form(projects, oob=True))  # created: the form is emptied

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    routes = [
        Route("/", board_route),
        Route("/favicon.ico", favicon),
        Route("/create", create, methods=["POST"]),
        Route("/p/{state}/t/{task}", task_route),
        Route("/p/{state}/t/{task}/{action}", action, methods=["POST"]),
        Route("/events/board", board_events),
        Route("/events/p/{state}/t/{task}", task_events),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    inner = Starlette(routes=routes)
    return security.Guard(inner, keys, host, port)


def start(home: Path, host: str = HOST, log: logging.Logger | None = None, port: int = 0) -> Served:
    """Serve the dashboard on ``host`` (loopback unless told) in a thread; returns once it answers."""
    from corral.adapters.http_server import serve

    served = serve(
        lambda bound: app(home, host, lambda: bound, log),
        host,
        name="corral-dashboard",
        what="The dashboard",
        code="dashboard-unavailable",
        port=port,
        force_exit=True,  # open event streams never end by themselves
    )
    return Served(served.base, served.stop)
