"""``corral worker``: claim queued turns from the shared store and run them on this host (docs/workers.md).

One worker per ``CORRAL_HOME`` (a lock file), serving the clones its person's own settings list
(``worker_projects``) and nothing else. Its id is made from the host and a random token the home
keeps, so a restarted worker is the same worker: it heartbeats on under the same id before its
lease runs out and re-adopts the turns it claimed (their supervisors ran on without it). Three loops:

- the job queue (procrastinate) hands it jobs, ``worker_turns`` at once; each job claims its
  turn under a new epoch and follows it to its end (``shared_store.claimed``);
- every third of a lease it heartbeats, stops any agent whose epoch was taken over, and follows
  again any turn it still holds whose job died (its agent is never left unwatched);
- every ``worker_settle_interval`` seconds (two by default) it settles each project (lost workers' turns
  are fenced off and resumed, auto-resume runs), as the daemon does; each job records its own turn's
  receipt the moment it lands. Like the lease, the period is data from its person's own settings.

SIGTERM or Ctrl-C drains: it claims nothing more, finishes the turns it runs, then says it stopped.
A second one while it drains hands its turns back: their work pushed, their agents stopped, each
recorded interrupted for another worker to resume, then it stops.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.adapters.jobs import JobQueue
from corral.adapters.locks import try_lock
from corral.domain.clock import rfc3339, utcnow
from corral.domain.team import BEATS_PER_LEASE, Lease, WorkerState
from corral.engine.api import Project, claimed, host_name, lookups, roster, settle, share_usage_pauses, worker_id
from corral.errors import CorralError, RefusedError, UsageError

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
        #: How often it settles each project (lost workers' turns, auto-resume). The turns it runs are
        #: recorded by the job that follows each one, as soon as their receipt lands.
        self.settle_seconds = float(first.config["worker_settle_interval"])
        self.projects: dict[str, Project] = {}
        for project in projects:
            if project.placement.queue_url() is None or project.identity is None:
                raise UsageError(
                    f"{project.repo}: a worker needs the shared PostgreSQL store (database_url) and a commit.",
                    code="workers-need-postgres",
                    hint="corral config set database_url postgresql://USER@HOST/DB",
                )
            self.projects[project.identity.key] = project
        urls = {p.placement.queue_url() for p in projects}
        if len(urls) != 1:
            raise UsageError(
                "Every project a worker serves must use the same database_url (its job queue is there).",
                code="worker-many-databases",
                hint="Run one worker per database, each with its own CORRAL_HOME and worker_projects.",
            )
        self.jobs = JobQueue(str(first.placement.queue_url()))
        self.stop = threading.Event()  # SIGTERM: drain
        self.hand_back = threading.Event()  # a second SIGTERM while draining: hand the turns back
        self.state = WorkerState.RUNNING
        self.running: dict[str, tuple[str, int]] = {}  # task id -> (project key, epoch)
        self.unwatched: set[str] = set()  # of those, the ones whose job died: followed again
        self.lock = threading.Lock()
        self.on_event = on_event or (lambda doc: None)

    # -- events --------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.on_event({"at": rfc3339(utcnow()), "event": kind, "worker": self.me.id, "host": self.host, **fields})

    # -- heartbeat ---------------------------------------------------------------------------
    def beat(self, state: WorkerState | None = None) -> None:
        for project in self.projects.values():
            roster.beat(
                project,
                self.me.id,
                host=self.host,
                pid=os.getpid(),
                state=state or self.state,
                lease_seconds=self.lease_seconds,
            )

    def heartbeat_loop(self) -> None:
        interval = self.lease_seconds / BEATS_PER_LEASE
        while not self.done.wait(interval):
            self.tick()

    def tick(self) -> None:
        """One heartbeat: beat, share the usage-limit pauses, stop the agents whose epoch was taken over, follow
        again the turns whose job died. Each step runs whatever became of the others: a pause that cannot be
        shared (or a beat that failed) must never leave a fenced-off agent running or a turn unwatched."""
        self._step(self.beat)
        for project in self.projects.values():
            self._step(share_usage_pauses, project)
        with self.lock:
            mine = dict(self.running)
        for key, project in self.projects.items():
            leases = {task: epoch for task, (k, epoch) in mine.items() if k == key}
            if leases:
                self._step(self._stop_fenced, project, leases)
                self._step(self.watch_again, project, key)

    def _step(self, step: Callable[..., object], *args: Any) -> None:
        """One step of a heartbeat: its failure said, never the loop's end (this loop keeps the leases)."""
        try:
            step(*args)
        except CorralError as exc:  # the store unreachable: the lease may run out; it says so when back
            self.event("heartbeat-failed", message=exc.message)
        except Exception as exc:  # it must outlive any one fault
            self.event("heartbeat-failed", message=f"{type(exc).__name__}: {exc}")

    def _stop_fenced(self, project: Project, leases: dict[str, int]) -> None:
        for task_id in claimed.stop_if_fenced(project, leases):
            self.event("lease-lost", task=task_id, message="taken over: its agent was stopped")

    # -- settling ------------------------------------------------------------------------------
    def settle_loop(self) -> None:
        while not self.done.wait(self.settle_seconds):
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
        except Exception as exc:  # the job died: the heartbeat loop follows its turn again
            self._died(task_id, exc)

    def _run(self, project: Project, task_id: str, command_id: str) -> None:
        assert project.identity is not None
        lease = claimed.claim(project, self.me, task_id, command_id)
        if lease is None:
            self.event("skipped", task=task_id, message="not queued any more")
            return
        with self.lock:
            self.running[task_id] = (project.identity.key, lease.epoch)
        ran = claimed.run_claimed(project, self.me, lease, say=self.event, hand_back=self.hand_back)
        self._forget(task_id)
        self.event("turn-" + ran.outcome, task=task_id, message=ran.detail)

    def _died(self, task_id: str, exc: Exception) -> None:
        """A job (or a follower) ended with an error: said, and its turn, while this worker holds it,
        left for the heartbeat loop to follow again, so its agent is never left unwatched."""
        if isinstance(exc, CorralError):
            self.event("turn-failed", task=task_id, message=exc.message, code=exc.code)
        else:
            self.event("turn-failed", task=task_id, message=f"{type(exc).__name__}: {exc}", code="internal-fault")
        with self.lock:
            if task_id in self.running:
                self.unwatched.add(task_id)

    def _forget(self, task_id: str) -> None:
        with self.lock:
            self.running.pop(task_id, None)
            self.unwatched.discard(task_id)

    def watch_again(self, project: Project, key: str) -> None:
        """Each turn of ``project`` this worker still holds whose job died: followed again (its receipt
        recorded, its work pushed, its lease let go), as after a restart."""
        with self.lock:
            again = {t: self.running[t][1] for t in self.unwatched if t in self.running and self.running[t][0] == key}
        if not again:
            return
        held = lookups.leases_of(project, again)
        for task_id, epoch in again.items():
            lease = held[task_id]
            if lease is None or lease.epoch != epoch or not lease.claimed or lease.worker_id != self.me.id:
                self._forget(task_id)  # let go, or taken over (its agent stopped above)
                continue
            with self.lock:
                self.unwatched.discard(task_id)
            self.event("adopt", task=task_id, epoch=epoch, message="its job ended early: followed again")
            self._follow(project, lease)

    def adopt(self) -> None:
        """The turns this worker claimed before a restart: followed to their end again."""
        for project in self.projects.values():
            mine = lookups.claimed_by(project, self.me.id)
            for lease in mine:
                assert project.identity is not None
                with self.lock:
                    self.running[lease.task_id] = (project.identity.key, lease.epoch)
                self.event("adopt", task=lease.task_id, epoch=lease.epoch)
                self._follow(project, lease)

    def _follow(self, project: Project, lease: Lease) -> None:
        threading.Thread(target=self._follow_adopted, args=(project, lease), daemon=True).start()

    def _follow_adopted(self, project: Project, lease: Lease) -> None:
        try:
            ran = claimed.resume_following(project, self.me, lease, say=self.event, hand_back=self.hand_back)
        except Exception as exc:
            self._died(lease.task_id, exc)
            return
        self._forget(lease.task_id)
        self.event("turn-" + ran.outcome, task=lease.task_id, message=ran.detail)

    # -- the whole ----------------------------------------------------------------------------
    def request_stop(self, *_: Any) -> None:
        """SIGTERM or Ctrl-C: the first drains (claims nothing more, finishes its turns); a second hands
        the turns back (pushed, stopped, interrupted for another worker) and stops."""
        if not self.stop.is_set():
            self.state = WorkerState.DRAINING
            self.event("draining", message="claims nothing more; finishing the turns it runs (again: hands them back)")
            self.stop.set()
        elif not self.hand_back.is_set():
            self.event("handing-back", message="pushing each turn's work, stopping its agent, letting it go")
            self.hand_back.set()

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running)

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
            self.jobs.ensure_schema()
            self.beat()
            self.event("started", projects=[str(p.repo) for p in self.projects.values()], turns=self.turns)
            for loop in (self.heartbeat_loop, self.settle_loop):
                thread = threading.Thread(target=loop, daemon=True)
                thread.start()
            self.adopt()
            self.jobs.run(
                self.handle,
                projects=list(self.projects),
                name=self.me.id,
                concurrency=self.turns,
                stop=self.stop,
                heartbeat_seconds=max(1.0, self.lease_seconds / BEATS_PER_LEASE),
            )
            # Every turn followed to its end (a job that died is followed again by the heartbeat loop).
            while self.busy():
                time.sleep(0.2)
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
