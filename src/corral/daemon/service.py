"""The daemon: reconcile ticks, and supervisors watched so a death is reconciled within a second.

Optional: everything works without it (the CLI reconciles before reads); with it,
auto-resume happens without anyone typing a command. One per state directory,
held by an flock that the kernel releases when the daemon dies, so a stale lock
or pid file from a killed daemon is simply replaced.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from corral.adapters.locks import is_locked, try_lock
from corral.adapters.process import pid_alive, spawn_detached
from corral.domain.clock import rfc3339
from corral.domain.record import record
from corral.engine.operations import notify
from corral.engine.operations.refresh import settle
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import supervisor_pids
from corral.engine.runtime.processes import signal_daemon
from corral.errors import CorralError, DaemonRunning

TICK_SECONDS = 2.0
PRUNE_SECONDS = 24 * 3600.0  # expired diagnostics go once a day (and when the daemon starts)


@record
class DaemonState:
    running: bool
    pid: int | None
    started_at: str | None
    last_tick: str | None

    def to_json(self) -> dict[str, Any]:
        return {"running": self.running, "pid": self.pid, "started_at": self.started_at, "last_tick": self.last_tick}


def state(project: Project) -> DaemonState:
    """Whether a daemon holds this state directory's lock, and what it last wrote."""
    info = proto.read_raw(project.paths.daemon_state) or {}
    running = is_locked(project.paths.daemon_lock)
    pid = info.get("pid") if isinstance(info.get("pid"), int) else None
    return DaemonState(running, pid if running else None, info.get("started_at"), info.get("last_tick"))


def _logger(project: Project) -> logging.Logger:
    project.paths.logs.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"corral.daemon.{project.paths.root.name}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handler = logging.handlers.RotatingFileHandler(
            project.paths.daemon_log, maxBytes=1_000_000, backupCount=3, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    return logger


class Daemon:
    def __init__(
        self, project: Project, *, tick: float = TICK_SECONDS, on_event: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self.project = project
        self.tick = tick
        self.stop_event = threading.Event()
        self.on_event = on_event
        self.log = _logger(project)
        self.watched: dict[int, int] = {}  # supervisor pid -> pidfd
        self.prune_every = PRUNE_SECONDS
        self._wake_r, self._wake_w = os.pipe()

    def request_stop(self, *_: Any) -> None:
        self.stop_event.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def event(self, kind: str, **fields: Any) -> None:
        doc = {"event": kind, "at": rfc3339(self.project.clock()), **fields}
        self.log.info("%s %s", kind, {k: v for k, v in fields.items()})
        if self.on_event is not None:
            self.on_event(doc)

    def acquire(self) -> int:
        fd = try_lock(self.project.paths.daemon_lock)
        if fd is None:
            current = state(self.project)
            raise DaemonRunning(
                f"A corral daemon already runs for this repository (pid {current.pid}).",
                hint="See it with `corral daemon status`; stop it with `corral daemon stop`.",
            )
        return fd

    def write_state(self, started: str) -> None:
        proto.write_json(
            self.project.paths.daemon_state,
            {"pid": os.getpid(), "started_at": started, "last_tick": rfc3339(self.project.clock())},
            durable=False,
        )

    def refresh_watch(self) -> None:
        pids = supervisor_pids(self.project)
        for pid in list(self.watched):
            if pid not in pids:
                os.close(self.watched.pop(pid))
        for pid in pids - set(self.watched):
            try:
                self.watched[pid] = os.pidfd_open(pid)
            except (ProcessLookupError, OSError):
                continue

    def guarded(self, what: str, step: Callable[[], None]) -> None:
        """Run one housekeeping step; a failure is logged and the daemon goes on."""
        try:
            step()
        except Exception as exc:
            self.log.exception("%s failed", what)
            self.event("daemon-error", step=what, message=f"{type(exc).__name__}: {exc}")

    def lost_footing(self) -> str | None:
        """Why this daemon must stop serving its project: its repository or its database is gone.

        A repository that moved is followed by the next command run in it, under a new daemon
        started there; this one would reconcile worktrees that no longer link to it, or write
        into a database file that was deleted and that no one will read again.
        """
        if not self.project.repo.is_dir():
            return (
                f"the repository {self.project.repo} is gone (moved or removed); "
                "start the daemon again where it is now: corral daemon start"
            )
        if not self.project.paths.db.exists():
            return f"the task database {self.project.paths.db} was removed; corral daemon start makes a new one"
        return None

    def reconcile_once(self, why: str) -> None:
        try:
            for problem in settle(self.project):
                self.event("reconcile-error", why=why, code="task-unreconciled", message=problem)
            notify.from_daemon(self.project, lambda doc: self.event(str(doc.pop("event")), **doc))
        except CorralError as exc:
            self.event("reconcile-error", why=why, code=exc.code, message=exc.message)
        except Exception as exc:  # a tick that fails must not end the daemon
            self.log.exception("reconcile failed")
            self.event("reconcile-error", why=why, code="internal-error", message=f"{type(exc).__name__}: {exc}")

    def prune_once(self) -> None:
        """Remove diagnostics past 90 days (never worktrees: that is `corral prune`'s, run by a person)."""
        from corral.engine.operations.prune import prune_diagnostics

        try:
            report = prune_diagnostics(self.project)
        except CorralError as exc:  # an unhealthy store: nothing was pruned, and the log says why
            self.log.warning("prune refused: %s", exc.message)
            self.event("prune-refused", code=exc.code, message=exc.message, hint=exc.hint)
            return
        except Exception as exc:  # a prune that fails must not end the daemon
            self.log.exception("prune failed")
            self.event("prune-error", message=f"{type(exc).__name__}: {exc}")
            return
        if report.removed or report.orphaned:
            self.event("pruned", diagnostics=len(report.removed), orphaned_tasks=len(report.orphaned))

    def run(self) -> None:
        fd = self.acquire()
        started = rfc3339(self.project.clock()) or ""
        self.event("started", pid=os.getpid())
        try:
            next_tick = 0.0
            next_prune = 0.0
            while not self.stop_event.is_set():
                now = time.monotonic()
                if now >= next_prune:
                    self.prune_once()
                    next_prune = now + self.prune_every
                if now >= next_tick:
                    lost = self.lost_footing()
                    if lost is not None:
                        self.log.warning("stopping: %s", lost)
                        self.event("project-gone", message=lost)
                        break
                    self.reconcile_once("tick")
                    self.guarded("write-state", lambda: self.write_state(started))
                    next_tick = now + self.tick
                self.guarded("watch", self.refresh_watch)
                timeout = max(0.0, min(next_tick - time.monotonic(), 1.0))
                ready, _, _ = select.select([*self.watched.values(), self._wake_r], [], [], timeout)
                gone = [pid for pid, pfd in self.watched.items() if pfd in ready]
                if gone:
                    for pid in gone:
                        os.close(self.watched.pop(pid))
                    self.event("supervisor-exited", pids=gone)
                    self.reconcile_once("supervisor-exited")
        finally:
            for pfd in self.watched.values():
                os.close(pfd)
            self.watched.clear()
            self.event("stopped", pid=os.getpid())
            os.close(fd)


def serve(
    project: Project, *, tick: float = TICK_SECONDS, on_event: Callable[[dict[str, Any]], None] | None = None
) -> None:
    daemon = Daemon(project, tick=tick, on_event=on_event)
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    daemon.run()


def start_detached(project: Project, timeout: float = 10.0) -> DaemonState:
    current = state(project)
    if current.running:
        raise DaemonRunning(
            f"A corral daemon already runs for this repository (pid {current.pid}).",
            hint="`corral daemon stop` stops it.",
        )
    pid = spawn_detached(
        [sys.executable, "-m", "corral", "--repo", str(project.repo), "daemon", "run"],
        log=project.paths.daemon_out,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = state(project)
        if current.running and current.pid == pid:
            return current
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    raise CorralError(
        "The daemon did not start.",
        code="daemon-failed",
        hint=f"See {project.paths.daemon_out} and {project.paths.daemon_log}.",
    )


def stop_running(project: Project, timeout: float = 10.0) -> DaemonState:
    current = state(project)
    if not current.running or current.pid is None:
        return current
    signal_daemon(current.pid, current.started_at, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and state(project).running:
        time.sleep(0.05)
    if state(project).running:
        signal_daemon(current.pid, current.started_at, signal.SIGKILL)
        time.sleep(0.2)
    return state(project)
