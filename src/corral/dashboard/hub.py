"""What every open page of the dashboard shares: the projects under the home, and the renders read once per change.

A render is shared: every open page of the board waits on one read per change, not one each
(:meth:`Hub.shared`, keyed by the projects' change marks). A page's first read asks the marks anew
(``fresh``), so a page fetched right after a change is rendered from it, never from the render before it;
the streams share one read of the marks per half poll. Store reads and operations run in
worker threads, each with its own open projects (a store connection is never shared by
threads). :class:`Follower` reads one page's turn output as it grows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from corral.dashboard import board_page, task_page, views
from corral.dashboard.html import Markup
from corral.domain.actors import Actor
from corral.domain.needs import Need
from corral.domain.status import Status
from corral.engine.api import LiveCache, Project, project_states, read_record
from corral.errors import CorralError

#: How often an open page's stream looks for a change (each store's change mark: cheap).
POLL_SECONDS = 0.2
#: A working task's live line is read again this often on its page (it is not in the database)…
LIVE_SECONDS = 1.0
#: … and on the board, whose read covers every unfinished task (the daemon's tick).
BOARD_LIVE_SECONDS = 2.0
#: Seconds before a project that failed to open is tried again for the stamp.
REOPEN_SECONDS = 5.0
ACTOR = Actor.HUMAN  # every action taken here is a person's


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

    async def stamp(self, *, fresh: bool = False) -> Any:
        """The projects' stamp, asked on its one thread and shared by the pages that poll meanwhile;
        ``fresh``: read now (a page's first render), whatever was read a moment ago."""
        async with self._stamping:
            if fresh or self._stamp is None or time.monotonic() - self._stamp[0] >= POLL_SECONDS / 2:
                loop = asyncio.get_running_loop()
                self._stamp = (time.monotonic(), await loop.run_in_executor(self.marks, self.homes.stamp))
            return self._stamp[1]

    # -- the board ----------------------------------------------------------------------------------

    async def board_stamp(self, *, fresh: bool = False) -> Any:
        live = int(time.monotonic() / BOARD_LIVE_SECONDS) if self.working else None
        return (await self.stamp(fresh=fresh), live)

    def render_board(self) -> Markup:
        from corral.engine.api import activity, board

        pairs, problems, names = self.homes.opened()
        doc = board.board(pairs, settle=False).to_json()
        doc["problems"] = problems + doc["problems"]
        self.working = any(g["needs"] == Need.WORKING and g["rows"] for g in doc["groups"])
        return board_page.board_fragment(doc, names, activity(pairs))

    def warm(self) -> None:
        """Load what a board read needs (its modules, the projects, their pages in SQLite's cache);
        nothing is kept of the render: the first page still reads and renders the board."""
        try:
            self.render_board()
        except Exception:  # the first page will say what is wrong
            logging.getLogger("corral.dashboard").debug("warm-up failed", exc_info=True)

    async def board(self, *, fresh: bool = False) -> Markup:
        value: Markup = await self.shared("board", await self.board_stamp(fresh=fresh), self.render_board)
        return value

    def project_names(self) -> list[tuple[str, str]]:
        """(state name, checkout's name) of every project, for the create form."""
        return [(state, Path(repo).name) for state, repo in self.homes.states()]

    # -- a task ---------------------------------------------------------------------------------------

    def show(self, state: str, given: str) -> dict[str, Any]:
        from corral.engine.api import queries

        project = self.homes.get(state)

        def live(task: Any) -> Any:
            return self.live.facts(project, task)

        return queries.show_task(project, given, settle=False, live=live).doc

    async def task_stamp(self, task_id: str, *, fresh: bool = False) -> Any:
        key = self._cache.get(f"summary:{task_id}")
        working = key is not None and key[1][1] == Status.WORKING
        return (await self.stamp(fresh=fresh), int(time.monotonic() / LIVE_SECONDS) if working else None)

    async def parts(self, state: str, task_id: str, *, fresh: bool = False) -> tuple[dict[str, Markup], str, str]:
        """(the task page's changing parts, the task's status, its updated_at)."""

        def compute() -> tuple[dict[str, Markup], str, str]:
            doc = self.show(state, task_id)
            return task_page.task_parts(doc, state), doc["task"]["status"], doc["task"]["updated_at"]

        value: tuple[dict[str, Markup], str, str] = await self.shared(
            f"summary:{task_id}", await self.task_stamp(task_id, fresh=fresh), compute
        )
        return value

    def render_diff(self, state: str, task_id: str) -> Markup:
        """The task's diff as ``corral diff`` reads it, its tip recorded as shown to a person and carried by the
        page, so its Accept merges that tip and no other (docs/dashboard.md#accept)."""
        from corral.domain.clock import rfc3339
        from corral.engine.api import lookups, tasks

        project = self.homes.get(state)
        try:
            found = tasks.diff(project, task_id, actor=ACTOR, surface="dashboard")
        except CorralError as exc:
            return views.note(exc.message, "meta")
        shown = task_page.diff_fragment(found.tip, found.commits, found.text, found.uncommitted)
        after = lookups.task_row(project, task_id)
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
        from corral.engine.api import TurnLog, log_text, lookups
        from corral.engine.api import logs as turn_logs

        project = self.hub.homes.get(self.state)
        now = turn_logs.current(project, self.task_id)
        task = lookups.task_row(project, self.task_id)
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
            number = turn_logs.exchange_numbers(project, task).get(seq, seq)  # as show numbers it
            out.append(("meta", f"── turn {number}"))
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
