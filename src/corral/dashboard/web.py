"""The dashboard: a Starlette app the daemon serves on loopback, in a thread with its own event loop.

Pages are server-rendered HTML (:mod:`corral.dashboard.views`) with htmx for the buttons (vendored
under ``static/``, pinned by its file name) and update by server-sent events, swapped in by
``static/dashboard.js`` (one stream per page, closed while the page is hidden):

- ``GET /`` — the board of every project under ``CORRAL_HOME`` (``board.board``, not settled: the
  daemon's ticks keep its projects settled); ``GET /events/board`` sends it again whenever it
  changes (a project's database or the live line of a working task).
- ``GET /p/<state>/t/<task>`` — one task (``queries.show_task``), its diff (``tasks.diff``, its tip recorded
  as shown and carried by the page's Accept) and its latest turn's output; ``GET /events/p/<state>/t/<task>``
  sends its parts (head, actions, details) and the diff when they change, each new output line, and
  each phase of an accept started here.
- ``POST /p/<state>/t/<task>/<action>`` — start, unblock (with protected-file decisions), resume,
  ask, stop, accept, reject, close, reopen: the engine operations the CLI calls, as ``human``.

A render is shared: every open page of the board waits on one read per change, not one each.
Store reads and operations run in worker threads, each with its own open projects (a store
connection is never shared by threads). :mod:`corral.dashboard.security` guards every request.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from corral.dashboard import security, views
from corral.dashboard.html import Markup, tag
from corral.domain.actors import Actor
from corral.domain.record import record
from corral.engine.api import LiveCache, Project, project_states, read_record
from corral.errors import CorralError, TipMoved

HOST = "127.0.0.1"
STATIC = Path(__file__).resolve().parent / "static"
#: How often an open page's stream looks for a change (each store's change mark: cheap).
POLL_SECONDS = 0.2
#: A working task's live line is read again this often on its page (it is not in the database)…
LIVE_SECONDS = 1.0
#: … and on the board, whose read covers every unfinished task (the daemon's tick).
BOARD_LIVE_SECONDS = 2.0
#: Seconds before a project that failed to open is tried again for the stamp.
REOPEN_SECONDS = 5.0
#: A keep-alive comment on a quiet stream, so a dead connection is found.
KEEPALIVE_SECONDS = 15.0
ACTOR = Actor.HUMAN  # every action taken here is a person's


@record(frozen=False)
class Served:
    url: str
    stop: Callable[[], None]


class Homes:
    """The projects under a home, one open :class:`Project` per thread and state directory."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._local = threading.local()
        self._failed: dict[str, tuple[float, str]] = {}  # state -> (when, why) its project last failed to open

    def states(self) -> list[tuple[str, str]]:
        """(state directory name, checkout path) of every project whose checkout is there."""
        out = []
        for state in project_states(self.home):
            kept = read_record(state)
            if kept is not None and kept.path is not None and Path(kept.path).is_dir():
                out.append((state.name, kept.path))
        return out

    def get(self, state: str, repo: str | None = None) -> Project:
        cache: dict[str, Project] = self._local.__dict__.setdefault("open", {})
        project = cache.get(state)
        if project is None:
            if repo is None:
                repo = dict(self.states()).get(state)
            if repo is None or "/" in state:
                raise CorralError(f"There is no project '{state}' here.", code="not-found")
            project = Project.open(repo)
            if project.paths.root.name != state:
                raise CorralError(f"The checkout {repo} no longer holds project '{state}'.", code="project-moved")
            cache[state] = project
        return project

    def opened(self) -> tuple[list[tuple[str, Project]], list[str], dict[str, str]]:
        """(name, project) pairs for the board, the problems, each checkout's state name."""
        pairs, problems, names = [], [], {}
        for state, repo in self.states():
            try:
                project = self.get(state, repo)
            except Exception as exc:  # one project that cannot open is named, the others shown
                problems.append(f"{repo}: {getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}")
                continue
            pairs.append((Path(repo).name, project))
            names[str(project.paths.repo)] = state
        return pairs, problems, names

    def stamp(self) -> tuple[Any, ...]:
        """What changes when any project's store has a commit (its change mark, from this host or
        another), and the projects' set. Asked on one thread only (:meth:`Hub.stamp`): a mark is
        its store connection's own. A project that cannot open is tried again every few seconds."""
        out: list[Any] = []
        now = time.monotonic()
        for state, repo in self.states():
            failed = self._failed.get(state)
            if failed is not None and now - failed[0] < REOPEN_SECONDS:
                out.append((state, failed[1]))
                continue
            try:
                out.append((state, self.get(state, repo).store.change_mark()))
                self._failed.pop(state, None)
            except Exception as exc:  # the board's read names what is wrong
                why = getattr(exc, "code", None) or type(exc).__name__
                self._failed[state] = (now, why)
                out.append((state, why))
        return tuple(out)


class Hub:
    """What every open page shares: the renders, keyed by what they were read at, and accepts' narration."""

    def __init__(self, home: Path) -> None:
        self.homes = Homes(home)
        self.live = LiveCache()
        self.reads = ThreadPoolExecutor(4, thread_name_prefix="dashboard-read")
        self.marks = ThreadPoolExecutor(1, thread_name_prefix="dashboard-marks")  # Homes.stamp's one thread
        self._stamp: tuple[float, Any] | None = None
        self._stamping = asyncio.Lock()
        self.acts = ThreadPoolExecutor(4, thread_name_prefix="dashboard-act")
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache: dict[str, tuple[Any, Any]] = {}
        self.narration: dict[str, list[dict[str, Any]]] = {}  # task id -> the events of its latest accept here
        self._diff_rows: dict[str, tuple[str, str]] = {}  # task id -> (updated_at, status) its last diff read left
        self.working = False  # whether the last board had a working task (its live lines move)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.reads, fn, *args)

    async def shared(self, key: str, stamp: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``'s value for ``stamp``: one read however many pages ask at once."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == stamp:
                return hit[1]
            value = await self.run(compute)
            self._cache[key] = (stamp, value)
            if len(self._cache) > 2000:
                self._cache.clear()
            return value

    async def stamp(self) -> Any:
        """The projects' stamp, asked on its one thread and shared by the pages that poll meanwhile."""
        async with self._stamping:
            if self._stamp is None or time.monotonic() - self._stamp[0] >= POLL_SECONDS / 2:
                loop = asyncio.get_running_loop()
                self._stamp = (time.monotonic(), await loop.run_in_executor(self.marks, self.homes.stamp))
            return self._stamp[1]

    # -- the board ----------------------------------------------------------------------------------

    async def board_stamp(self) -> Any:
        live = int(time.monotonic() / BOARD_LIVE_SECONDS) if self.working else None
        return (await self.stamp(), live)

    def render_board(self) -> Markup:
        from corral.engine.api import activity, board

        pairs, problems, names = self.homes.opened()
        doc = board.board(pairs, settle=False).to_json()
        doc["problems"] = problems + doc["problems"]
        self.working = any(g["needs"] == "working" and g["rows"] for g in doc["groups"])
        return views.board_fragment(doc, names, activity(pairs))

    def warm(self) -> None:
        """Load what a board read needs (its modules, the projects, their pages in SQLite's cache);
        nothing is kept of the render: the first page still reads and renders the board."""
        try:
            self.render_board()
        except Exception:  # the first page will say what is wrong
            logging.getLogger("corral.dashboard").debug("warm-up failed", exc_info=True)

    async def board(self) -> Markup:
        value: Markup = await self.shared("board", await self.board_stamp(), self.render_board)
        return value

    # -- a task ---------------------------------------------------------------------------------------

    def show(self, state: str, given: str) -> dict[str, Any]:
        from corral.engine.api import queries

        project = self.homes.get(state)

        def live(task: Any) -> Any:
            return self.live.facts(project, task)

        return queries.show_task(project, given, settle=False, live=live).doc

    async def task_stamp(self, task_id: str) -> Any:
        key = self._cache.get(f"summary:{task_id}")
        working = key is not None and key[1][1] == "working"
        return (await self.stamp(), int(time.monotonic() / LIVE_SECONDS) if working else None)

    async def parts(self, state: str, task_id: str) -> tuple[dict[str, Markup], str, str]:
        """(the task page's changing parts, the task's status, its updated_at)."""

        def compute() -> tuple[dict[str, Markup], str, str]:
            doc = self.show(state, task_id)
            return views.task_parts(doc, state), doc["task"]["status"], doc["task"]["updated_at"]

        value: tuple[dict[str, Markup], str, str] = await self.shared(
            f"summary:{task_id}", await self.task_stamp(task_id), compute
        )
        return value

    def render_diff(self, state: str, task_id: str) -> Markup:
        """The task's diff as ``corral diff`` reads it, its tip recorded as shown to a person and carried by the
        page, so its Accept merges that tip and no other (docs/dashboard.md#accept)."""
        from corral.domain.clock import rfc3339
        from corral.engine.api import queries, tasks

        project = self.homes.get(state)
        try:
            found = tasks.diff(project, task_id, actor=ACTOR, surface="dashboard")
        except CorralError as exc:
            return tag("p", exc.message, class_="meta")
        shown = views.diff_fragment(found.tip, found.commits, found.text, found.uncommitted)
        after = queries.task_row(project, task_id)
        if after is not None:  # recording the tip touched the row: this render stands for the row as it is now
            self._diff_rows[task_id] = (rfc3339(after.updated_at) or "", after.status.value)
        return shown

    def forget_diff(self, task_id: str) -> None:
        """The task's diff is read again at the next look (its branch moved without its row changing)."""
        self._cache.pop(f"diff:{task_id}", None)

    async def diff(self, state: str, task_id: str, updated: str, status: str) -> Markup:
        """The task's diff, read again when its row changed (its updated_at or status), the row's change made by
        recording the tip shown aside (:meth:`render_diff` keys its render by the row as it left it)."""
        key = f"diff:{task_id}"
        value: Markup = await self.shared(key, (updated, status), lambda: self.render_diff(state, task_id))
        row = self._diff_rows.pop(task_id, None)
        if row is not None:
            self._cache[key] = (row, value)
        return value


class Follower:
    """One page's reader of a task's turn output: the latest turn, then each turn that follows."""

    def __init__(self, hub: Hub, state: str, task_id: str) -> None:
        self.hub, self.state, self.task_id = hub, state, task_id
        self.seq: int | None = None
        self.log: Any = None
        self.done = False
        self.harness: Any = None

    def poll(self) -> list[tuple[str, str]]:
        from corral.engine.api import TurnLog, log_text, queries
        from corral.engine.api import logs as turn_logs

        project = self.hub.homes.get(self.state)
        now = turn_logs.current(project, self.task_id)
        task = queries.task_row(project, self.task_id)
        if task is None:
            return []
        available = turn_logs.log_turns(project, task)
        seq = now.sequence if now.running and now.sequence is not None else (available[-1] if available else None)
        out: list[tuple[str, str]] = []
        if seq is None:
            return out
        if seq != self.seq:
            if self.log is not None and not self.done:
                out += self._lines(self.log.finish())
            self.seq, self.done = seq, False
            self.log = TurnLog(project.paths.turn_dir(self.task_id, seq))
            self.harness = log_text.harness_of(project, task)
            out.append(("meta", f"── turn {seq}"))
        if self.done:
            return out
        running = now.running and now.sequence == seq
        pieces = self.log.poll() if running else self.log.finish()
        out += self._lines(pieces)
        if not running:
            self.done = True
        return out

    def _lines(self, pieces: list[Any]) -> list[tuple[str, str]]:
        from corral.engine.api import AttemptStart, log_text

        out: list[tuple[str, str]] = []
        for piece in pieces:
            if isinstance(piece, AttemptStart):
                out.append(("meta", f"── attempt {piece.number}"))
                continue
            out.extend((piece.stream, text) for text in log_text.readable(self.harness, piece))
        return out


def sse(event: str, data: str) -> str:
    lines = data.split("\n") or [""]
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


# -- the actions -------------------------------------------------------------------------------------

#: The actions a page may post: one route per button (which of them a task shows, the operations table decides).
ACTIONS = tuple(op.value for op in views.BUTTONS)


def _act(hub: Hub, state: str, task_id: str, action: str, form: dict[str, list[str]]) -> Markup:
    """One action, as the CLI's command does it; the flash line that says what happened."""
    from corral.engine.api import control, tasks, turns

    project = hub.homes.get(state)
    message = (form.get("message") or [""])[0].replace("\r\n", "\n").strip()
    approve = tuple(form.get("approve") or ())
    revert = tuple(form.get("revert") or ())
    if action in ("ask", "reject", "close") and not message:
        what = {"ask": "a question", "reject": "a reason", "close": "a reason"}[action]
        return views.flash(f"{action.capitalize()} needs {what}: write it in the box first.", error=True)
    if action == "unblock" and not (message or approve or revert):
        return views.flash("Unblock needs feedback for the agent: write it in the box first.", error=True)
    if action == "start":
        started = turns.start(project, task_id, actor=ACTOR, message=message or None)
        return views.flash(f"{started.task.ref} is working.")
    if action == "unblock":
        started = turns.unblock(project, task_id, actor=ACTOR, message=message, approve=approve, revert=revert)
        return views.flash(f"{started.task.ref} is working on your feedback.")
    if action == "resume":
        started = turns.resume(project, task_id, actor=ACTOR)
        return views.flash(f"{started.task.ref} resumed.")
    if action == "ask":
        started = turns.ask(project, task_id, actor=ACTOR, question=message)
        return views.flash(f"Asked {started.task.ref}; the answer appears in the timeline.")
    if action == "stop":
        stopped = control.stop(project, task_id, actor=ACTOR)
        return views.flash(f"{stopped.ref} is {stopped.status.value}; the turn was stopped.")
    if action in ("reject", "close"):
        ended = tasks.abandon(project, task_id, reason=message, actor=ACTOR, how=action)
        return views.flash(f"{ended.task.ref} is abandoned ({'closed' if action == 'close' else 'rejected'}).")
    if action == "reopen":
        reopened = tasks.reopen(project, task_id, reason=message or None, actor=ACTOR)
        return views.flash(f"{reopened.ref} is {reopened.status.value} again.")
    raise AssertionError(action)


def _accept(hub: Hub, state: str, task_id: str, tip: str | None = None, ref: str | None = None) -> None:
    """An accept, each of its events kept for the task's open pages (narrated as it runs).

    ``tip``: the commit the page's diff showed. It is the one merged; a branch that moved since is
    refused (there is no one to ask here), and the page's diff is read again to show what came."""
    from corral.engine.api import accept as accepting

    events = hub.narration[task_id] = []
    try:
        try:
            result = accepting.accept(hub.homes.get(state), task_id, actor=ACTOR, report=events.append, tip=tip)
        except TipMoved as exc:
            hub.forget_diff(task_id)
            hint = "The diff below now shows them: look, then Accept again"
            hint += f" (or: corral accept {ref} --tip {exc.tip[:12]})." if ref else "."
            events.append({"event": "error", "message": exc.message, "hint": hint})
            return
        events.append(
            {
                "event": "result",
                "ref": result.task.ref,
                "status": result.task.status.value,
                "commit": result.commit,
                "already": result.already,
            }
        )
        if result.warning:
            events.append({"event": "error", "message": result.warning, "hint": None})
    except CorralError as exc:
        events.append({"event": "error", "message": exc.message, "hint": exc.hint})
    except Exception as exc:  # shown, and logged by the caller's thread pool
        events.append({"event": "error", "message": f"{type(exc).__name__}: {exc}", "hint": None})
        raise


# -- the application ---------------------------------------------------------------------------------


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

    async def board_page(request: Request) -> Response:
        return html(views.board_page(keys, await hub.board()))

    async def find(state: str, given: str) -> dict[str, Any] | None:
        try:
            doc: dict[str, Any] = await hub.run(hub.show, state, given)
        except CorralError:
            return None
        return doc

    def missing(state: str, given: str) -> HTMLResponse:
        body = tag("p", f"No task '{given}' in project '{state}'.", class_="problem")
        return html(views.page("corral — not found", keys, body), 404)

    async def task_page(request: Request) -> Response:
        state, given = request.path_params["state"], request.path_params["task"]
        doc = await find(state, given)
        if doc is None:
            return missing(state, given)
        tid = doc["task"]["id"]
        parts, status, updated = await hub.parts(state, tid)
        told = list(hub.narration.get(tid, []))
        shown = {**parts, "diff": await hub.diff(state, tid, updated, status), "narration": views.narration_items(told)}
        return html(views.task_page(keys, state, tid, f"corral — {doc['task']['ref']}", shown))

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
                    yield sse("narration", views.narration_items(list(fresh)))
                    sent = True
                try:
                    lines = await hub.run(follower.poll)
                except Exception:
                    logger.exception("dashboard: reading the output of %s", tid)
                    lines = []
                if lines:
                    yield sse("output", views.output_lines(lines))
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
        if name not in ACTIONS:
            return html(views.flash(f"There is no action '{name}'.", error=True), 404)
        form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
        doc = await find(state, given)
        if doc is None:
            return missing(state, given)
        tid = doc["task"]["id"]
        loop = asyncio.get_running_loop()
        if name == "accept":
            hub.narration[tid] = [{"event": "phase", "label": "accept", "state": "requested", "position": None}]
            shown = (form.get("tip") or [""])[0].strip() or None  # the tip the page's diff showed
            future = loop.run_in_executor(hub.acts, _accept, hub, state, tid, shown, doc["task"]["ref"])

            def failed(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is not None:
                    logger.error("dashboard: accept failed: %r", f.exception())

            future.add_done_callback(failed)
            return html(views.flash(f"Accepting {doc['task']['ref']}: its phases follow below."))
        try:
            said: Markup = await loop.run_in_executor(hub.acts, _act, hub, state, tid, name, form)
        except CorralError as exc:
            return html(views.flash(exc.message, error=True, hint=exc.hint))  # the text stays, to be fixed
        if 'class="flash error"' in said:
            return html(said)
        return html(said + views.message_box(oob=True))  # sent: the box is emptied

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)

    routes = [
        Route("/", board_page),
        Route("/favicon.ico", favicon),
        Route("/p/{state}/t/{task}", task_page),
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
