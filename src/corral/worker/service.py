"""``corral worker``: claim queued turns from the shared store and run them on this host (docs/workers.md).

One worker per ``CORRAL_HOME`` (a lock file), serving the clones its person's own settings list
(``worker_projects``) and nothing else. Its id is made from the host and the home, so a
restarted worker is the same worker: it heartbeats on under the same id before its lease runs
out and re-adopts the turns it claimed (their supervisors ran on without it). Three loops:

- the dispatch engine (procrastinate) hands it jobs, ``worker_turns`` at once; each job claims its
  turn under a new epoch and follows it to its end (``operations.claimed``);
- every third of a lease it heartbeats, and stops any agent whose epoch was taken over;
- every two seconds it settles each project (lost workers' turns are fenced off and resumed,
  auto-resume runs), as the daemon does; each job records its own turn's receipt the moment it lands.

SIGTERM or Ctrl-C drains: it claims nothing more, finishes the turns it runs, then says it stopped.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.adapters.jobs import Dispatch
from corral.adapters.locks import try_lock
from corral.domain.clock import rfc3339, utcnow
from corral.domain.team import BEATS_PER_LEASE, LeaseState, WorkerState
from corral.engine.operations import claimed
from corral.engine.operations.refresh import settle
from corral.engine.project import Project
from corral.engine.queue import host_name, worker_id
from corral.engine.runtime import usage_pause
from corral.errors import CorralError, RefusedError, UsageError

#: How often the worker settles each project (lost workers' turns, auto-resume). The turns it runs
#: are recorded by the job that follows each one, as soon as their receipt lands.
SETTLE_SECONDS = 2.0

Event = Callable[[dict[str, Any]], None]


class Worker:
    def __init__(self, home: Path, projects: list[Project], *, on_event: Event | None = None) -> None:
        if not projects:
            raise UsageError(
                "This worker serves no project: worker_projects lists none in your settings.",
                code="worker-no-projects",
                hint="corral config set worker_projects /path/to/clone (a clone of the repository, on this host)",
            )
        self.home = home
        first = projects[0]
        self.host = host_name(first)
        self.me = claimed.Me(worker_id(home, self.host), self.host)
        self.lease_seconds = float(first.config["lease_seconds"])
        self.turns = int(first.config["worker_turns"])
        self.projects: dict[str, Project] = {}
        for project in projects:
            if project.database_url is None or project.identity is None:
                raise UsageError(
                    f"{project.repo}: a worker needs the shared PostgreSQL store (database_url) and a commit.",
                    code="workers-need-postgres",
                    hint="corral config set database_url postgresql://USER@HOST/DB",
                )
            self.projects[project.identity.key] = project
        urls = {p.database_url for p in projects}
        if len(urls) != 1:
            raise UsageError(
                "Every project a worker serves must use the same database_url (its dispatch queue is there).",
                code="worker-many-databases",
                hint="Run one worker per database, each with its own CORRAL_HOME and worker_projects.",
            )
        self.dispatch = Dispatch(str(first.database_url))
        self.stop = threading.Event()  # SIGTERM: drain
        self.state = WorkerState.RUNNING
        self.running: dict[str, tuple[str, int]] = {}  # task id -> (project key, epoch)
        self.lock = threading.Lock()
        self.on_event = on_event or (lambda doc: None)
        self.threads: list[threading.Thread] = []

    # -- events --------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.on_event({"at": rfc3339(utcnow()), "event": kind, "worker": self.me.id, "host": self.host, **fields})

    # -- heartbeat ---------------------------------------------------------------------------
    def beat(self, state: WorkerState | None = None) -> None:
        for project in self.projects.values():
            with project.store.write() as tx:
                tx.beat_worker(
                    self.me.id,
                    host=self.host,
                    pid=os.getpid(),
                    state=state or self.state,
                    lease_seconds=self.lease_seconds,
                )

    def heartbeat_loop(self) -> None:
        interval = self.lease_seconds / BEATS_PER_LEASE
        while not self.done.wait(interval):
            try:
                self.beat()
                for project in self.projects.values():
                    usage_pause.share(project)
            except CorralError as exc:  # the store unreachable: the lease may run out; it says so when back
                self.event("heartbeat-failed", message=exc.message)
                continue
            with self.lock:
                mine = dict(self.running)
            for key, project in self.projects.items():
                leases = {task: epoch for task, (k, epoch) in mine.items() if k == key}
                if not leases:
                    continue
                try:
                    for task_id in claimed.stop_if_fenced(project, leases):
                        self.event("lease-lost", task=task_id, message="taken over: its agent was stopped")
                except CorralError as exc:
                    self.event("heartbeat-failed", message=exc.message)

    # -- settling ------------------------------------------------------------------------------
    def settle_loop(self) -> None:
        while not self.done.wait(SETTLE_SECONDS):
            for project in self.projects.values():
                try:
                    for problem in settle(project):
                        self.event("problem", project=str(project.repo), message=problem)
                except CorralError as exc:
                    self.event("problem", project=str(project.repo), message=exc.message)

    # -- jobs ------------------------------------------------------------------------------------
    def handle(self, job: dict[str, Any]) -> None:
        project = self.projects.get(str(job["project"]))
        if project is None:
            return  # never listened for: a queue of a project this worker does not serve
        task_id, command_id = str(job["task_id"]), str(job["command_id"])
        self.event("claim", task=task_id, command=command_id)
        try:
            self._run(project, task_id, command_id)
        except CorralError as exc:
            self.event("turn-failed", task=task_id, message=exc.message, code=exc.code)

    def _run(self, project: Project, task_id: str, command_id: str) -> None:
        assert project.identity is not None
        lease = claimed.claim(project, self.me, task_id, command_id)
        if lease is None:
            self.event("skipped", task=task_id, message="not queued any more")
            return
        with self.lock:
            self.running[task_id] = (project.identity.key, lease.epoch)
        try:
            ran = claimed.run_claimed(project, self.me, lease)
        finally:
            with self.lock:
                self.running.pop(task_id, None)
        self.event("turn-" + ran.outcome, task=task_id, message=ran.detail)

    def adopt(self) -> None:
        """The turns this worker claimed before a restart: followed to their end again."""
        for project in self.projects.values():
            with project.store.read() as tx:
                mine = [lease for lease in tx.leases([LeaseState.CLAIMED]) if lease.worker_id == self.me.id]
            for lease in mine:
                assert project.identity is not None
                with self.lock:
                    self.running[lease.task_id] = (project.identity.key, lease.epoch)
                self.event("adopt", task=lease.task_id, epoch=lease.epoch)
                thread = threading.Thread(target=self._follow_adopted, args=(project, lease), daemon=True)
                thread.start()
                self.threads.append(thread)

    def _follow_adopted(self, project: Project, lease: Any) -> None:
        try:
            ran = claimed.resume_following(project, lease)
            self.event("turn-" + ran.outcome, task=lease.task_id, message=ran.detail)
        except CorralError as exc:
            self.event("turn-failed", task=lease.task_id, message=exc.message, code=exc.code)
        finally:
            with self.lock:
                self.running.pop(lease.task_id, None)

    # -- the whole ----------------------------------------------------------------------------
    def request_stop(self, *_: Any) -> None:
        if not self.stop.is_set():
            self.state = WorkerState.DRAINING
            self.event("draining", message="claims nothing more; finishing the turns it runs")
            self.stop.set()

    def run(self) -> None:
        lock_fd = try_lock(next(iter(self.projects.values())).paths.worker_lock)
        if lock_fd is None:
            raise RefusedError(
                f"A corral worker already runs for {self.home}.",
                code="worker-running",
                hint="One worker per CORRAL_HOME; stop it first (SIGTERM), or use another CORRAL_HOME.",
            )
        self.done = threading.Event()
        previous = [signal.signal(s, self.request_stop) for s in (signal.SIGTERM, signal.SIGINT)]
        try:
            self.dispatch.ensure_schema()
            self.beat()
            self.event("started", projects=[str(p.repo) for p in self.projects.values()], turns=self.turns)
            for loop in (self.heartbeat_loop, self.settle_loop):
                thread = threading.Thread(target=loop, daemon=True)
                thread.start()
            self.adopt()
            self.dispatch.run(
                self.handle,
                projects=list(self.projects),
                name=self.me.id,
                concurrency=self.turns,
                stop=self.stop,
                heartbeat_seconds=max(1.0, self.lease_seconds / BEATS_PER_LEASE),
            )
            for thread in self.threads:
                thread.join()
        finally:
            self.done.set()
            for sig, handler in zip((signal.SIGTERM, signal.SIGINT), previous, strict=True):
                signal.signal(sig, handler)
            try:
                self.beat(WorkerState.STOPPED)
            except CorralError:
                pass  # its lease runs out instead
            self.event("stopped")
            os.close(lock_fd)
