"""Workers, leases and fencing epochs: the records and rules of turns that run on other hosts (docs/workers.md).

A turn queued for workers has one lease row per task. Its epoch only grows: it is bumped when a
turn is queued, when a worker claims it and when a lost worker's claim is fenced off, so a
worker that lost its lease holds an epoch no write will ever match again. A worker is lost when
its heartbeat is older than the lease it declared.

On the shared store a turn launched on a person's own host (``dispatch = local``) takes the same row,
``local`` and held by that host's identity, in the transaction that records the turn: the lease is
the one place that says which host owns a task's turn, and only that host judges its processes
(docs/workers.md#turns-run-on-your-own-host).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import msgspec
from msgspec import Struct, field

#: The reason a turn whose worker stopped heartbeating rests interrupted with (``show``, the breaker).
WORKER_LOST = "worker lost"
#: The cause of a turn a worker handed back on shutdown (a second SIGTERM or Ctrl-C while it drained).
HANDED_BACK = "handed-back"
#: The task metadata key of the host each session's harness session was made on (``{session id: host}``):
#: a worker on another host resumes it only when its transcript can be carried through the store
#: (``runtime/transcripts``), else starts a fresh one with the crash-context prompt.
HARNESS_HOST = "harness_host"
#: The task metadata key of the latest turn that took a harness session over from another host
#: (:class:`SessionCarry`): carried, or fresh and why (``show``).
HARNESS_CARRY = "harness_carry"
#: How many heartbeats fit in one lease: a worker beats this often, so one late beat never loses it.
BEATS_PER_LEASE = 3


class LeaseState(StrEnum):
    QUEUED = "queued"  # waiting for a worker to claim it
    CLAIMED = "claimed"  # a worker runs it under this epoch
    RELEASED = "released"  # the turn ended, or its worker was fenced off
    LOCAL = "local"  # launched on the host whose identity holds it, not queued: that host runs and judges it


#: The plan a local lease carries: the turn's own plan stays in its host's ``command.json``; this says the
#: lease is a local launch's, also once it is let go (an auto-resume of that task stays on its host).
LOCAL_PLAN: dict[str, Any] = {"local": True}


class WorkerState(StrEnum):
    RUNNING = "running"
    DRAINING = "draining"  # SIGTERM: claims nothing new, finishes what it runs
    STOPPED = "stopped"


class TurnPlan(Struct, frozen=True):
    """What a worker needs to launch a queued turn: the parts of the launch skeleton that are data.

    ``resume_after_crash``: the prompt's body is made on the worker, which sees whether the
    worktree is dirty; ``reverts``: the protected files the person chose to revert, applied there.
    """

    kind: str
    body: str
    target: str
    delivered: tuple[str, ...] = ()
    sync_before_work: bool = False
    announce_merge: bool = True
    read_only: bool = False
    resume_after_crash: bool = False
    pending: tuple[str, ...] = ()
    reverts: tuple[tuple[str, str | None], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The plan as a lease carries it: its fields by name (the tuples as JSON's lists)."""
        doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TurnPlan:
        """A lease's plan, validated by msgspec: a field missing or of the wrong type raises
        ``msgspec.ValidationError`` (a ``ValueError``) naming it."""
        return msgspec.convert(doc, cls)


class Lease(Struct, frozen=True):
    """A task's turn queued for workers, or claimed by one under ``epoch``.

    ``stop_by``: a person asked on another host to stop the turn (the actor), for its worker (or, for a
    ``local`` lease, the host that runs it) to relay; ``unpushed``: the turn ended, but its branch has
    not reached the remote yet (why), so the worker keeps the claim and tries again.

    A ``local`` lease names in ``worker_id`` the identity of the host that launched the turn (its
    ``CORRAL_HOME``'s, as a worker's id: :func:`~corral.engine.placement.host_id`) and in ``host`` its name; it
    holds the turn while the task works on ``command_id`` (:meth:`holds_turn`) until that host lets it go.
    """

    task_id: str
    command_id: str
    epoch: int
    state: LeaseState
    plan: dict[str, Any] = field(default_factory=dict)
    worker_id: str | None = None
    host: str | None = None
    worktree: str | None = None
    job_id: int | None = None
    queued_at: datetime | None = None
    claimed_at: datetime | None = None
    stop_by: str | None = None
    unpushed: str | None = None

    @property
    def claimed(self) -> bool:
        return self.state is LeaseState.CLAIMED

    @property
    def local(self) -> bool:
        """A local launch's lease (:data:`LOCAL_PLAN`), running or let go: never a worker's."""
        return self.state is LeaseState.LOCAL or self.plan.get("local") is True

    @property
    def held(self) -> bool:
        """A host holds it under its epoch: a worker's claim, or the launching host's local turn."""
        return self.state in (LeaseState.CLAIMED, LeaseState.LOCAL)

    def holds_turn(self, command_id: str | None) -> bool:
        """Whether this lease owns the turn of ``command_id`` (the task's current command, the task working):
        queued or claimed for workers (a worker's turn is queued after its commit and let go only once
        recorded and pushed), or local and of that very command (a local lease outlives its turn)."""
        if self.state in (LeaseState.QUEUED, LeaseState.CLAIMED):
            return True
        return self.state is LeaseState.LOCAL and command_id is not None and self.command_id == command_id

    def elsewhere(self, me: str | None) -> bool:
        """Held by another host than ``me`` (queued counts: no host of this one's runs it)."""
        return not (self.held and self.worker_id == me)

    def as_view(self) -> dict[str, Any]:
        """The lease as ``show --json`` gives it: a view, not its record (no task id or plan; ``local`` derived)."""
        return {
            "command_id": self.command_id,
            "epoch": self.epoch,
            "state": self.state.value,
            "worker_id": self.worker_id,
            "host": self.host,
            "worktree": self.worktree,
            "queued_at": None if self.queued_at is None else self.queued_at.isoformat(),
            "claimed_at": None if self.claimed_at is None else self.claimed_at.isoformat(),
            "stop_by": self.stop_by,
            "unpushed": self.unpushed,
            "local": self.local,
        }


class Worker(Struct, frozen=True):
    id: str
    host: str
    pid: int
    state: WorkerState
    lease_seconds: float
    started_at: datetime
    heartbeat_at: datetime

    def lost(self, now: datetime) -> bool:
        """Its heartbeat is older than the lease it declared: its claims may be taken over."""
        return (now - self.heartbeat_at).total_seconds() > self.lease_seconds

    def as_view(self, now: datetime | None = None) -> dict[str, Any]:
        """The worker as ``workers --json`` gives it: its fields, and with ``now`` whether it is ``lost``."""
        doc: dict[str, Any] = {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "state": self.state.value,
            "lease_seconds": self.lease_seconds,
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": self.heartbeat_at.isoformat(),
        }
        if now is not None:
            doc["lost"] = self.lost(now)
        return doc


def lease_lost(lease: Lease, workers: dict[str, Worker], now: datetime) -> bool:
    """A claimed lease whose worker is gone from the store, has stopped, or stopped heartbeating."""
    if not lease.claimed:
        return False
    worker = workers.get(lease.worker_id or "")
    return worker is None or worker.state is WorkerState.STOPPED or worker.lost(now)


class SessionCarry(Struct, frozen=True):
    """A worker's turn took over a harness session made on another host (``made_on``; None when no host
    was recorded) on ``host``: ``carried`` when the transcript came through the store and the turn
    resumes the same session, else the turn started a fresh one, and ``why`` says what stood in the way."""

    made_on: str | None
    host: str
    carried: bool
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The note as a task's metadata keeps it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> SessionCarry | None:
        """The note a task's metadata keeps, or None (no takeover, or a note without a string ``host`` and a
        boolean ``carried``).

        Deliberately tolerant of the two facts it may lack: a ``made_on`` or ``why`` that is not a string
        reads as None rather than losing the note.
        """
        doc = metadata.get(HARNESS_CARRY)
        if not isinstance(doc, dict):
            return None
        optional = {key: value if isinstance(value := doc.get(key), str) else None for key in ("made_on", "why")}
        try:
            return msgspec.convert({**doc, **optional}, cls)
        except msgspec.ValidationError:
            return None
