"""The ``Store`` protocol: the one interface between corral's engine and its records.

Reads and writes happen inside a transaction (:meth:`Store.read` /
:meth:`Store.write`), so a caller composes a status, its status change, a turn and
its attempts into one atomic write. Every implementation (SQLite, the default; PostgreSQL,
docs/store.md) passes ``tests/store/conformance.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from msgspec import Struct, field

from corral.domain.actors import Actor, Role
from corral.domain.records import (
    Attempt,
    AttemptOutcome,
    FailureEvidence,
    FeedbackDelivery,
    Note,
    ProcessRecord,
    RestingCause,
    Session,
    StatusChange,
    Task,
    TaskHead,
    Turn,
    Violation,
)
from corral.domain.status import Status
from corral.domain.violations import Decision
from corral.errors import StoreError

if TYPE_CHECKING:  # a store that runs no worker never loads them
    from corral.domain.team import Lease, LeaseState, Worker, WorkerState


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: Marks "leave this field as it is" where None is a meaningful value.
UNSET: Any = _Unset()


class NewTask(Struct, frozen=True):
    ref: str
    goal: str
    prompt: str = ""
    parent_id: str | None = None
    harness: str | None = None
    model: str | None = None
    target_branch: str | None = None
    protected: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


class Tx(Protocol):
    """One transaction. Reads see one snapshot; writes commit together or not at all."""

    def now(self) -> datetime:
        """The transaction's one timestamp: everything it writes agrees on "when"."""
        ...

    # -- tasks -------------------------------------------------------------------
    def get_task(self, task_id: str) -> Task | None: ...
    def task_by_ref(self, ref: str) -> Task | None: ...
    def tasks(self, statuses: Iterable[Status] | None = None) -> list[Task]: ...
    def match_tasks(self, prefix: str) -> list[Task]: ...
    def unreadable_tasks(self) -> list[tuple[str, str, str]]:
        """(id, ref, what is wrong) of every task row that does not decode: the reads of many tasks
        skip them, a read of one of them fails with ``task-row-unreadable``; ``doctor`` names them."""
        ...

    def recent_tasks(self, statuses: Iterable[Status], limit: int) -> list[Task]:
        """The ``limit`` tasks with these statuses changed last, newest first (a board's finished tasks)."""
        ...

    def task_heads(self, statuses: Iterable[Status]) -> list[TaskHead]:
        """The tasks in these statuses in ``tasks``' order, each as its id, ref, status and, for a
        working one, its current command's id: what the working sweep needs of every running turn,
        in one read, no task decoded."""
        ...

    def refs(self, near: str | None = None, limit: int = 2000) -> list[str]:
        """Every ref; with ``near``, a bounded set of candidates for a "did you mean"."""
        ...

    def refs_by_id(self, task_ids: Iterable[str]) -> dict[str, str]:
        """The ref of each of these tasks that exists, by id (one read for a whole list)."""
        ...

    def children(self, task_id: str) -> list[Task]: ...

    def insert_task(self, new: NewTask, actor: Actor, *, task_id: str | None = None) -> Task:
        """Create a task in backlog and its first status change (no ``from``)."""
        ...

    def update_task(
        self,
        task_id: str,
        *,
        goal: str = UNSET,
        prompt: str = UNSET,
        parent_id: str | None = UNSET,
        harness: str | None = UNSET,
        model: str | None = UNSET,
        target_branch: str | None = UNSET,
        protected: Sequence[str] = UNSET,
        metadata: dict[str, Any] = UNSET,
        touch: bool = True,
    ) -> Task: ...

    def set_status(
        self,
        task_id: str,
        to: Status,
        actor: Actor,
        reason: str | None = None,
        *,
        expected_from: Status | Iterable[Status] | None = None,
        resting_cause: RestingCause | None = UNSET,
    ) -> StatusChange | None:
        """Validate and write one transition with its status-change record.

        The same status again is a no-op: nothing is recorded and None is returned (a given
        ``resting_cause`` is still set).

        ``blocked`` and ``conflict`` are refused here: they are derived by :meth:`park`.
        ``resting_cause`` UNSET keeps the current cause when the task stays resting and
        clears it otherwise.
        """
        ...

    def park(
        self,
        task_id: str,
        actor: Actor,
        reason: str | None = None,
        *,
        expected_from: Status | Iterable[Status] | None = None,
        resting_cause: RestingCause | None = None,
    ) -> StatusChange | None:
        """The one park function: blocked or conflict, derived from the pending set.

        Returns None when the task already wears the derived label (no change made).
        """
        ...

    def set_resting_cause(self, task_id: str, cause: RestingCause | None) -> None: ...

    def status_changes(self, task_id: str, *, since: datetime | None = None) -> list[StatusChange]:
        """The task's history, oldest first; with ``since``, only the changes at or after it."""
        ...

    def changes_since(self, since: datetime) -> list[StatusChange]:
        """Every task's status changes at or after ``since``, oldest first (a board's day of activity)."""
        ...

    def delete_task(self, task_id: str) -> None:
        """Remove a task and every record kept for it (its history included)."""
        ...

    # -- sessions ----------------------------------------------------------------
    def insert_session(
        self,
        task_id: str,
        *,
        worktree: str | None = None,
        branch: str | None = None,
        base_commit: str | None = None,
    ) -> Session:
        """Start a new session and make it the task's current one."""
        ...

    def get_session(self, session_id: str) -> Session | None: ...
    def sessions(self, task_id: str) -> list[Session]: ...
    def sessions_by_id(self, session_ids: Iterable[str]) -> dict[str, Session]:
        """Each of these sessions that exists, by id (one read for a whole list)."""
        ...

    def interruption_counts(self, session_ids: Iterable[str]) -> dict[str, int]:
        """The consecutive interruptions of each of these sessions that exists, by id: all a list
        needs of a session (whether its breaker tripped), in one read, no session decoded."""
        ...

    def update_session(
        self,
        session_id: str,
        *,
        worktree: str | None = UNSET,
        branch: str | None = UNSET,
        base_commit: str | None = UNSET,
        git_start_sha: str | None = UNSET,
        harness_session_id: str | None = UNSET,
        interrupt_reason: str | None = UNSET,
        interrupt_exit_code: int | None = UNSET,
        interrupt_at: datetime | None = UNSET,
        interrupt_logs: str | None = UNSET,
        consecutive_interruptions: int = UNSET,
        auto_resumed: bool = UNSET,
        outcome: str | None = UNSET,
        ended_at: datetime | None = UNSET,
    ) -> Session: ...

    # -- turns and attempts ------------------------------------------------------
    def add_turn(
        self,
        task_id: str,
        *,
        role: Role,
        kind: str,
        content: str,
        actor: Actor | None = None,
        session_id: str | None = None,
        feedback_delivery: FeedbackDelivery = FeedbackDelivery.NONE,
        delivered: Sequence[str] = (),
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        usage: dict[str, Any] | None = None,
        failure: FailureEvidence | None = None,
        details: dict[str, Any] | None = None,
        command_id: str | None = None,
    ) -> Turn:
        """Append a turn with the task's next sequence number.

        ``command_id`` ties the human turn that launched a command to the agent turn that
        answers it; a second agent turn for one command is refused (a receipt is claimed once).
        """
        ...

    def get_turn(self, turn_id: str) -> Turn | None: ...
    def turn_by_command(self, command_id: str, role: Role) -> Turn | None: ...

    def current_command(self, task_id: str) -> Turn | None:
        """The human turn that launched the task's latest command (the one a supervisor may run now)."""
        ...

    def current_command_ids(self, task_ids: Iterable[str]) -> dict[str, str]:
        """Each task's latest command id, as ``current_command`` names it; tasks with none are left out."""
        ...

    def turns(self, task_id: str, *, last: int | None = None) -> list[Turn]:
        """The task's turns with their attempts, oldest first; with ``last``, only the latest ``last``."""
        ...

    def turn_count(self, task_id: str) -> int: ...
    def exchanges_before(self, task_id: str, sequence: int) -> int:
        """How many exchanges (domain/exchanges.py) began before the turn ``sequence``: every turn
        before it but an agent's answer to a human turn's command (or a lost turn's, by its log turn)."""
        ...

    def pending_feedback(self, session_id: str) -> list[Turn]: ...

    def mark_feedback_consumed(self, turn_ids: Iterable[str]) -> int:
        """Flip exactly these pending turns to consumed; returns how many changed."""
        ...

    def add_attempt(
        self,
        turn_id: str,
        *,
        number: int,
        started_at: datetime,
        ended_at: datetime | None,
        outcome: AttemptOutcome,
        failure_class: str | None = None,
        failure: FailureEvidence | None = None,
    ) -> Attempt: ...

    # -- violations --------------------------------------------------------------
    def violations(self, task_id: str, *, session_id: str | None = None) -> list[Violation]:
        """The violation records of the task's current session (or of ``session_id``)."""
        ...

    def pending_paths(self, task_id: str) -> list[str]: ...

    def record_violations(
        self, task_id: str, paths: Iterable[str], *, turn_id: str | None = None, check_from: str | None = None
    ) -> list[str]:
        """Record changed protected paths on the current session; returns those now pending."""
        ...

    def decide_violations(self, task_id: str, decisions: dict[str, Decision], actor: Actor) -> None:
        """Record decisions on pending files of the current session (sticky)."""
        ...

    # -- processes ---------------------------------------------------------------
    def register_process(
        self, task_id: str, kind: str, pid: int, command_id: str | None = None, *, owner: str | None = None
    ) -> None:
        """Record (or replace) the task's process of ``kind``; ``owner``: the host identity it runs on
        (the shared store; None on one host)."""
        ...

    def unregister_process(self, task_id: str, kind: str, *, pid: int | None = None) -> None:
        """Forget it (only when it is still ``pid``, if given)."""
        ...

    def processes(self, task_id: str | None = None) -> list[ProcessRecord]: ...

    # -- workers and leases (docs/workers.md) ------------------------------------
    def lease(self, task_id: str) -> Lease | None: ...
    def followed(self, task_id: str, command_id: str) -> tuple[Lease | None, bool, Status | None]:
        """What a worker following a turn looks at each poll, in one statement: the task's lease, whether the
        agent's turn of ``command_id`` is recorded, and the task's status (None: no such task)."""
        ...

    def leases(self, states: Iterable[LeaseState] | None = None) -> list[Lease]: ...
    def queue_turn(self, task_id: str, command_id: str, plan: dict[str, Any]) -> Lease:
        """Queue the task's command for a worker (a new epoch: any earlier claim is fenced off)."""
        ...

    def note_job(self, task_id: str, command_id: str, job_id: int) -> None:
        """The job queue's job that carries this queued command (a queued lease without one is re-sent)."""
        ...

    def claim_turn(self, task_id: str, command_id: str, worker_id: str, host: str) -> Lease | None:
        """Claim a queued command for ``worker_id`` under a new epoch; None when it is not queued (any more)."""
        ...

    def hold_local(self, task_id: str, command_id: str, owner: str, host: str) -> Lease:
        """The task's command launched on this host, not queued: the lease ``local``, held by ``owner``
        (its host identity, named ``host``) under a new epoch, in the transaction that records the turn."""
        ...

    def check_fence(self, task_id: str, epoch: int) -> Lease:
        """The task's lease when ``epoch`` still holds it (claimed, or local); else :class:`~corral.errors.LeaseLost`.

        Called inside the transaction that writes the turn's results, so a fenced-off worker
        writes nothing.
        """
        ...

    def set_lease_worktree(self, task_id: str, epoch: int, worktree: str) -> None: ...
    def release_turn(self, task_id: str, epoch: int) -> bool:
        """The turn under ``epoch`` ended and its work reached the remote (a local turn's: its files shipped);
        False when that epoch no longer holds it."""
        ...

    def ask_stop(self, task_id: str, epoch: int, actor: str) -> bool:
        """A person on another host asks for the turn ``epoch`` runs to stop (``actor``: who asked), for
        its worker (or the host of a local turn) to relay to its supervisor; False when that epoch no longer
        holds it (claimed or local)."""
        ...

    def note_unpushed(self, task_id: str, epoch: int, reason: str | None) -> None:
        """Why the turn's end has not reached the remote yet (None: it has), on the lease ``epoch`` holds;
        :class:`~corral.errors.LeaseLost` when it holds it no more."""
        ...

    def fence_off(self, task_id: str, epoch: int) -> bool:
        """Take a lost worker's claim away (the epoch moves on); False when someone else did first."""
        ...

    def beat_worker(self, worker_id: str, *, host: str, pid: int, state: WorkerState, lease_seconds: float) -> Worker:
        """Register the worker or record its heartbeat (the transaction's time)."""
        ...

    def get_worker(self, worker_id: str) -> Worker | None: ...
    def workers(self) -> list[Worker]: ...

    # -- what a reviewer on another host reads of a turn (docs/workers.md#shipped) -------
    def ship(self, task_id: str, path: str, offset: int, data: bytes) -> None:
        """One chunk of a task's file (``path`` relative to the project's state); offset 0 replaces the file."""
        ...

    def ship_files(self, task_id: str, chunks: Sequence[tuple[str, int, bytes]]) -> None:
        """:meth:`ship` of each ``(path, offset, data)`` in order, in a few statements however many there are
        (a file with a chunk at offset 0 is replaced from it)."""
        ...

    def unship(self, task_id: str, path: str) -> None:
        """Forget one shipped file (pruned where it was kept)."""
        ...

    def shipped_sizes(self, task_id: str) -> dict[str, int]:
        """How many bytes of each of the task's files the store holds."""
        ...

    def shipped(self, task_id: str, path: str, since: int = 0) -> list[tuple[int, bytes]]:
        """The chunks of one file that reach past ``since``, in order."""
        ...

    def shipped_past(self, task_id: str, since: Mapping[str, int]) -> dict[str, list[tuple[int, bytes]]]:
        """:meth:`shipped` of several of the task's files in one round trip: for each path of ``since``, its
        chunks that reach past the offset it maps to, in order (a path with none is left out)."""
        ...

    def set_live(self, task_id: str, command_id: str, doc: dict[str, Any]) -> None:
        """The running turn's live status (its supervisor's status and progress), as its worker saw it."""
        ...

    def live(self, task_ids: Iterable[str]) -> dict[str, tuple[str, dict[str, Any], datetime]]:
        """Each of these tasks' live status: its command id, the document, when it was written."""
        ...

    def get_doc(self, name: str) -> dict[str, Any] | None:
        """A document every host shares (the usage-limit pause: ``usage-limits``), None when none was put."""
        ...

    def put_doc(self, name: str, doc: dict[str, Any]) -> None: ...

    # -- notes -------------------------------------------------------------------
    def add_comment(self, task_id: str, actor: Actor, body: str) -> Note: ...
    def comments(self, task_id: str) -> list[Note]: ...
    def add_journal_entry(self, task_id: str, actor: Actor, body: str) -> Note: ...
    def journal(self, task_id: str) -> list[Note]: ...


class Store(Protocol):
    """A durable home for tasks and their whole history."""

    @property
    def location(self) -> str:
        """Where the records live, for messages (a file path, a DSN without secrets)."""
        ...

    def read(self) -> AbstractContextManager[Tx]: ...
    def write(self) -> AbstractContextManager[Tx]: ...
    def schema_version(self) -> int: ...
    def check(self) -> list[str]:
        """Integrity problems found, empty when healthy."""
        ...

    def health(self) -> list[StoreError]:
        """Every fault found now (damage, a file replaced under it, writes refused, a full disk),
        each a coded error naming the cause with a hint that loses nothing; empty when healthy."""
        ...

    def backup_to(self, dest: str) -> None:
        """A consistent copy of every record at ``dest`` (a new file, private to the user), taken online."""
        ...

    def change_mark(self) -> object:
        """A value that differs from the one asked before whenever a write of what a board shows (a
        task, its status changes, notes, lease or live turn) was committed in between, by any process
        on any host; it may also differ when nothing was. Cheap: live views ask several times a second."""
        ...

    def close(self) -> None: ...
