"""The daemon of a ``CORRAL_HOME``: every project kept there served by one process.

Optional: everything works without it (the CLI reconciles before reads); with it, auto-resume
happens without anyone typing a command, and task agents reach corral's tools over MCP.
One per ``CORRAL_HOME``, held by an flock in ``$CORRAL_HOME/daemon/`` that the kernel
releases when the daemon dies, so a stale lock or state file from a killed daemon is simply
replaced (:mod:`corral.engine.daemons` finds, starts and stops it).

The projects are the state directories under ``$CORRAL_HOME/projects/``, each opened from the
checkout its ``repository.json`` names, and looked for again on every tick (a new project is
served from its first command on). A project whose checkout is gone, moved or no longer holds
that state, or whose database was removed, is not served (said once in the log); the others
go on. A project whose person keeps it in the shared PostgreSQL store (``database_url``) has no
``corral.db``: it is served once its store can be reached, and its passes judge only what this host
owns (the turns it runs, its pairs and accepts) beside the sweeps any host may run (the lease sweep);
its notices are those of this host's own turns (docs/workers.md#turns-run-on-your-own-host).
Per project: the reconcile tick, its notices, the daily prune of expired diagnostics, and its
supervisors watched through pidfds, so a death is reconciled within a second. Each step is
guarded: one broken project never stops the others.

While it serves a project the daemon holds that project's ``daemon.lock`` (in its state
directory), so ``restore`` and ``project archive`` know the database is open. That is the lock
the daemons of older corrals (one per project) held: one found running is stopped (SIGTERM,
proven by the start time its ``daemon.json`` recorded) and replaced.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from corral.adapters import doorbell
from corral.adapters.files import open_private
from corral.adapters.locks import lock
from corral.adapters.pid_identity import ProcInfo, proc_info, reap
from corral.domain.clock import rfc3339, utcnow
from corral.engine.api import (
    DaemonState,
    Project,
    corral_home,
    daemons,
    holds,
    make_private_dir,
    notify,
    project_states,
    read_record,
    read_state_file,
    settle,
    signal_daemon,
    spares,
    supervisor_pids,
    write_state_file,
)
from corral.errors import CorralError, DaemonRunning

__all__ = ["PRUNE_SECONDS", "TICK_SECONDS", "Daemon", "DaemonState", "Slot", "serve", "stop_unreachable"]

TICK_SECONDS = 2.0
#: How long after a spare supervisor was taken the next one starts: not beside the turn the taken one starts.
SPARE_SECONDS = 1.0
WATCH_SECONDS = 1.0  # the longest a supervisor no launch told of goes unwatched
PRUNE_SECONDS = 24 * 3600.0  # expired diagnostics go once a day (and when a project is first served)
#: How long an older corral's per-project daemon has to exit on SIGTERM before it gets SIGKILL.
OLD_DAEMON_GRACE = 5.0
#: What a spare supervisor says before it is handed its command, in the home's daemon directory.
SPARE_LOG = "spare-supervisor.log"
#: A lock that another process only looks at (``is_locked`` takes it for an instant) is retried this long.
LOCK_RETRY = 0.5


def _logger(home: Path) -> logging.Logger:
    make_private_dir(daemons.daemon_dir(home))
    logger = logging.getLogger(f"corral.daemon.{home}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handler = _PrivateLog(daemons.log_file(home), maxBytes=1_000_000, backupCount=3, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    return logger


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """The daemon's log, opened 0600 (``files.open_private``) each time: at the start and after each
    rotation — the log names the user's repositories, theirs alone whatever the daemon's umask."""

    def _open(self) -> Any:
        fd = open_private(Path(self.baseFilename))
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


class Slot:
    """One project the daemon serves: the project opened, its lock, when it is next pruned."""

    def __init__(self, state: Path, project: Project, lock_fd: int | None, recorded: str | None = None) -> None:
        self.state = state
        self.project = project
        self.recorded = recorded or str(project.repo)  # the checkout its record named when it was opened
        self.lock_fd = lock_fd
        self.next_prune = 0.0

    @property
    def repo(self) -> str:
        return str(self.project.repo)

    def close(self) -> None:
        try:
            self.project.close()
        finally:
            if self.lock_fd is not None:
                os.close(self.lock_fd)
                self.lock_fd = None


class Daemon:
    def __init__(
        self,
        home: Path | None = None,
        *,
        tick: float = TICK_SECONDS,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.home = home or corral_home()
        self.tick = tick
        self.stop_event = threading.Event()
        self._lock_inode: int | None = None  # of the home's lock file this daemon holds
        self.on_event = on_event
        self.log = _logger(self.home)
        self.slots: dict[str, Slot] = {}  # state directory name -> the project served
        self.skipped: dict[str, str] = {}  # state directory name -> why it is not served (said once)
        self.watched: dict[int, tuple[int, str]] = {}  # supervisor pid -> (pidfd, state directory name)
        self.prune_every = PRUNE_SECONDS
        self.mcp_url: str | None = None
        self._served: Any = None  # the MCP endpoint (corral.mcp.http's Served)
        self.dashboard_url: str | None = None
        self._dashboard: Any = None  # the web dashboard (corral.dashboard.web's Served)
        #: Its start once the home asks for it (:meth:`dashboard_when_wanted`), beside the loop as the MCP endpoint's.
        self._dashboard_thread: threading.Thread | None = None
        self._started = ""
        self._mcp_ready = threading.Event()
        self._mcp_thread: threading.Thread | None = None
        self._tick_now = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        #: How often the daemon looks at the store for supervisors to watch without being told; a launch
        #: rings the doorbell (:mod:`corral.adapters.doorbell`) to be watched at once.
        self.watch_every = WATCH_SECONDS
        self._bell: doorbell.Doorbell | None = None
        #: A supervisor started ahead for the next resume (``operations/spares.py``): started this long after the
        #: daemon begins to watch a running turn with none kept, or after one was taken; never when ``None``.
        self.spare_after: float | None = SPARE_SECONDS
        self._spare_due: float | None = None

    def request_stop(self, *_: Any) -> None:
        self.stop_event.set()
        self._wake()

    def request_tick(self) -> None:
        """Tick at once (the MCP endpoint is up: the state file says so without waiting a tick)."""
        self._tick_now.set()
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def event(self, kind: str, **fields: Any) -> None:
        doc = {"event": kind, "at": rfc3339(utcnow()), **fields}
        self.log.info("%s %s", kind, {k: v for k, v in fields.items()})
        if self.on_event is not None:
            self.on_event(doc)

    def guarded(self, what: str, step: Callable[[], None], slot: Slot | None = None) -> None:
        """Run one housekeeping step; a failure is logged and the daemon goes on."""
        try:
            step()
        except Exception as exc:
            self.log.exception("%s failed", what)
            where = {"project": slot.repo} if slot is not None else {}
            self.event("daemon-error", step=what, message=f"{type(exc).__name__}: {exc}", **where)

    # -- the home's lock and state ---------------------------------------------------------------

    def acquire(self) -> int:
        fd = lock(daemons.lock_file(self.home), LOCK_RETRY)
        if fd is None:
            current = daemons.state(self.home)
            raise DaemonRunning(
                f"A corral daemon already runs for {self.home} (pid {current.pid}).",
                hint="See it with `corral daemon status`; stop it with `corral daemon stop`.",
            )
        self._lock_inode = os.fstat(fd).st_ino
        return fd

    def check_home(self) -> None:
        """Stop when the lock file held is no longer the home's (its state directory was removed or
        replaced): no ``corral`` command can find this daemon any more, nor a new one be kept from starting."""
        try:
            current = os.stat(daemons.lock_file(self.home)).st_ino
        except FileNotFoundError:
            current = None
        if current != self._lock_inode:
            self.event("home-removed", message=f"its state directory {daemons.daemon_dir(self.home)} was removed")
            self.stop_event.set()

    def write_state(self) -> None:
        if not self._mcp_ready.is_set():
            return
        write_state_file(
            daemons.state_file(self.home),
            {
                "pid": os.getpid(),
                "started_at": self._started,
                "last_tick": rfc3339(utcnow()),
                "mcp_url": self.mcp_url,
                "dashboard_url": self.dashboard_url,
                "projects": sorted(slot.repo for slot in self.slots.values()),
            },
            durable=False,
        )

    # -- MCP ---------------------------------------------------------------------------------------

    def start_mcp(self) -> None:
        try:
            from corral.mcp import http  # type: ignore[import-untyped, import-not-found, unused-ignore]

            self._served = http.start(self.home, self.log)
            self.mcp_url = str(self._served.url)
        except Exception as exc:  # no MCP is a degraded daemon, never a dead one
            self._served = None
            self.mcp_url = None
            self.log.warning("MCP unavailable: %s: %s", type(exc).__name__, exc)
            self.event("mcp-unavailable", message=f"{type(exc).__name__}: {exc}")
            return
        self.event("mcp-serving", url=self.mcp_url)

    def start_dashboard(self) -> None:
        """The web dashboard on its own port: loopback, unless ``corral dashboard --host`` asked for another."""
        try:
            from corral.dashboard import web as dashboard

            host = daemons.take_dashboard_host(self.home) or dashboard.HOST
            self._dashboard = dashboard.start(self.home, host, self.log)
            self.dashboard_url = str(self._dashboard.url)
        except Exception as exc:  # no dashboard is a degraded daemon, never a dead one
            self._dashboard = None
            self.dashboard_url = None
            self.log.warning("dashboard unavailable: %s: %s", type(exc).__name__, exc)
            self.event("dashboard-unavailable", message=f"{type(exc).__name__}: {exc}")
            return
        self.event("dashboard-serving", url=self.dashboard_url)

    def stop_dashboard(self) -> None:
        served, self._dashboard = self._dashboard, None
        if served is not None:
            served.stop()

    def _start_mcp_then_say(self) -> None:
        try:
            self.start_mcp()
            if daemons.dashboard_wanted(self.home):
                self.start_dashboard()
        finally:
            self._mcp_ready.set()
            self.request_tick()

    def dashboard_when_wanted(self, *, again: bool) -> None:
        """Start the web dashboard of a daemon serving none, once its home asks for it (``corral dashboard``:
        ``daemons.want_dashboard``, which rings the doorbell). A daemon whose home never asked serves none: the
        web server, its templates and the first read of the board are most of a daemon's start after the MCP
        endpoint, and most daemons are started by a launch for its agent's tools. ``again``: the doorbell rang,
        so a start that failed is tried once more (a tick alone never retries one)."""
        if not self._mcp_ready.is_set() or self._dashboard is not None:
            return  # the start's own thread decides first; one that serves is left alone
        running = self._dashboard_thread
        if running is not None and (running.is_alive() or not again):
            return
        if not daemons.dashboard_wanted(self.home):
            return

        def start_then_say() -> None:
            try:
                self.start_dashboard()
            finally:
                self.request_tick()  # the state file names it at once

        self._dashboard_thread = threading.Thread(target=start_then_say, name="dashboard-start", daemon=True)
        self._dashboard_thread.start()

    def stop_mcp(self) -> None:
        served, self._served = self._served, None
        if served is not None:
            served.stop()

    # -- which projects ----------------------------------------------------------------------------

    def why_not(self, state: Path) -> tuple[str | None, str | None]:
        """The checkout recorded for a state directory, and why it cannot be served (None: it can)."""
        record = read_record(state)
        path = record.path if record is not None else None
        if path is None:
            return None, "no repository is recorded for it yet (a corral command run in its repository records it)"
        if not holds(path, state.name):
            return path, (
                f"the repository {path} is gone (moved or removed) or no longer holds this state; "
                "it is served again once a corral command runs where it is now"
            )
        db = state / "corral.db"
        if not db.exists() and not _shared_store(
            path
        ):  # never made anew here: a database someone removed stays removed
            served = state.name in self.slots
            return path, f"the task database {db} was removed" if served else f"it has no task database ({db}) yet"
        return path, None

    def scan(self) -> None:
        """Serve the projects that can be served, and stop serving those that no longer can."""
        states = project_states(self.home)
        names = {s.name for s in states}
        for name in [n for n in self.slots if n not in names]:
            self.drop(name, f"its state directory {self.home / 'projects' / name} was removed")
        for name in [n for n in self.skipped if n not in names]:
            del self.skipped[name]
        for state in states:
            self.guarded("scan", partial(self.look_at, state), self.slots.get(state.name))

    def look_at(self, state: Path) -> None:
        path, reason = self.why_not(state)
        slot = self.slots.get(state.name)
        if slot is not None and reason is None and path == slot.recorded:
            return
        if slot is not None:
            self.drop(state.name, reason or f"its repository is now {path}")
        if reason is not None:
            if self.skipped.get(state.name) != reason:
                self.skipped[state.name] = reason
                self.log.warning("not serving %s: %s", path or state, reason)
                self.event("project-skipped", project=path, state=str(state), message=reason)
            return
        assert path is not None
        self.open(state, path)

    def open(self, state: Path, path: str) -> None:
        try:
            project = Project.open(path)
            try:
                project.placement.reach(project)  # the shared store: served once it can be reached (and is there)
            except Exception:
                project.close()
                raise
        except Exception as exc:  # a project that cannot be opened is skipped, logged once
            reason = f"it cannot be opened: {getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}"
            if self.skipped.get(state.name) != reason:
                self.skipped[state.name] = reason
                self.log.warning("not serving %s: %s", path, reason)
                self.event("project-skipped", project=path, state=str(state), message=reason)
            return
        if project.paths.root.resolve() != state.resolve():
            project.close()
            reason = f"the repository {path} now keeps its tasks in {project.paths.root}"
            if self.skipped.get(state.name) != reason:
                self.skipped[state.name] = reason
                self.event("project-skipped", project=path, state=str(state), message=reason)
            return
        self.skipped.pop(state.name, None)
        slot = Slot(state, project, self.take_project_lock(project), path)
        self.slots[state.name] = slot
        self.event("serving", project=slot.repo, state=str(state))

    def adopt(self, project: Project) -> Slot:
        """Serve ``project`` as it is (without looking at its record): what a test drives directly."""
        slot = Slot(project.paths.root, project, None)
        self.slots[project.paths.root.name] = slot
        return slot

    def drop(self, name: str, reason: str) -> None:
        slot = self.slots.pop(name)
        for pid, (pfd, owner) in list(self.watched.items()):
            if owner == name:
                os.close(pfd)
                del self.watched[pid]
        self.log.warning("no longer serving %s: %s", slot.repo, reason)
        self.event("project-gone", project=slot.repo, message=reason)
        self.guarded("close", slot.close)
        self.skipped[name] = reason

    def take_project_lock(self, project: Project) -> int | None:
        """The project's ``daemon.lock``; an older corral's daemon holding it is stopped first."""
        path = project.paths.daemon_lock
        fd = lock(path, LOCK_RETRY)
        if fd is not None:
            return fd
        old = read_state_file(project.paths.daemon_state) or {}
        pid, started = old.get("pid"), old.get("started_at")
        repo = str(project.repo)
        if not isinstance(pid, int) or not isinstance(started, str):
            self.event(
                "old-daemon-unstoppable",
                project=repo,
                message=f"{path} is held and {project.paths.daemon_state} names no daemon",
            )
            return None
        self.event(
            "old-daemon", project=repo, pid=pid, message="an older corral's daemon serves this project: stopping it"
        )
        signal_daemon(pid, started, signal.SIGTERM)
        fd = lock(path, OLD_DAEMON_GRACE)
        if fd is None:
            signal_daemon(pid, started, signal.SIGKILL)
            fd = lock(path, 2.0)
        if fd is None:
            self.event(
                "old-daemon-unstoppable", project=repo, pid=pid, message=f"it still holds {path}; serving beside it"
            )
            return None
        self.event("old-daemon-replaced", project=repo, pid=pid)
        return fd

    # -- per project ---------------------------------------------------------------------------------

    def open_doorbell(self) -> None:
        """Listen on the home's doorbell, which each launch rings (without one, the looks every second remain)."""
        self._bell = doorbell.listen(daemons.daemon_dir(self.home) / doorbell.NAME)

    def refresh_watch(self) -> None:
        wanted: dict[int, str] = {}
        for name, slot in list(self.slots.items()):
            try:
                for pid in supervisor_pids(slot.project):
                    wanted.setdefault(pid, name)
            except Exception as exc:
                self.log.exception("watch failed")
                self.event("daemon-error", step="watch", project=slot.repo, message=f"{type(exc).__name__}: {exc}")
                wanted.update({pid: owner for pid, (_, owner) in self.watched.items() if owner == name})
        for pid in list(self.watched):
            if pid not in wanted:
                os.close(self.watched.pop(pid)[0])
        for pid, name in wanted.items():
            if pid in self.watched:
                continue
            try:
                self.watched[pid] = (os.pidfd_open(pid), name)
            except (ProcessLookupError, OSError, OverflowError):
                continue

    def reconcile_once(self, slot: Slot, why: str) -> None:
        repo = slot.repo
        try:
            for problem in settle(slot.project):
                self.event("reconcile-error", project=repo, why=why, code="task-unreconciled", message=problem)
            notify.from_daemon(slot.project, lambda doc: self.event(str(doc.pop("event")), **doc))
        except CorralError as exc:
            self.event("reconcile-error", project=repo, why=why, code=exc.code, message=exc.message)
        except Exception as exc:  # a tick that fails must not end the daemon
            self.log.exception("reconcile failed")
            self.event(
                "reconcile-error", project=repo, why=why, code="internal-error", message=f"{type(exc).__name__}: {exc}"
            )

    def prune_once(self, slot: Slot) -> None:
        """Remove diagnostics past 90 days (never worktrees: that is `corral prune`'s, run by a person)."""
        from corral.engine.api import prune_diagnostics

        repo = slot.repo
        try:
            report = prune_diagnostics(slot.project)
        except CorralError as exc:  # an unhealthy store: nothing was pruned, and the log says why
            self.log.warning("prune refused for %s: %s", repo, exc.message)
            self.event("prune-refused", project=repo, code=exc.code, message=exc.message, hint=exc.hint)
            return
        except Exception as exc:  # a prune that fails must not end the daemon
            self.log.exception("prune failed")
            self.event("prune-error", project=repo, message=f"{type(exc).__name__}: {exc}")
            return
        if report.removed or report.orphaned:
            self.event("pruned", project=repo, diagnostics=len(report.removed), orphaned_tasks=len(report.orphaned))

    def clear_marks(self) -> None:
        """A clean stop takes back the wait markers this daemon wrote (helper B's bookkeeping)."""
        try:
            from corral.engine.api import clear_owned
        except ImportError:
            return
        for slot in self.slots.values():
            self.guarded("clear-marks", partial(clear_owned, slot.project, os.getpid()), slot)

    def keep_spare(self) -> None:
        """A supervisor started ahead for the next resume, when none is kept (``operations/spares.py``)."""
        pid = spares.replenish()
        if pid is not None:
            self.event("spare-supervisor", pid=pid)

    def spare_when_watching(self) -> None:
        """A spare is due ``spare_after`` seconds after the daemon starts watching a running turn with none kept:
        only a running turn can crash into a resume, and a daemon that watches none (one started for a
        dashboard, for corral's tools, or left idle) spends neither the start's CPU nor a spare's memory. The
        delay keeps its start away from the launch that rang the doorbell, and a turn shorter than it never
        needs one."""
        if self.spare_after is not None and self._spare_due is None and self.watched and not spares.kept():
            self._spare_due = time.monotonic() + self.spare_after

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> None:
        fd = self.acquire()
        self._started = rfc3339(utcnow()) or ""
        try:
            self.event("started", pid=os.getpid(), home=str(self.home))
            # A daemon started after a crash recovers first: its first tick runs before the MCP
            # endpoint and the dashboard start. They then start beside the later ticks (a supervisor's
            # death is not left waiting for them); the state file, which a starter waits for, is
            # written once they are up or known to be unavailable. The MCP SDK itself, about half a
            # second of CPU, loads on the endpoint's first request (corral.mcp.http.Deferred).
            self.guarded("doorbell", self.open_doorbell)
            next_tick = self.tick_once()
            if self.spare_after is not None:  # its first spare starts once a turn runs (spare_when_watching)
                spares.enable(daemons.daemon_dir(self.home) / SPARE_LOG)
            self._mcp_thread = threading.Thread(target=self._start_mcp_then_say, name="mcp-start", daemon=True)
            self._mcp_thread.start()
            self.loop(next_tick)
        finally:
            try:
                self.guarded("spares", spares.disable)
                self.clear_marks()
                if self._mcp_thread is not None:
                    self._mcp_thread.join(30)
                if self._dashboard_thread is not None:
                    self._dashboard_thread.join(30)
                self.guarded("mcp-stop", self.stop_mcp)
                self.guarded("dashboard-stop", self.stop_dashboard)
                for pfd, _ in self.watched.values():
                    os.close(pfd)
                self.watched.clear()
                if self._bell is not None:
                    self._bell.close()
                    self._bell = None
                for name in list(self.slots):
                    self.guarded("close", self.slots.pop(name).close)
                self.event("stopped", pid=os.getpid())
            finally:
                os.close(fd)

    def tick_once(self) -> float:
        """One tick: look for projects, prune what is due, reconcile each; returns when the next is due."""
        now = time.monotonic()
        self._tick_now.clear()
        self.guarded("home", self.check_home)
        if self.stop_event.is_set():
            return now + self.tick
        self.guarded("scan", self.scan)
        for slot in list(self.slots.values()):
            if now >= slot.next_prune:
                slot.next_prune = now + self.prune_every
                self.guarded("prune", partial(self.prune_once, slot), slot)
            self.reconcile_once(slot, "tick")
        self.guarded("dashboard", partial(self.dashboard_when_wanted, again=False))
        self.guarded("write-state", self.write_state)
        return now + self.tick

    def loop(self, next_tick: float = 0.0) -> None:
        while not self.stop_event.is_set():
            if time.monotonic() >= next_tick or self._tick_now.is_set():
                next_tick = self.tick_once()
            self.guarded("watch", self.refresh_watch)
            self.spare_when_watching()
            if self._spare_due is not None and time.monotonic() >= self._spare_due:
                self._spare_due = None
                if self.watched:  # still a turn to resume should it crash
                    self.guarded("spare", self.keep_spare)
            due = next_tick if self._spare_due is None else min(next_tick, self._spare_due)
            timeout = max(0.0, min(due - time.monotonic(), self.watch_every))
            fds = [pfd for pfd, _ in self.watched.values()]
            bell = [self._bell.fd] if self._bell is not None else []
            ready, _, _ = select.select([*fds, self._wake_r, *bell], [], [], timeout)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if self._bell is not None and self._bell.fd in ready:
                self._bell.drain()  # a supervisor was launched: the next look (at once) watches it
                self.guarded("dashboard", partial(self.dashboard_when_wanted, again=True))  # or its dashboard asked
            gone: dict[str, list[int]] = {}
            for pid, (pfd, name) in list(self.watched.items()):
                if pfd in ready:
                    os.close(pfd)
                    del self.watched[pid]
                    gone.setdefault(name, []).append(pid)
            for name, pids in gone.items():
                died = self.slots.get(name)
                if died is None:
                    continue
                self.event("supervisor-exited", project=died.repo, pids=pids)
                self.reconcile_once(died, "supervisor-exited")
            if gone and self.spare_after is not None:  # a resume may have taken the spare: the next one, later
                self._spare_due = time.monotonic() + self.spare_after


def _unreachable(home: Path) -> list[ProcInfo]:
    """This user's daemons of ``home`` while none holds its lock: ones whose state directory was removed.

    Only this user's processes are looked at (the only ones it may stop), and only corral's daemon
    of this home counts (:func:`daemons.runs_daemon_of`: its command line word by word, and the
    ``CORRAL_HOME`` :func:`daemons.start_detached` gives it).
    """
    if daemons.state(home).running:
        return []
    uid, me, found = os.getuid(), os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
        except OSError:
            continue
        pid = int(entry.name)
        if not daemons.runs_daemon_of(pid, home):
            continue
        info = proc_info(pid)
        if info is not None:
            found.append(info)
    return found


def stop_unreachable(home: Path | None = None, grace: float = 10.0) -> list[int]:
    """Stop this home's daemons that no state file names any more (SIGTERM, ``grace``, SIGKILL); their pids."""
    return [p.pid for p in reap(_unreachable(home or corral_home()), grace)]


def _shared_store(checkout: str) -> bool:
    """Whether the person's settings keep this checkout's tasks in the shared PostgreSQL store (``database_url``):
    such a project has no ``corral.db``, and whether it is served is the store's to decide, reached or not."""
    from corral.engine.api import load_config, placement_for, user_config_file

    try:
        config = load_config(user_file=user_config_file(), project_file=Path(checkout) / "corral.toml", strict=False)
    except CorralError:
        return False
    return placement_for(config).over_network()


def serve(
    home: Path | None = None, *, tick: float = TICK_SECONDS, on_event: Callable[[dict[str, Any]], None] | None = None
) -> None:
    home = home or corral_home()
    if corral_home() != home:  # the projects it opens find their state under this home
        os.environ["CORRAL_HOME"] = str(home)
    daemon = Daemon(home, tick=tick, on_event=on_event)
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    daemon.run()
