"""What ``watch`` shows and when to read it again: the board of the projects watched, and what it is made of.

The board (``corral.engine.operations.board``) is read again only when something it is made of
changed — the store's change mark (a commit there, from this host or another) and each working
task's supervisor files and current logs, looked at every :data:`POLL_SECONDS` — and at least
every ``--interval`` seconds (what nothing says: a supervisor that died, the time going by). An
idle watch costs a few system calls a poll, and on PostgreSQL one small query every half second.
Off a terminal (:mod:`corral.cli.watch_lines`) SIGTERM and SIGHUP end the watch (:func:`signals`); on
one, the board (:mod:`corral.cli.board_app`) handles them itself.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from corral.cli.app import App
from corral.domain.status import Status
from corral.engine.api import STATUS_FILE as STATUS
from corral.engine.api import Project, queries
from corral.engine.api import board as boards
from corral.errors import CorralError, TaskNotFound

#: How often the files a board is made of are looked at.
POLL_SECONDS = 0.25
#: The longest the board goes unread, by default.
INTERVAL_SECONDS = 5.0

Stat = tuple[int, int, int] | None


class WatchEnded(Exception):
    """SIGTERM or SIGHUP: the watch ends, its terminal restored."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.code = 128 + signum


def _stat(path: str) -> Stat:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class Source:
    """The projects watched, their board, and whether anything it is made of changed since it was read."""

    def __init__(self, projects: list[tuple[str, Project]], only: list[str] | None, home: Any = None) -> None:
        self.projects = projects
        self.only = only
        self.home = home  # --all-projects: projects kept there later are watched too
        self.board: boards.Board | None = None
        self.read_at = 0.0
        self.stale = False  # read again at the next look, changed or not
        self.scanned_at = time.monotonic()  # when the home was last looked at for more projects
        self.seen: tuple[Any, ...] | None = None
        self.opened: list[Project] = []  # the projects this source opened (closed with it)
        self._working: list[tuple[Project, str]] = []
        self._memo: dict[str, tuple[Stat, Any]] = {}  # status.json's path -> (its stat, what it says)
        self._states: list[Any] | None = None  # the home's project state directories, last looked at
        if home is not None:
            from corral.engine.api import project_states

            self._states = project_states(home)

    def fingerprint(self) -> tuple[Any, ...]:
        """The few file facts a change of the board changes: a handful of ``stat`` calls."""
        out: list[Any] = []
        for _name, project in self.projects:
            try:
                out.append(project.store.change_mark())
            except CorralError as exc:  # the read that follows says what is wrong
                out.append(exc.code)
        for project, task_id in self._working:
            out.append(_dir(str(project.paths.protocol_dir(task_id)), self._memo))
            turns = str(project.paths.turns_dir(task_id))
            try:
                latest = max((e.name for e in os.scandir(turns) if e.name.isdigit()), key=int, default=None)
            except OSError:
                latest = None
            if latest is not None:
                out.append((latest, _dir(os.path.join(turns, latest), self._memo)))
        return tuple(out)

    def due(self, interval: float) -> bool:
        """Whether the board should be read again: never read, something changed, or ``interval`` passed."""
        if self.board is None or self.stale or time.monotonic() - self.read_at >= interval:
            return True
        return self.fingerprint() != self.seen

    def read(self) -> boards.Board:
        if self.home is not None and time.monotonic() - self.scanned_at >= INTERVAL_SECONDS:
            self._more_projects()
            self.scanned_at = time.monotonic()
        seen = self.fingerprint()  # before the read: a change during it is seen at the next poll
        board = boards.board(self.projects, only=self.only)
        self.board, self.read_at, self.stale = board, time.monotonic(), False
        by_path = {str(p.paths.repo): p for _n, p in self.projects}
        self._working = [
            (by_path[r["project_path"]], r["id"])
            for r in board.rows()
            if r["status"] == Status.WORKING.value and r["project_path"] in by_path
        ]
        # When the working set changed with this read, the next look differs and reads once more.
        self.seen = seen
        return board

    def _more_projects(self) -> None:
        """Projects kept under the home since the watch began (looked for only when its list changed)."""
        from corral.engine.api import project_states

        states = project_states(self.home)
        if states == self._states:
            return
        self._states = states
        known = {str(p.paths.repo) for _n, p in self.projects}
        opened = boards.home_projects(self.home)
        for name, project in opened.projects:
            if str(project.paths.repo) in known:
                project.close()
                continue
            self.projects.append((name, project))
            self.opened.append(project)

    def invalidate(self) -> None:
        """Read the board again at the next look, changed or not (after an action of ours)."""
        self.stale = True

    def project_of(self, row: dict[str, Any]) -> Project:
        return self.project_at(str(row.get("project_path")))

    def project_at(self, path: str) -> Project:
        """The project a row's ``project_path`` names (the first one, if none does)."""
        for _name, project in self.projects:
            if str(project.paths.repo) == path:
                return project
        return self.projects[0][1]

    def close(self) -> None:
        for project in self.opened:
            project.close()


def _dir(path: str, memo: dict[str, tuple[Stat, Any]]) -> tuple[Any, ...]:
    """(name, mtime, size) of each file in a directory: a supervisor's files, a turn's logs. The
    supervisor's ``status.json`` is told by what it says, its heartbeat aside: it beats every few
    seconds, and a beat changes nothing a board shows (a beat that stops is the settled read's)."""
    try:
        with os.scandir(path) as entries:
            found = sorted((e.name, e.path) for e in entries)
    except OSError:
        return ()
    out: list[Any] = []
    for name, full in found:
        stat = _stat(full)
        if name != STATUS:
            out.append((name, stat))
            continue
        known = memo.get(full)
        if known is None or known[0] != stat:
            known = (stat, _beatless(full))
            memo[full] = known
        out.append((name, known[1]))
    return tuple(out)


def _beatless(path: str) -> Any:
    """What a supervisor's ``status.json`` says, without its heartbeat."""
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return repr(doc)
    return repr(sorted((k, repr(v)) for k, v in doc.items() if k not in _BEAT))


#: The fields of ``status.json`` that change with every heartbeat and nothing else.
_BEAT = frozenset({"heartbeat_at", "heartbeat_mono"})


def open_source(app: App, all_projects: bool, tasks: Sequence[str]) -> Source:
    """The projects to watch and the tasks named (by id, so a prefix names one task)."""
    home = None
    opened: list[Project] = []
    if all_projects:
        from corral.engine.api import corral_home

        home = corral_home()
        found = boards.home_projects(home)
        for problem in found.problems:
            app.note(f"warning: {problem}")
        projects = list(found.projects)
        opened = [p for _n, p in projects]
    else:
        projects = [(app.project.paths.repo.name, app.project)]
    only: list[str] | None = None
    if tasks:
        only = []
        for given in tasks:
            error: CorralError | None = None
            for _name, project in projects:
                try:
                    only.append(queries.find_task(project, given).id)
                    break
                except CorralError as exc:
                    error = error or exc
            else:
                for project in opened:
                    project.close()
                if error is not None:
                    raise error
                raise TaskNotFound(given, [])  # no project to find it in
    source = Source(projects, only, home)
    source.opened = opened
    return source


@contextmanager
def signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the watch (:class:`WatchEnded`)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise WatchEnded(signum)

    handlers: dict[int, Any] = {signal.SIGTERM: stop, signal.SIGHUP: stop}
    old = {sig: signal.signal(sig, h) for sig, h in handlers.items()}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
