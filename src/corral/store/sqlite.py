"""The SQLite implementation of the ``Store`` protocol: one WAL file per repository.

Durability settings: WAL journal, ``synchronous=FULL`` (every commit is fsynced),
``BEGIN IMMEDIATE`` for writes (a writer takes the lock up front, so two writers
never deadlock on an upgrade), and a busy timeout so concurrent CLIs and the
daemon wait for each other instead of failing.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.domain.actors import Actor, Role, turn_actor
from corral.domain.clock import Clock, new_id, parse_time, rfc3339, utcnow
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
    Turn,
    Violation,
)
from corral.domain.status import PAUSED, RESTING, Status, check_transition
from corral.domain.violations import Decision, after_change, park_status
from corral.errors import (
    CorralError,
    RefusedError,
    StoreCorrupt,
    StoreDiskFull,
    StoreError,
    StoreIOError,
    StoreMissing,
    StoreReadOnly,
    StoreTooNew,
)
from corral.store.migrations import LATEST, MIGRATIONS
from corral.store.protocol import UNSET, NewTask

#: How long (seconds) a connection waits for another process's lock before a transaction
#: fails as ``store-busy``: concurrent CLIs and the daemon wait for each other this long.
BUSY_TIMEOUT = 10.0

#: Ids per ``IN (...)`` list in the batch reads: well under SQLite's bound on parameters.
_BATCH = 500

_TASK_COLUMNS = (
    "id, ref, goal, prompt, parent_id, status, harness, model, target_branch, protected, "
    "metadata, resting_cause, session_id, created_at, updated_at, last_interaction_at"
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _time(value: str | None) -> datetime | None:
    return parse_time(value)


def _req_time(value: str) -> datetime:
    parsed = parse_time(value)
    assert parsed is not None
    return parsed


_ROLES = {r.value: r for r in Role}
_ACTORS = {a.value: a for a in Actor}
_DELIVERIES = {d.value: d for d in FeedbackDelivery}
_OUTCOMES = {o.value: o for o in AttemptOutcome}
_STATUSES = {s.value: s for s in Status}


def _statuses(value: Status | Iterable[Status] | None) -> tuple[Status, ...] | None:
    if value is None:
        return None
    if isinstance(value, Status):
        return (value,)
    return tuple(value)


class _Decoded:
    """The records a store already decoded, by id with the row they came from.

    A command reads the same tasks several times (each reconciler sweep, then the listing):
    a row equal to the one a record was made from gives that record back (records are
    immutable), so each task is decoded once per process, however often it is read.
    """

    __slots__ = ("sessions", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[str, tuple[tuple[Any, ...], Task]] = {}
        self.sessions: dict[str, tuple[tuple[Any, ...], Session]] = {}


class SQLiteTx:
    """One transaction over an open connection; see ``corral.store.protocol.Tx``."""

    def __init__(
        self, db: sqlite3.Connection, clock: Clock, *, writable: bool, decoded: _Decoded | None = None
    ) -> None:
        self._db = db
        self._clock = clock
        self._writable = writable
        self._now: datetime | None = None
        self._decoded = decoded or _Decoded()

    # One timestamp per transaction: a status and its status change agree on "when".
    def now(self) -> datetime:
        if self._now is None:
            self._now = self._clock()
        return self._now

    def _write(self) -> None:
        if not self._writable:
            raise StoreError("internal: a write was attempted in a read transaction")

    def _one(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._db.execute(sql, args).fetchone()
        return row

    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return list(self._db.execute(sql, args).fetchall())

    def _each_in(self, sql: str, ids: Iterable[str]) -> Iterator[sqlite3.Row]:
        """The rows of ``sql`` (with one ``{marks}`` placeholder list) for every id, a batch at a time."""
        wanted = list(dict.fromkeys(ids))
        for i in range(0, len(wanted), _BATCH):
            part = wanted[i : i + _BATCH]
            yield from self._db.execute(sql.format(marks=",".join("?" * len(part))), part)

    # -- tasks -------------------------------------------------------------------
    def _task(self, row: sqlite3.Row) -> Task:
        key = tuple(row)
        seen = self._decoded.tasks.get(key[0])
        if seen is not None and seen[0] == key:
            return seen[1]
        task = self._decode_task(row)
        self._decoded.tasks[key[0]] = (key, task)
        return task

    @staticmethod
    def _decode_task(row: sqlite3.Row) -> Task:
        # By position (the order of _TASK_COLUMNS): ``list`` decodes thousands of these.
        protected, metadata, cause = row[9], row[10], _loads(row[11])
        return Task(
            id=row[0],
            ref=row[1],
            goal=row[2],
            prompt=row[3],
            parent_id=row[4],
            status=_STATUSES[row[5]],
            harness=row[6],
            model=row[7],
            target_branch=row[8],
            protected=() if protected == "[]" else tuple(_loads(protected) or ()),
            metadata={} if metadata == "{}" else (_loads(metadata) or {}),
            resting_cause=RestingCause.from_json(cause) if cause else None,
            session_id=row[12],
            created_at=_req_time(row[13]),
            updated_at=_req_time(row[14]),
            last_interaction_at=_req_time(row[15]),
        )

    def get_task(self, task_id: str) -> Task | None:
        row = self._one(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
        return self._task(row) if row else None

    def _require_task(self, task_id: str) -> Task:
        task = self.get_task(task_id)
        if task is None:
            from corral.errors import TaskNotFound

            raise TaskNotFound(task_id, [])
        return task

    def task_by_ref(self, ref: str) -> Task | None:
        row = self._one(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE ref = ?", (ref,))
        return self._task(row) if row else None

    def tasks(self, statuses: Iterable[Status] | None = None) -> list[Task]:
        if statuses is None:
            rows = self._all(f"SELECT {_TASK_COLUMNS} FROM tasks ORDER BY created_at, id")
        else:
            wanted = [s.value for s in statuses]
            marks = ",".join("?" * len(wanted))
            rows = self._all(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status IN ({marks}) ORDER BY created_at, id",
                wanted,
            )
        return [self._task(r) for r in rows]

    def recent_tasks(self, statuses: Iterable[Status], limit: int) -> list[Task]:
        wanted = [s.value for s in statuses]
        marks = ",".join("?" * len(wanted))
        rows = self._all(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status IN ({marks}) ORDER BY updated_at DESC, id DESC LIMIT ?",
            [*wanted, max(0, limit)],
        )
        return [self._task(r) for r in rows]

    def match_tasks(self, prefix: str) -> list[Task]:
        # A prefix is a range on the unique indexes (ref and id): [prefix, prefix + U+10FFFF).
        # Taken literally, so "%" and "_" match only themselves.
        upper = prefix + "\U0010ffff"
        rows = self._all(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE ref >= ? AND ref < ? "
            f"UNION SELECT {_TASK_COLUMNS} FROM tasks WHERE id >= ? AND id < ? ORDER BY created_at, id",
            (prefix, upper, prefix, upper),
        )
        return [self._task(r) for r in rows if r["ref"].startswith(prefix) or r["id"].startswith(prefix)]

    def refs(self, near: str | None = None, limit: int = 2000) -> list[str]:
        if near:
            # Candidates for "did you mean": refs that share the first letter, and unfinished ones.
            first = near[:1]
            rows = self._db.execute(
                "SELECT ref FROM (SELECT ref FROM tasks WHERE ref >= ? AND ref < ? LIMIT ?) "
                "UNION SELECT ref FROM tasks WHERE status NOT IN ('complete', 'abandoned')",
                (first, first + "\U0010ffff", limit),
            )
            return sorted(r[0] for r in rows)
        return [r[0] for r in self._db.execute("SELECT ref FROM tasks ORDER BY ref")]

    def refs_by_id(self, task_ids: Iterable[str]) -> dict[str, str]:
        return {r[0]: r[1] for r in self._each_in("SELECT id, ref FROM tasks WHERE id IN ({marks})", task_ids)}

    def children(self, task_id: str) -> list[Task]:
        rows = self._all(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE parent_id = ? ORDER BY created_at, id", (task_id,))
        return [self._task(r) for r in rows]

    def insert_task(self, new: NewTask, actor: Actor, *, task_id: str | None = None) -> Task:
        self._write()
        now = rfc3339(self.now())
        tid = task_id or new_id()
        try:
            self._db.execute(
                f"INSERT INTO tasks ({_TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    tid,
                    new.ref,
                    new.goal,
                    new.prompt,
                    new.parent_id,
                    Status.BACKLOG.value,
                    new.harness,
                    new.model,
                    new.target_branch,
                    _dumps(list(new.protected)),
                    _dumps(new.metadata),
                    None,
                    None,
                    now,
                    now,
                    now,
                ),
            )
        except sqlite3.IntegrityError as exc:
            if "tasks.ref" in str(exc):
                raise RefusedError(
                    f"A task with ref '{new.ref}' already exists.",
                    code="ref-taken",
                    hint="Pick another --ref, or omit it to have one made from the goal.",
                ) from exc
            raise
        self._change(tid, None, Status.BACKLOG, actor, "created")
        return self._require_task(tid)

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
    ) -> Task:
        self._write()
        sets: dict[str, Any] = {}
        for name, value in (
            ("goal", goal),
            ("prompt", prompt),
            ("parent_id", parent_id),
            ("harness", harness),
            ("model", model),
            ("target_branch", target_branch),
        ):
            if value is not UNSET:
                sets[name] = value
        if protected is not UNSET:
            sets["protected"] = _dumps(list(protected))
        if metadata is not UNSET:
            sets["metadata"] = _dumps(metadata)
        now = rfc3339(self.now())
        sets["updated_at"] = now
        if touch:
            sets["last_interaction_at"] = now
        self._require_task(task_id)
        cols = ", ".join(f"{k} = ?" for k in sets)
        self._db.execute(f"UPDATE tasks SET {cols} WHERE id = ?", (*sets.values(), task_id))
        return self._require_task(task_id)

    def _change(self, task_id: str, src: Status | None, dst: Status, actor: Actor, reason: str | None) -> StatusChange:
        at = self.now()
        self._db.execute(
            "INSERT INTO status_changes (task_id, from_status, to_status, actor, reason, at) VALUES (?,?,?,?,?,?)",
            (task_id, src.value if src else None, dst.value, actor.value, reason, rfc3339(at)),
        )
        return StatusChange(task_id, src, dst, actor, reason, at)

    @staticmethod
    def _expect(task: Task, expected_from: Status | Iterable[Status] | None) -> None:
        """Compare-and-set: refuse when another process moved the task since it was read."""
        expected = _statuses(expected_from)
        if expected is not None and task.status not in expected:
            raise RefusedError(
                f"The task is {task.status.value} now, not {' or '.join(s.value for s in expected)}; "
                "someone else changed it first.",
                code="status-changed",
                hint=f"Look at it with `corral show {task.ref}` and try again.",
            )

    def _transition(
        self,
        task_id: str,
        to: Status,
        actor: Actor,
        reason: str | None,
        expected_from: Status | Iterable[Status] | None,
        resting_cause: RestingCause | None,
    ) -> StatusChange:
        self._write()
        # Only the two columns a transition needs: this is the hot path of every status change.
        row = self._one("SELECT status, resting_cause FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            self._require_task(task_id)  # raises the not-found error
        assert row is not None
        current = Status(row[0])
        if expected_from is not None and current not in (_statuses(expected_from) or ()):
            self._expect(self._require_task(task_id), expected_from)
        check_transition(current, to, actor)
        if resting_cause is UNSET:
            cause_json = row[1] if to in RESTING else None
        else:
            cause_json = _dumps(resting_cause.to_json()) if resting_cause is not None else None
        now = rfc3339(self.now())
        self._db.execute(
            "UPDATE tasks SET status = ?, resting_cause = ?, updated_at = ?, last_interaction_at = ? WHERE id = ?",
            (to.value, cause_json, now, now, task_id),
        )
        return self._change(task_id, current, to, actor, reason)

    def set_status(
        self,
        task_id: str,
        to: Status,
        actor: Actor,
        reason: str | None = None,
        *,
        expected_from: Status | Iterable[Status] | None = None,
        resting_cause: RestingCause | None = UNSET,
    ) -> StatusChange:
        if to in PAUSED:
            raise StoreError(
                f"internal: {to.value} is derived from the violation set; park the task instead",
                code="internal-error",
            )
        return self._transition(task_id, to, actor, reason, expected_from, resting_cause)

    def park(
        self,
        task_id: str,
        actor: Actor,
        reason: str | None = None,
        *,
        expected_from: Status | Iterable[Status] | None = None,
        resting_cause: RestingCause | None = None,
    ) -> StatusChange | None:
        row = self._one(
            "SELECT t.status, (SELECT COUNT(*) FROM violations v WHERE v.session_id = t.session_id "
            "AND v.task_id = t.id AND v.decision = 'pending') FROM tasks t WHERE t.id = ?",
            (task_id,),
        )
        if row is None:
            self._require_task(task_id)  # raises the not-found error
        assert row is not None
        target = park_status(int(row[1]))
        if Status(row[0]) is target:
            self._expect(self._require_task(task_id), expected_from)
            if resting_cause is not None:
                self.set_resting_cause(task_id, resting_cause)
            return None
        return self._transition(task_id, target, actor, reason, expected_from, resting_cause)

    def set_resting_cause(self, task_id: str, cause: RestingCause | None) -> None:
        self._write()
        self._require_task(task_id)
        self._db.execute(
            "UPDATE tasks SET resting_cause = ?, updated_at = ? WHERE id = ?",
            (_dumps(cause.to_json()) if cause else None, rfc3339(self.now()), task_id),
        )

    def delete_task(self, task_id: str) -> None:
        self._write()
        self._require_task(task_id)
        db = self._db
        db.execute("DELETE FROM attempts WHERE turn_id IN (SELECT id FROM turns WHERE task_id = ?)", (task_id,))
        for table in ("violations", "turns", "notes", "processes", "status_changes"):
            db.execute(f"DELETE FROM {table} WHERE task_id = ?", (task_id,))
        db.execute("UPDATE tasks SET session_id = NULL WHERE id = ?", (task_id,))
        db.execute("DELETE FROM sessions WHERE task_id = ?", (task_id,))
        db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    def changes_since(self, since: datetime) -> list[StatusChange]:
        sql = "SELECT task_id, from_status, to_status, actor, reason, at FROM status_changes WHERE at >= ? ORDER BY id"
        statuses, actors = _STATUSES, _ACTORS
        return [
            StatusChange(task_id, statuses[src] if src else None, statuses[dst], actors[actor], reason, _req_time(at))
            for task_id, src, dst, actor, reason, at in self._db.execute(sql, (rfc3339(since),))
        ]

    def status_changes(self, task_id: str, *, since: datetime | None = None) -> list[StatusChange]:
        # By position, enums through dicts: ``show`` of a long history decodes thousands.
        sql = "SELECT from_status, to_status, actor, reason, at FROM status_changes WHERE task_id = ?"
        args: tuple[Any, ...] = (task_id,)
        if since is not None:
            sql += " AND at >= ?"  # fixed-width RFC 3339 text sorts as time
            args += (rfc3339(since),)
        statuses, actors = _STATUSES, _ACTORS
        return [
            StatusChange(
                task_id,
                statuses[src] if src else None,
                statuses[dst],
                actors[actor],
                reason,
                _req_time(at),
            )
            for src, dst, actor, reason, at in self._db.execute(sql + " ORDER BY id", args)
        ]

    # -- sessions ----------------------------------------------------------------
    def _session(self, row: sqlite3.Row) -> Session:
        key = tuple(row)
        seen = self._decoded.sessions.get(key[0])
        if seen is not None and seen[0] == key:
            return seen[1]
        session = self._decode_session(row)
        self._decoded.sessions[key[0]] = (key, session)
        return session

    @staticmethod
    def _decode_session(row: sqlite3.Row) -> Session:
        return Session(
            id=row["id"],
            task_id=row["task_id"],
            worktree=row["worktree"],
            branch=row["branch"],
            base_commit=row["base_commit"],
            git_start_sha=row["git_start_sha"],
            harness_session_id=row["harness_session_id"],
            interrupt_reason=row["interrupt_reason"],
            interrupt_exit_code=row["interrupt_exit_code"],
            interrupt_at=_time(row["interrupt_at"]),
            interrupt_logs=row["interrupt_logs"],
            consecutive_interruptions=row["consecutive_interruptions"],
            auto_resumed=bool(row["auto_resumed"]),
            outcome=row["outcome"],
            created_at=_req_time(row["created_at"]),
            ended_at=_time(row["ended_at"]),
        )

    def insert_session(
        self,
        task_id: str,
        *,
        worktree: str | None = None,
        branch: str | None = None,
        base_commit: str | None = None,
    ) -> Session:
        self._write()
        self._require_task(task_id)
        sid = new_id()
        now = rfc3339(self.now())
        self._db.execute(
            "INSERT INTO sessions (id, task_id, worktree, branch, base_commit, created_at) VALUES (?,?,?,?,?,?)",
            (sid, task_id, worktree, branch, base_commit, now),
        )
        self._db.execute("UPDATE tasks SET session_id = ?, updated_at = ? WHERE id = ?", (sid, now, task_id))
        session = self.get_session(sid)
        assert session is not None
        return session

    def get_session(self, session_id: str) -> Session | None:
        row = self._one("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return self._session(row) if row else None

    def sessions(self, task_id: str) -> list[Session]:
        rows = self._all("SELECT * FROM sessions WHERE task_id = ? ORDER BY created_at, rowid", (task_id,))
        return [self._session(r) for r in rows]

    def sessions_by_id(self, session_ids: Iterable[str]) -> dict[str, Session]:
        return {
            r["id"]: self._session(r)
            for r in self._each_in("SELECT * FROM sessions WHERE id IN ({marks})", session_ids)
        }

    def update_session(self, session_id: str, **fields: Any) -> Session:
        self._write()
        sets: dict[str, Any] = {}
        for name, value in fields.items():
            if value is UNSET:
                continue
            if name not in _SESSION_FIELDS:
                raise TypeError(f"unknown session field {name!r}")
            if isinstance(value, datetime):
                value = rfc3339(value)
            elif isinstance(value, bool):
                value = int(value)
            sets[name] = value
        if sets:
            cols = ", ".join(f"{k} = ?" for k in sets)
            cur = self._db.execute(f"UPDATE sessions SET {cols} WHERE id = ?", (*sets.values(), session_id))
            if cur.rowcount == 0:
                raise StoreError(f"internal: no session {session_id}", code="internal-error")
        session = self.get_session(session_id)
        if session is None:
            raise StoreError(f"internal: no session {session_id}", code="internal-error")
        return session

    # -- turns and attempts ------------------------------------------------------
    def _turn(self, row: sqlite3.Row, attempts: tuple[Attempt, ...] = ()) -> Turn:
        failure = _loads(row["failure"])
        return Turn(
            id=row["id"],
            task_id=row["task_id"],
            session_id=row["session_id"],
            sequence=row["sequence"],
            role=Role(row["role"]),
            actor=Actor(row["actor"]) if row["actor"] else None,
            kind=row["kind"],
            content=row["content"],
            feedback_delivery=FeedbackDelivery(row["feedback_delivery"]),
            delivered=tuple(_loads(row["delivered"]) or ()),
            started_at=_req_time(row["started_at"]),
            ended_at=_time(row["ended_at"]),
            usage=_loads(row["usage"]),
            failure=FailureEvidence.from_json(failure) if failure else None,
            details=_loads(row["details"]) or {},
            attempts=attempts,
            command_id=row["command_id"],
        )

    @staticmethod
    def _attempt(row: sqlite3.Row) -> Attempt:
        failure = _loads(row["failure"])
        return Attempt(
            turn_id=row["turn_id"],
            number=row["number"],
            started_at=_req_time(row["started_at"]),
            ended_at=_time(row["ended_at"]),
            outcome=AttemptOutcome(row["outcome"]),
            failure_class=row["failure_class"],
            failure=FailureEvidence.from_json(failure) if failure else None,
        )

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
        self._write()
        turn_actor(role, actor)
        self._require_task(task_id)
        (seq,) = self._db.execute(
            "SELECT COALESCE(MAX(sequence), 0) + 1 FROM turns WHERE task_id = ?", (task_id,)
        ).fetchone()
        tid = new_id()
        self._db.execute(
            "INSERT INTO turns (id, task_id, session_id, sequence, role, actor, kind, content, "
            "feedback_delivery, delivered, started_at, ended_at, usage, failure, details, command_id) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                tid,
                task_id,
                session_id,
                seq,
                role.value,
                actor.value if actor else None,
                kind,
                content,
                feedback_delivery.value,
                _dumps(list(delivered)),
                rfc3339(started_at or self.now()),
                rfc3339(ended_at),
                _dumps(usage) if usage is not None else None,
                _dumps(failure.to_json()) if failure else None,
                _dumps(details or {}),
                command_id,
            ),
        )
        now = rfc3339(self.now())
        self._db.execute("UPDATE tasks SET last_interaction_at = ?, updated_at = ? WHERE id = ?", (now, now, task_id))
        turn = self.get_turn(tid)
        assert turn is not None
        return turn

    def get_turn(self, turn_id: str) -> Turn | None:
        row = self._one("SELECT * FROM turns WHERE id = ?", (turn_id,))
        if row is None:
            return None
        attempts = tuple(
            self._attempt(a) for a in self._all("SELECT * FROM attempts WHERE turn_id = ? ORDER BY number", (turn_id,))
        )
        return self._turn(row, attempts)

    def current_command(self, task_id: str) -> Turn | None:
        row = self._one(
            "SELECT id FROM turns WHERE task_id = ? AND role = 'human' AND command_id IS NOT NULL "
            "ORDER BY sequence DESC LIMIT 1",
            (task_id,),
        )
        return self.get_turn(row[0]) if row else None

    def current_command_ids(self, task_ids: Iterable[str]) -> dict[str, str]:
        # A batch of tasks per query, each answered by its own indexed look-up: the reconciler
        # asks this of every working task on every pass, and needs the id alone.
        sql = (
            "SELECT id, (SELECT command_id FROM turns WHERE task_id = tasks.id AND role = 'human' "
            "AND command_id IS NOT NULL ORDER BY sequence DESC LIMIT 1) FROM tasks WHERE id IN ({marks})"
        )
        return {task_id: command_id for task_id, command_id in self._each_in(sql, task_ids) if command_id is not None}

    def turn_by_command(self, command_id: str, role: Role) -> Turn | None:
        row = self._one("SELECT id FROM turns WHERE command_id = ? AND role = ?", (command_id, role.value))
        return self.get_turn(row["id"]) if row else None

    def turn_count(self, task_id: str) -> int:
        (count,) = self._db.execute("SELECT COUNT(*) FROM turns WHERE task_id = ?", (task_id,)).fetchone()
        return int(count)

    def turns(self, task_id: str, *, last: int | None = None) -> list[Turn]:
        """Every turn of a task with its attempts, oldest first; with ``last``, only the latest ``last``.

        The show path reads a whole history at once, so this reads every attempt of the
        task in one query, decodes by column position, maps enums through dicts, skips the
        JSON parser for the common ``[]``/``{}``, and decodes each distinct failure-evidence
        text once (a turn's failure, its last attempt's and its retried attempts' often
        repeat one another).
        """
        first = 0
        if last is not None:
            if last <= 0:
                return []
            row = self._one(
                "SELECT sequence FROM turns WHERE task_id = ? ORDER BY sequence DESC LIMIT 1 OFFSET ?",
                (task_id, last - 1),
            )
            first = row[0] if row is not None else 0
        evidence: dict[str, FailureEvidence] = {}

        def failure(raw: str | None) -> FailureEvidence | None:
            if raw is None:
                return None
            found = evidence.get(raw)
            if found is None:
                data = json.loads(raw)
                if not data:
                    return None
                found = evidence[raw] = FailureEvidence.from_json(data)
            return found

        by_turn: dict[str, list[Attempt]] = {}
        for turn_id, number, started, ended, outcome, failure_class, failure_raw in self._db.execute(
            "SELECT a.turn_id, a.number, a.started_at, a.ended_at, a.outcome, a.failure_class, a.failure "
            "FROM attempts a JOIN turns t ON t.id = a.turn_id WHERE t.task_id = ? AND t.sequence >= ? "
            "ORDER BY a.turn_id, a.number",
            (task_id, first),
        ):
            by_turn.setdefault(turn_id, []).append(
                Attempt(
                    turn_id,
                    number,
                    _req_time(started),
                    _time(ended),
                    _OUTCOMES[outcome],
                    failure_class,
                    failure(failure_raw),
                )
            )
        out = []
        for (
            tid,
            task,
            session_id,
            sequence,
            role,
            actor,
            kind,
            content,
            delivery,
            delivered,
            started,
            ended,
            usage,
            failure_raw,
            details,
            command_id,
        ) in self._db.execute(
            "SELECT id, task_id, session_id, sequence, role, actor, kind, content, feedback_delivery, delivered, "
            "started_at, ended_at, usage, failure, details, command_id FROM turns "
            "WHERE task_id = ? AND sequence >= ? ORDER BY sequence",
            (task_id, first),
        ):
            out.append(
                Turn(
                    id=tid,
                    task_id=task,
                    session_id=session_id,
                    sequence=sequence,
                    role=_ROLES[role],
                    actor=_ACTORS[actor] if actor else None,
                    kind=kind,
                    content=content,
                    feedback_delivery=_DELIVERIES[delivery],
                    delivered=() if delivered == "[]" else tuple(_loads(delivered) or ()),
                    started_at=_req_time(started),
                    ended_at=_time(ended),
                    usage=_loads(usage),
                    failure=failure(failure_raw),
                    details={} if details == "{}" else (_loads(details) or {}),
                    attempts=tuple(by_turn.get(tid, ())),
                    command_id=command_id,
                )
            )
        return out

    def pending_feedback(self, session_id: str) -> list[Turn]:
        rows = self._all(
            "SELECT * FROM turns WHERE session_id = ? AND feedback_delivery = 'pending' ORDER BY sequence",
            (session_id,),
        )
        return [self._turn(r) for r in rows]

    def mark_feedback_consumed(self, turn_ids: Iterable[str]) -> int:
        self._write()
        changed = 0
        for tid in turn_ids:
            cur = self._db.execute(
                "UPDATE turns SET feedback_delivery = 'consumed' WHERE id = ? AND feedback_delivery = 'pending'",
                (tid,),
            )
            changed += cur.rowcount
        return changed

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
    ) -> Attempt:
        self._write()
        self._db.execute(
            "INSERT INTO attempts (turn_id, number, started_at, ended_at, outcome, failure_class, failure) "
            "VALUES (?,?,?,?,?,?,?)",
            (
                turn_id,
                number,
                rfc3339(started_at),
                rfc3339(ended_at),
                outcome.value,
                failure_class,
                _dumps(failure.to_json()) if failure else None,
            ),
        )
        return Attempt(turn_id, number, started_at, ended_at, outcome, failure_class, failure)

    # -- violations --------------------------------------------------------------
    @staticmethod
    def _violation(row: sqlite3.Row) -> Violation:
        return Violation(
            task_id=row["task_id"],
            session_id=row["session_id"],
            path=row["path"],
            turn_id=row["turn_id"],
            decision=Decision(row["decision"]),
            decided_by=Actor(row["decided_by"]) if row["decided_by"] else None,
            decided_at=_time(row["decided_at"]),
            created_at=_req_time(row["created_at"]),
            check_from=row["check_from"],
        )

    def _current_session_id(self, task_id: str) -> str | None:
        row = self._one("SELECT session_id FROM tasks WHERE id = ?", (task_id,))
        return row["session_id"] if row else None

    def violations(self, task_id: str, *, session_id: str | None = None) -> list[Violation]:
        sid = session_id or self._current_session_id(task_id)
        if sid is None:
            return []
        rows = self._all("SELECT * FROM violations WHERE task_id = ? AND session_id = ? ORDER BY path", (task_id, sid))
        return [self._violation(r) for r in rows]

    def pending_paths(self, task_id: str) -> list[str]:
        return [v.path for v in self.violations(task_id) if v.decision is Decision.PENDING]

    def record_violations(
        self, task_id: str, paths: Iterable[str], *, turn_id: str | None = None, check_from: str | None = None
    ) -> list[str]:
        self._write()
        sid = self._current_session_id(task_id)
        if sid is None:
            raise StoreError("internal: violations need a session", code="internal-error")
        current = {v.path: v.decision for v in self.violations(task_id)}
        now = rfc3339(self.now())
        for path in dict.fromkeys(paths):
            if after_change(current.get(path)) is not Decision.PENDING:
                continue
            self._db.execute(
                "INSERT INTO violations (task_id, session_id, path, turn_id, decision, created_at, check_from) "
                "VALUES (?,?,?,?, 'pending', ?, ?) ON CONFLICT (session_id, path) DO UPDATE SET "
                "decision = 'pending', turn_id = excluded.turn_id, decided_by = NULL, decided_at = NULL, "
                "check_from = excluded.check_from",
                (task_id, sid, path, turn_id, now, check_from),
            )
        return self.pending_paths(task_id)

    def decide_violations(self, task_id: str, decisions: dict[str, Decision], actor: Actor) -> None:
        self._write()
        sid = self._current_session_id(task_id)
        if sid is None:
            return
        now = rfc3339(self.now())
        for path, decision in decisions.items():
            if decision is Decision.PENDING:
                raise ValueError("a decision is approved or reverted")
            # Only pending rows change: decisions already made are sticky.
            self._db.execute(
                "UPDATE violations SET decision = ?, decided_by = ?, decided_at = ? "
                "WHERE session_id = ? AND path = ? AND decision = 'pending'",
                (decision.value, actor.value, now, sid, path),
            )

    # -- processes ---------------------------------------------------------------
    def register_process(self, task_id: str, kind: str, pid: int, command_id: str | None = None) -> None:
        self._write()
        self._db.execute(
            "INSERT INTO processes (task_id, kind, pid, command_id, started_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT (task_id, kind) DO UPDATE SET pid = excluded.pid, command_id = excluded.command_id, "
            "started_at = excluded.started_at",
            (task_id, kind, pid, command_id, rfc3339(self.now())),
        )

    def unregister_process(self, task_id: str, kind: str, *, pid: int | None = None) -> None:
        self._write()
        if pid is None:
            self._db.execute("DELETE FROM processes WHERE task_id = ? AND kind = ?", (task_id, kind))
        else:
            self._db.execute("DELETE FROM processes WHERE task_id = ? AND kind = ? AND pid = ?", (task_id, kind, pid))

    def processes(self, task_id: str | None = None) -> list[ProcessRecord]:
        if task_id is None:
            rows = self._all("SELECT * FROM processes ORDER BY started_at")
        else:
            rows = self._all("SELECT * FROM processes WHERE task_id = ? ORDER BY started_at", (task_id,))
        return [
            ProcessRecord(r["task_id"], r["kind"], r["pid"], r["command_id"], _req_time(r["started_at"])) for r in rows
        ]

    # -- notes -------------------------------------------------------------------
    def _add_note(self, kind: str, task_id: str, actor: Actor, body: str) -> Note:
        self._write()
        self._require_task(task_id)
        nid = new_id()
        at = self.now()
        self._db.execute(
            "INSERT INTO notes (id, task_id, kind, actor, body, at) VALUES (?,?,?,?,?,?)",
            (nid, task_id, kind, actor.value, body, rfc3339(at)),
        )
        return Note(nid, task_id, actor, body, at)

    def _notes(self, kind: str, task_id: str) -> list[Note]:
        rows = self._all(
            "SELECT id, task_id, actor, body, at FROM notes WHERE task_id = ? AND kind = ? ORDER BY at, rowid",
            (task_id, kind),
        )
        return [Note(r["id"], r["task_id"], Actor(r["actor"]), r["body"], _req_time(r["at"])) for r in rows]

    def add_comment(self, task_id: str, actor: Actor, body: str) -> Note:
        return self._add_note("comment", task_id, actor, body)

    def comments(self, task_id: str) -> list[Note]:
        return self._notes("comment", task_id)

    def add_journal_entry(self, task_id: str, actor: Actor, body: str) -> Note:
        return self._add_note("journal", task_id, actor, body)

    def journal(self, task_id: str) -> list[Note]:
        return self._notes("journal", task_id)


_SESSION_FIELDS = frozenset(
    {
        "worktree",
        "branch",
        "base_commit",
        "git_start_sha",
        "harness_session_id",
        "interrupt_reason",
        "interrupt_exit_code",
        "interrupt_at",
        "interrupt_logs",
        "consecutive_interruptions",
        "auto_resumed",
        "outcome",
        "ended_at",
    }
)


# -- what went wrong, in the file system's words ----------------------------------------------

#: Free bytes below which the database's file system counts as full (a transaction needs room).
MIN_FREE_BYTES = 1024 * 1024

#: ``FS_IOC_GETFLAGS`` and the inode flags it reports (linux/fs.h): immutable and append-only files.
_FS_IOC_GETFLAGS = 0x80086601
_FS_IMMUTABLE_FL = 0x10
_FS_APPEND_FL = 0x20

#: Tables a corral database has from its first migration on: a file without them is not one.
_CORRAL_TABLES = frozenset({"tasks", "sessions", "turns", "attempts", "status_changes", "notes", "schema_migrations"})


def _sidecars(path: str) -> tuple[str, str]:
    return path + "-wal", path + "-shm"


def _inode_flags(path: str) -> int:
    """The file's inode flags (``lsattr``), 0 when they cannot be read."""
    return _probe(path)[0]


def _probe(path: str) -> tuple[int, bool | None]:
    """(inode flags, opens read-write) of ``path``, found by a child process.

    Closing any descriptor of a file releases every POSIX lock this process holds on it, and
    SQLite's locks on the database, its -wal and its -shm are such locks: a connection that
    lost them lets the next process that closes the database take itself for the last one and
    delete the -wal under it. So this process never opens those files itself; a forked child
    (which holds no locks to lose) opens them, and answers through a pipe.
    """
    import fcntl
    import struct

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit (no cleanup of the parent's objects)
        try:
            os.close(read_end)
            flags, writable = 0, "-"
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                fd = None
            except OSError:
                fd = None
                writable = "0"
            if fd is not None:
                try:
                    flags = int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("l", 0)))[0])
                except OSError:
                    pass
                os.close(fd)
                try:
                    os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
                    writable = "1"
                except OSError:
                    writable = "0"
            os.write(write_end, f"{flags} {writable}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        answer = b""
        while chunk := os.read(read_end, 64):
            answer += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    try:
        flags_text, writable_text = answer.decode().split()
        return int(flags_text), None if writable_text == "-" else writable_text == "1"
    except ValueError:
        return 0, None


def _free_bytes(directory: str) -> int | None:
    try:
        info = os.statvfs(directory)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def _read_only_mount(directory: str) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _holders_of_deleted(path: str) -> list[int]:
    """Pids of processes that hold ``path`` open although it was deleted (``/proc/*/fd``)."""
    wanted = f"{os.path.realpath(path)} (deleted)"
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


class SQLiteStore:
    """A ``Store`` over one SQLite file (or ``:memory:`` for tests of the store alone).

    Every SQLite failure leaves as a coded :class:`~corral.errors.StoreError` naming the file and
    the real cause, found in the file system (a read-only mount, an immutable file, a full disk,
    a ``-wal`` deleted under a process that still holds it), never as a masking rollback error.
    ``create=False`` refuses a missing or empty file instead of starting a new database there.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utcnow,
        busy_timeout: float = BUSY_TIMEOUT,
        create: bool = True,
        restore_hint: str | None = None,
    ) -> None:
        """``busy_timeout``: seconds to wait for another process's lock before ``store-busy``.

        ``restore_hint``: how to get the history back (the newest backup and the command), for hints.
        """
        if busy_timeout < 0:
            raise ValueError("busy_timeout is a number of seconds, zero or more")
        self.path = str(path)
        self._clock = clock
        self.busy_timeout = busy_timeout
        self.restore_hint = restore_hint or "`corral restore BACKUP` puts a backup made by `corral backup` back"
        self._identity: tuple[int, int] | None = None
        self._decoded = _Decoded()
        if not create and self.path != ":memory:" and self.missing():
            raise StoreMissing(
                f"The corral database {self.path} is {self.missing()}.",
                hint=f"Nothing was changed. {self.restore_hint}.",
            )
        self._db = self._open()

    @property
    def location(self) -> str:
        return self.path

    def missing(self) -> str | None:
        """Why the file holds no database ("missing", "empty (0 bytes)"), or None when it has content."""
        size = _size(self.path)
        if size is None:
            return "missing" if not os.path.lexists(self.path) else None
        if size == 0 and not _size(self.path + "-wal"):
            return "empty (0 bytes)"
        return None

    # -- faults ---------------------------------------------------------------------------
    def _damaged_hint(self) -> str:
        return (
            f"Nothing was changed; keep the file, it holds the history. {self.restore_hint}; or rescue the rows: "
            f"`sqlite3 '{self.path}' .recover | sqlite3 '{self.path}.recovered'` then "
            f"`corral restore '{self.path}.recovered'` (the damaged file is kept as a backup)."
        )

    def _corrupt(self, exc: BaseException) -> StoreCorrupt:
        return StoreCorrupt(f"The corral database {self.path} cannot be read ({exc}).", hint=self._damaged_hint())

    def _not_utf8(self, exc: BaseException) -> StoreCorrupt:
        if isinstance(exc, UnicodeDecodeError):
            where = f"{exc.reason} at byte {exc.start}"
        else:  # sqlite3's "Could not decode to UTF-8 column 'goal' with text '…'": the column, not the text
            column = re.search(r"column '([^']*)'", str(exc))
            where = f"in column {column.group(1)}" if column else "in a column"
        return StoreCorrupt(
            f"The corral database {self.path} has damaged bytes: a text value is not UTF-8 "
            f"({where}); its pages are intact, a value in them is not.",
            hint=self._damaged_hint(),
        )

    def _read_only_cause(self) -> tuple[str, str]:
        """Why writes are refused, and how to allow them again (nothing is lost either way)."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if self._identity is not None and self._moved():
            return (
                "the file was deleted or replaced while corral had it open",
                f"put the file back at {self.path}, or {self.restore_hint}",
            )
        if _read_only_mount(directory):
            return "its file system is mounted read-only", f"remount {directory} read-write"
        for name in (self.path, *_sidecars(self.path)):
            flags = _inode_flags(name)
            if flags & _FS_IMMUTABLE_FL:
                return f"{name} is immutable (chattr +i)", f"chattr -i '{name}'"
            if flags & _FS_APPEND_FL:
                return f"{name} is append-only (chattr +a)", f"chattr -a '{name}'"
        if not os.access(directory, os.W_OK):
            return f"its directory {directory} is not writable by this user", f"chmod u+w '{directory}'"
        for name in (self.path, *_sidecars(self.path)):
            if os.path.exists(name) and not os.access(name, os.W_OK):
                return f"{name} is not writable by this user", f"chmod u+w '{name}'"
        db = getattr(self, "_db", None)
        if db is not None:
            try:
                if db.execute("PRAGMA query_only").fetchone()[0]:
                    return "the connection is query-only (PRAGMA query_only)", "open it without query_only"
            except sqlite3.Error:
                pass
        return "the file system refused the write", "make the file and its directory writable"

    def _moved(self) -> bool:
        try:
            info = os.stat(self.path)
        except OSError:
            return True
        return (info.st_dev, info.st_ino) != self._identity

    def _full(self, exc: BaseException | None = None) -> StoreDiskFull:
        directory = os.path.dirname(os.path.abspath(self.path))
        free = _free_bytes(directory)
        told = f" ({exc})" if exc else ""
        return StoreDiskFull(
            f"The disk holding the corral database {self.path} is full{told}: "
            f"{'unknown' if free is None else f'{free:,} bytes'} free.",
            hint=(
                f"Nothing was written (the transaction rolled back). Free space on that disk (`df -h '{directory}'`), "
                "then run the command again; do not delete corral.db-wal or corral.db-shm, they hold recent changes."
            ),
        )

    def _io(self, exc: BaseException) -> StoreError:
        """A ``disk I/O error``, named by what the file system shows: a deleted -wal, a full or read-only disk."""
        wal, _shm = _sidecars(self.path)
        holders = _holders_of_deleted(wal)
        if holders or (self._identity is not None and not os.path.exists(wal) and self._wal_mode()):
            return self._deleted_wal(holders, exc)
        directory = os.path.dirname(os.path.abspath(self.path))
        free = _free_bytes(directory)
        if free is not None and free < MIN_FREE_BYTES:
            return self._full(exc)
        if _read_only_mount(directory):
            cause, fix = self._read_only_cause()
            return self._read_only(exc, cause, fix)
        return StoreIOError(
            f"Reading or writing the corral database {self.path} failed ({exc}).",
            hint=f"Nothing was changed on purpose. Check the disk (`dmesg`, `df -h '{directory}'`); "
            f"`corral doctor` checks the file; {self.restore_hint}.",
        )

    def _deleted_wal(self, holders: list[int], exc: BaseException | None = None) -> StoreIOError:
        wal = self.path + "-wal"
        who = f"process {', '.join(map(str, holders))} still holds" if holders else "this process holds"
        told = f" ({exc})" if exc else ""
        return StoreIOError(
            f"The corral database's write-ahead log {wal} was deleted while open{told}: "
            f"{who} the deleted log, with the newest changes.",
            hint=(
                "Do not delete corral.db-wal or corral.db-shm. Stop that process cleanly (`corral daemon stop` "
                "for the daemon): as the last connection closes, SQLite writes its log back into "
                f"{self.path}. Then run the command again."
            ),
        )

    def _wal_mode(self) -> bool:
        db = getattr(self, "_db", None)
        try:
            return db is not None and str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
        except sqlite3.Error:
            return False

    def _read_only(self, exc: BaseException | None, cause: str, fix: str) -> StoreReadOnly:
        told = f" ({exc})" if exc else ""
        return StoreReadOnly(
            f"The corral database {self.path} cannot be written{told}: {cause}.",
            hint=f"Nothing was written. To let corral write again: {fix}; then run the command again.",
        )

    def _fault(self, exc: BaseException) -> CorralError:
        """The coded error for a failure of SQLite (or of decoding what it returned)."""
        if isinstance(exc, CorralError):
            return exc
        if isinstance(exc, UnicodeDecodeError) or str(exc).startswith("Could not decode to UTF-8"):
            return self._not_utf8(exc)
        name = str(getattr(exc, "sqlite_errorname", "") or "")
        if name in ("SQLITE_BUSY", "SQLITE_LOCKED") or name.startswith(("SQLITE_BUSY_", "SQLITE_LOCKED_")):
            return StoreError(
                f"The corral database {self.path} is busy ({exc}).",
                code="store-busy",
                hint="Another corral process holds it; try again in a moment.",
            )
        if name.startswith("SQLITE_FULL"):
            return self._full(exc)
        if name.startswith("SQLITE_READONLY"):
            cause, fix = self._read_only_cause()
            return self._read_only(exc, cause, fix)
        if name.startswith("SQLITE_IOERR"):
            return self._io(exc)
        if name.startswith("SQLITE_CANTOPEN"):
            directory = os.path.dirname(os.path.abspath(self.path))
            if _read_only_mount(directory) or not os.access(directory, os.W_OK):
                cause, fix = self._read_only_cause()
                return self._read_only(exc, cause, fix)
            return StoreIOError(
                f"The corral database {self.path} cannot be opened ({exc}).",
                hint=f"Nothing was changed. Check that {directory} exists and is yours; {self.restore_hint}.",
            )
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or not name:
            return self._corrupt(exc)
        return StoreError(f"The corral database {self.path} failed: {exc} ({name}).", hint=self._damaged_hint())

    # -- opening ------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = Path(self.path).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"corral cannot create its state directory {parent}: {exc.strerror}.",
                    code="state-dir-unusable",
                    hint="Point CORRAL_HOME at a writable local directory.",
                ) from exc
            wal, shm = _sidecars(self.path)
            # A -shm without its -wal: the log was deleted. If a process still holds it, opening
            # would let SQLite rebuild the index without it — a stale view, then two histories.
            if os.path.exists(shm) and not os.path.exists(wal):
                holders = _holders_of_deleted(wal)
                if holders:
                    raise self._deleted_wal(holders)
        try:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._fault(exc) from exc
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout * 1000)}")
            # Refuse a newer schema before anything (even the journal mode) touches the file.
            version = self._version(db)
            if version > LATEST:
                raise self._too_new(version)
            if self.path != ":memory:":
                mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(
                        f"The corral database {self.path} could not switch to WAL mode (got {mode}).",
                        hint="Put CORRAL_HOME on a local disk that supports shared memory files.",
                    )
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            self._migrate(db)
            if self.path != ":memory:":
                info = os.stat(self.path)
                self._identity = (info.st_dev, info.st_ino)
        except CorralError:
            db.close()
            raise
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            db.close()
            raise self._fault(exc) from exc
        except OSError as exc:
            db.close()
            raise StoreIOError(f"The corral database {self.path} vanished as it was opened: {exc.strerror}.") from exc
        return db

    @staticmethod
    def _version(db: sqlite3.Connection) -> int:
        exists = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if not exists:
            return 0
        (version,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(version)

    def _too_new(self, version: int) -> StoreTooNew:
        return StoreTooNew(
            f"The corral database {self.path} has schema version {version}, newer than this corral "
            f"understands (up to {LATEST}).",
            hint="Upgrade corral (pip install -U corral) to the version that wrote it; nothing was changed.",
        )

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = self._version(db)
        if version > LATEST:
            raise self._too_new(version)
        if version == LATEST:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT"
            )
            version = self._version(db)  # another process may have migrated meanwhile
            if version > LATEST:
                raise self._too_new(version)
            for number, name, migration in MIGRATIONS:
                if number <= version:
                    continue
                migration(db)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?,?,?)",
                    (number, name, rfc3339(self._clock())),
                )
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def schema_version(self) -> int:
        try:
            return self._version(self._db)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise self._fault(exc) from exc

    @contextmanager
    def _tx(self, begin: str, writable: bool) -> Iterator[SQLiteTx]:
        try:
            self._db.execute(begin)
        except sqlite3.Error as exc:
            raise self._fault(exc) from exc
        tx = SQLiteTx(self._db, self._clock, writable=writable, decoded=self._decoded)
        try:
            yield tx
        except sqlite3.IntegrityError:
            _rollback(self._db)
            raise  # a constraint a caller broke: a bug to see as it is, not a fault of the disk
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            # SQLite may have rolled back already (an I/O error does): a second ROLLBACK would
            # replace the real cause with "cannot rollback - no transaction is active".
            _rollback(self._db)
            raise self._fault(exc) from exc
        except BaseException:
            _rollback(self._db)
            raise
        else:
            if writable:
                crashpoints.hit("store.before-commit")
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(self._db)
                raise self._fault(exc) from exc
            if writable:
                crashpoints.hit("store.after-commit")

    def read(self) -> AbstractContextManager[SQLiteTx]:
        return self._tx("BEGIN DEFERRED", writable=False)

    def write(self) -> AbstractContextManager[SQLiteTx]:
        return self._tx("BEGIN IMMEDIATE", writable=True)

    # -- health ---------------------------------------------------------------------------
    def check(self) -> list[str]:
        try:
            problems = [r[0] for r in self._db.execute("PRAGMA quick_check") if r[0] != "ok"]
            problems += [
                f"foreign key: {r[0]} row {r[1]} -> {r[2]}" for r in self._db.execute("PRAGMA foreign_key_check")
            ]
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            problems = [str(self._fault(exc).message)]
        return problems

    def _undecodable(self) -> list[str]:
        """Where a text value is not UTF-8 (``quick_check`` does not look inside values)."""
        found: list[str] = []
        wal, shm = _sidecars(self.path)
        if not os.path.exists(self.path) or (os.path.exists(shm) and not os.path.exists(wal)):
            return found  # a second connection on a deleted -wal would rebuild the index without it
        # A connection of its own: the shared one may be reading in another thread meanwhile.
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.busy_timeout)
        db.text_factory = bytes
        try:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                name = table.decode("utf-8", "replace") if isinstance(table, bytes) else str(table)
                for row in db.execute(f'SELECT rowid, * FROM "{name}"'):
                    for value in row[1:]:
                        if isinstance(value, bytes):
                            try:
                                value.decode("utf-8")
                            except UnicodeDecodeError as exc:
                                found.append(f"table {name} row {row[0]}: text that is not UTF-8 ({exc.reason})")
                                break
                    if len(found) >= 10:
                        return found
        finally:
            db.close()
        return found

    def health(self) -> list[StoreError]:
        """Every fault of the database found now, each a coded error with its hint; empty when healthy.

        Beyond :meth:`check`: damaged text values, the file replaced or deleted since it was
        opened, a deleted ``-wal``, a file or mount that refuses writes, a full disk.
        """
        if self.path == ":memory:":
            return [StoreCorrupt(p, hint=self._damaged_hint()) for p in self.check()]
        faults: list[StoreError] = []
        if self._moved():
            faults.append(
                StoreMissing(
                    f"The corral database {self.path} was deleted or replaced after corral opened it.",
                    hint=f"Nothing was changed. Put the file back, or {self.restore_hint}; then restart this process.",
                )
            )
        try:
            problems = self.check()
            problems += self._undecodable()
        except sqlite3.Error as exc:
            found = self._fault(exc)
            faults.append(found if isinstance(found, StoreError) else self._corrupt(exc))
            problems = []
        if problems:
            faults.append(
                StoreCorrupt(
                    f"The corral database {self.path} is damaged: {'; '.join(problems[:3])}.", hint=self._damaged_hint()
                )
            )
        wal, _shm = _sidecars(self.path)
        holders = _holders_of_deleted(wal)
        if holders or (not os.path.exists(wal) and self._wal_mode()):
            faults.append(self._deleted_wal(holders))
        refused = self._write_refused()
        if refused:
            faults.append(self._read_only(None, *refused))
        free = _free_bytes(os.path.dirname(os.path.abspath(self.path)))
        if free is not None and free < MIN_FREE_BYTES:
            faults.append(self._full())
        return faults

    def _write_refused(self) -> tuple[str, str] | None:
        """Why a write would be refused now (cause, fix), found without writing; None when it would not."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if _read_only_mount(directory):
            return self._read_only_cause()
        for name in (self.path, *_sidecars(self.path)):
            flags, writable = _probe(name)
            if flags & (_FS_IMMUTABLE_FL | _FS_APPEND_FL) or writable is False:
                return self._read_only_cause()
        try:
            if self._db.execute("PRAGMA query_only").fetchone()[0]:
                return self._read_only_cause()
        except sqlite3.Error:
            pass
        if not os.access(directory, os.W_OK):
            return self._read_only_cause()
        return None

    # -- backup and restore -----------------------------------------------------------------
    def backup_to(self, dest: str | Path) -> None:
        """A consistent copy of the whole database at ``dest`` (0600, one self-contained file).

        Through SQLite's online backup API: other processes may read and write meanwhile.
        ``dest`` must not exist; a temp file beside it is renamed into place when complete.
        """
        target = Path(dest)
        if target.exists():
            raise StoreError(f"{target} already exists; corral never overwrites a backup.", code="backup-exists")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            copy = sqlite3.connect(tmp, isolation_level=None)
            try:
                self._db.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
            finally:
                copy.close()
            _fsync(tmp)
            os.replace(tmp, target)
            _fsync(str(target.parent))
        except sqlite3.Error as exc:
            _unlink(tmp)
            raise self._fault(exc) from exc
        except OSError as exc:
            _unlink(tmp)
            if exc.errno == errno.ENOSPC:
                raise self._full(exc) from exc
            raise StoreIOError(f"The backup {target} could not be written: {exc.strerror}.") from exc

    @staticmethod
    def verify_file(path: str | Path) -> int:
        """The schema version of a corral database at ``path``, read-only; refused when it is not one."""
        where = str(path)
        hint = "Nothing was changed. Name a file made by `corral backup` (they are in the state directory's backups/)."
        if not os.path.isfile(where) or _size(where) == 0:
            raise StoreMissing(f"{where} is not a file with a database in it.", hint=hint)
        try:
            with closing(sqlite3.connect(f"file:{where}?mode=ro", uri=True, isolation_level=None)) as db:
                problems = [r[0] for r in db.execute("PRAGMA quick_check") if r[0] != "ok"]
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                version = SQLiteStore._version(db) if "schema_migrations" in tables else 0
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise StoreCorrupt(f"{where} is not a usable corral database ({exc}).", hint=hint) from exc
        if problems:
            raise StoreCorrupt(f"{where} is damaged: {'; '.join(problems[:3])}.", hint=hint)
        lacking = sorted(_CORRAL_TABLES - tables)
        if lacking:
            raise StoreCorrupt(
                f"{where} is an SQLite file but not a corral database (no {', '.join(lacking)}).", hint=hint
            )
        if version > LATEST:
            raise StoreTooNew(
                f"{where} has schema version {version}, newer than this corral understands (up to {LATEST}).",
                hint="Nothing was changed. Upgrade corral to the version that wrote it, then restore it.",
            )
        return version

    @staticmethod
    def restore_file(db_path: str | Path, source: str | Path, aside: str | Path) -> str | None:
        """Put the database at ``source`` (verified) in place of ``db_path``; the current one kept at ``aside``.

        No connection may be open on ``db_path`` (the caller makes sure). The current file is
        copied to ``aside`` first — through the backup API when it opens, else byte for byte
        with its ``-wal`` — so nothing is lost; returns where it was kept (None: there was none).
        """
        target, src, keep = str(db_path), str(source), Path(aside)
        SQLiteStore.verify_file(src)
        tmp = f"{target}.restoring.{os.getpid()}"
        _unlink(tmp)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        try:
            with (
                closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as origin,
                closing(sqlite3.connect(tmp)) as new,
            ):
                origin.backup(new)
                new.execute("PRAGMA journal_mode = DELETE")
            _fsync(tmp)
            kept = _keep_aside(target, keep)
            for sidecar in _sidecars(target):
                _unlink(sidecar)  # a log of the old file must never be replayed into the new one
            os.replace(tmp, target)
            _fsync(os.path.dirname(os.path.abspath(target)))
        except BaseException:
            _unlink(tmp)
            raise
        return kept

    def close(self) -> None:
        self._db.close()


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open; SQLite ends some itself (an I/O error, a full disk)."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the error being raised says what went wrong; this one would hide it


def _fsync(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _keep_aside(target: str, aside: Path) -> str | None:
    """Copy the database at ``target`` to ``aside`` (0600) before it is replaced; where it went, or None."""
    if not os.path.lexists(target) or (_size(target) == 0 and not _size(target + "-wal")):
        return None  # nothing there to keep: an empty file holds no history
    aside.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as old:
            old.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            os.close(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            with closing(sqlite3.connect(aside)) as copy:
                old.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error:
        # It does not open as a database: keep its bytes, and its -wal beside them.
        import shutil  # only here: keeping a broken database's bytes

        _unlink(aside)
        for suffix in ("", "-wal"):
            if os.path.exists(target + suffix):
                fd = os.open(str(aside) + suffix, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(target + suffix, "rb") as src, os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                    dst.flush()
                    os.fsync(dst.fileno())
    _fsync(str(aside))
    return str(aside)
