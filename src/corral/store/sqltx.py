"""The transaction logic every SQL store shares: one ``Tx`` over a connection, in standard SQL.

``SQLiteStore`` and ``PostgresStore`` differ in how they open, begin, commit and diagnose a
connection; what a transaction reads and writes is the same SQL, written once here. A dialect
subclass supplies the two things that differ inside a transaction: which error is a taken ref,
and how a statement that may fail is isolated (PostgreSQL aborts a transaction on any error,
so a refused statement runs inside a savepoint there). The connection is anything with
``execute(sql, args)`` returning a cursor (``fetchone``, ``fetchall``, iteration, ``rowcount``)
whose rows index by position and by column name; parameters are written ``?``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from corral.domain.actors import Actor, Role, turn_actor
from corral.domain.clock import Clock, new_id, parse_time, rfc3339, stamp_text
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
from corral.domain.status import PAUSED, RESTING, TERMINAL, Status, check_transition, is_noop
from corral.domain.violations import Decision, after_change, park_status
from corral.errors import IllegalTransition, LeaseLost, RefusedError, StoreCorrupt, StoreError
from corral.store.contract import UNSET, NewTask
from corral.store.migrations import FINISHED_ROWS, UNFINISHED_ROWS

if TYPE_CHECKING:  # loaded by the lease methods, on first use: a store that runs no worker never pays
    from corral.domain.team import Lease, LeaseState, Worker, WorkerState

#: A row of a cursor: indexes by position and by column name (``sqlite3.Row``, or PostgreSQL's).
Row = Any

#: Ids per ``IN (...)`` list in the batch reads: well under SQLite's (and PostgreSQL's) bound on parameters.
_BATCH = 500

#: A task's current command id (its latest human turn's), as a scalar subquery of a ``tasks`` row.
_CURRENT_COMMAND_ID = (
    "(SELECT command_id FROM turns WHERE task_id = tasks.id AND role = 'human' "
    "AND command_id IS NOT NULL ORDER BY sequence DESC LIMIT 1)"
)

_TASK_COLUMNS = (
    "id, ref, goal, prompt, parent_id, status, harness, model, target_branch, protected, "
    "metadata, resting_cause, session_id, created_at, updated_at, last_interaction_at"
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


def _shared(value: str | None) -> dict[str, Any] | None:
    """A document another host wrote (a live turn's, a shared one): a JSON object, else none at all. On the
    shared store any host writes these rows, so one that does not decode, or decodes to something else, is
    no document rather than the reader's fault (docs/workers.md)."""
    if value is None:
        return None
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


#: The code of a task row that does not decode: a listing skips it, a read of that one task fails with it.
UNREADABLE = "task-row-unreadable"


def _unreadable(key: tuple[Any, ...], fault: str) -> StoreCorrupt:
    task_id, ref = key[0], key[1]
    return StoreCorrupt(
        f"The task {ref} ({task_id}) cannot be read from the corral database: {fault}.",
        code=UNREADABLE,
        hint="`corral doctor` names the damaged row and how to make it readable; every other task reads as before.",
    )


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


def _legal(src: Status, dst: Status, actor: Actor) -> bool:
    """Whether the rules allow ``src`` → ``dst`` by ``actor`` (:func:`check_transition` raises why not)."""
    try:
        check_transition(src, dst, actor)
    except IllegalTransition:
        return False
    return True


def _statuses(value: Status | Iterable[Status] | None) -> tuple[Status, ...] | None:
    if value is None:
        return None
    if isinstance(value, Status):
        return (value,)
    return tuple(value)


def _status_clause(statuses: Sequence[Status]) -> str:
    """``status IN (?, …)`` for these statuses, with the condition of the partial index that holds them all
    (schema 8: ``tasks_unfinished``, ``tasks_finished``, by ``finished_at``) when one does: a planner uses a
    partial index only when the query states its condition, and bound values are not read for it. The added
    condition keeps every row the first keeps (a task has a finished time exactly when its status is finished)."""
    clause = f"status IN ({','.join('?' * len(statuses))})"
    if not any(s in TERMINAL for s in statuses):
        return f"{clause} AND {UNFINISHED_ROWS}"
    if all(s in TERMINAL for s in statuses):
        return f"{clause} AND {FINISHED_ROWS}"
    return clause


def _finished(src: Status, dst: Status, now: str) -> tuple[str, tuple[str | None, ...]]:
    """The ``finished_at`` assignment of a change from ``src`` to ``dst`` and its value: set on entering a finished
    status, cleared on leaving one, and not named at all otherwise, so that SQLite leaves the partial indexes
    keyed by it alone (it rewrites an index entry whenever a column its condition names is assigned)."""
    if (src in TERMINAL) == (dst in TERMINAL):
        return "", ()
    return ", finished_at = ?", (now if dst in TERMINAL else None,)


#: A status change's record, numbered within its task (schema 8): the key (task, number) is the row's place, so the
#: record is one b-tree entry, and the largest number so far is read from the page the row goes into. The number is a
#: scalar subquery of VALUES, not an ``INSERT … SELECT … FROM status_changes``: SQLite runs an INSERT that selects
#: from its own table through a temporary table filled first (5-12 µs, more than the rest of the INSERT).
_INSERT_CHANGE = (
    "INSERT INTO status_changes (task_id, id, from_status, to_status, actor, reason, at) VALUES "
    "(?, (SELECT COALESCE(MAX(id), 0) + 1 FROM status_changes WHERE task_id = ?), ?, ?, ?, ?, ?)"
)

#: A park's compare-and-set also states what makes it a park to ``blocked``: no violation of the task's current
#: session is pending (``park_status``); with one, the row does not match and the read path parks it ``conflict``.
_NO_PENDING = (
    " AND NOT EXISTS (SELECT 1 FROM violations v WHERE v.session_id = tasks.session_id "
    "AND v.task_id = tasks.id AND v.decision = 'pending')"
)

#: How the hot path makes a change, by (from, to, actor, park): its UPDATE keeping the resting cause, its UPDATE
#: setting it, and whether it sets (1) or clears (2) ``finished_at``; an empty tuple where the rules refuse the change
#: or it is no change at all (the read path says why, or does nothing). Filled as changes are first made.
_CAS_WAYS: dict[tuple[Status, Status, Actor, bool], tuple[str, str, int] | tuple[()]] = {}


def _cas_way(current: Status, to: Status, actor: Actor, park: bool) -> tuple[str, str, int] | tuple[()]:
    """The statements of a compare-and-set change from ``current`` to ``to`` (see ``_CAS_WAYS``); each text is
    made once, so the driver finds its prepared statement by a string it has hashed before."""
    if not _legal(current, to, actor) or is_noop(current, to):
        return ()
    finished = 0 if (current in TERMINAL) == (to in TERMINAL) else (1 if to in TERMINAL else 2)
    tail = (", finished_at = ?" if finished else "") + " WHERE id = ? AND status = ?" + (_NO_PENDING if park else "")
    # A resting status keeps the cause unless one is given: the UPDATE that keeps it does not name the column.
    keep = "UPDATE tasks SET status = ?, updated_at = ?, last_interaction_at = ?" + tail if to in RESTING else ""
    assign = "UPDATE tasks SET status = ?, resting_cause = ?, updated_at = ?, last_interaction_at = ?" + tail
    return keep, assign, finished


class _Decoded:
    """The records a store already decoded, by id with the row they came from.

    A command reads the same tasks several times (each reconciler sweep, then the listing):
    a row equal to the one a record was made from gives that record back (records are
    immutable), so each task is decoded once per process, however often it is read.
    """

    __slots__ = ("sessions", "tasks", "unreadable")

    def __init__(self) -> None:
        self.tasks: dict[str, tuple[tuple[Any, ...], Task]] = {}
        self.sessions: dict[str, tuple[tuple[Any, ...], Session]] = {}
        #: Task rows that do not decode (a column that is not JSON, a status no corral wrote), by id with
        #: the row and what is wrong: reads of many tasks skip them, ``doctor`` names them.
        self.unreadable: dict[str, tuple[tuple[Any, ...], str]] = {}


#: A task row's columns that hold JSON, by position in ``_TASK_COLUMNS``, and the value that resets each.
_JSON_COLUMNS = ((9, "protected", "'[]'"), (10, "metadata", "'{}'"), (11, "resting_cause", "NULL"))


def row_fault(row: Row, exc: BaseException) -> str:
    """What is wrong with a task row that did not decode: the column, when one of its JSON columns is not JSON."""
    for index, name, _reset in _JSON_COLUMNS:
        try:
            _loads(row[index])
        except (ValueError, RecursionError):
            return f"column {name} is not JSON"
    return f"{type(exc).__name__}: {exc}"[:200]


def reset_value(fault: str) -> tuple[str, str] | None:
    """(column, SQL value) that makes a row readable again when ``fault`` is a JSON column's; None otherwise."""
    for _index, name, reset in _JSON_COLUMNS:
        if fault == f"column {name} is not JSON":
            return name, reset
    return None


class SQLTx:
    """One transaction over an open connection; see ``corral.store.contract.Tx``.

    A dialect subclass overrides :meth:`_ref_taken` and, where a failed statement aborts the
    transaction, :meth:`_may_fail`.
    """

    def __init__(self, db: Any, clock: Clock, *, writable: bool, decoded: _Decoded | None = None) -> None:
        self._db = db
        self._clock = clock
        self._writable = writable
        self._now: datetime | None = None
        self._now_text: str | None = None
        self._decoded = decoded or _Decoded()

    # One timestamp per transaction: a status and its status change agree on "when".
    def now(self) -> datetime:
        if self._now is None:
            self._now = self._clock()
        return self._now

    def _stamp(self) -> str:
        """:meth:`now` as the text the columns hold, formatted once per transaction."""
        text = self._now_text
        if text is None:
            at = self._now
            if at is None:
                at = self._now = self._clock()
            text = self._now_text = stamp_text(at)
        return text

    @staticmethod
    def _ref_taken(exc: Exception) -> bool:
        """Whether ``exc`` is the unique ref of ``tasks`` refusing a second task."""
        raise NotImplementedError

    def _may_fail(self) -> AbstractContextManager[Any]:
        """Around a statement whose failure the transaction survives (a refused ref)."""
        return nullcontext()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """One statement of standard SQL (``?`` parameters) in this transaction: the store's own copy
        and checks (``corral.store.copy``). Anything but a ``SELECT`` needs a write transaction."""
        if not sql.lstrip().upper().startswith("SELECT"):
            self._write()
        return self._db.execute(sql, args)

    def _write(self) -> None:
        if not self._writable:
            raise StoreError("internal: a write was attempted in a read transaction")

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        row: Row | None = self._db.execute(sql, args).fetchone()
        return row

    def _all(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return list(self._db.execute(sql, args).fetchall())

    def _each_in(self, sql: str, ids: Iterable[str]) -> Iterator[Row]:
        """The rows of ``sql`` (with one ``{marks}`` placeholder list) for every id, a batch at a time."""
        wanted = list(dict.fromkeys(ids))
        for i in range(0, len(wanted), _BATCH):
            part = wanted[i : i + _BATCH]
            yield from self._db.execute(sql.format(marks=",".join("?" * len(part))), part)

    # -- tasks -------------------------------------------------------------------
    def _task(self, row: Row) -> Task:
        """The row's task; a row that does not decode is a coded ``task-row-unreadable`` (and remembered)."""
        key = tuple(row)
        seen = self._decoded.tasks.get(key[0])
        if seen is not None and seen[0] == key:
            return seen[1]
        bad = self._decoded.unreadable.get(key[0])
        if bad is not None and bad[0] == key:
            raise _unreadable(key, bad[1])
        try:
            task = self._decode_task(row)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, AssertionError) as exc:
            fault = row_fault(row, exc)
            self._decoded.unreadable[key[0]] = (key, fault)
            raise _unreadable(key, fault) from exc
        self._decoded.unreadable.pop(key[0], None)
        self._decoded.tasks[key[0]] = (key, task)
        return task

    def _readable(self, rows: Iterable[Row]) -> list[Task]:
        """The tasks of ``rows``, without the rows that do not decode: one damaged row never takes a
        listing, a sweep or a project down (``doctor`` names it)."""
        out = []
        for row in rows:
            try:
                out.append(self._task(row))
            except StoreError as exc:
                if exc.code != UNREADABLE:
                    raise
        return out

    @staticmethod
    def _decode_task(row: Row) -> Task:
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

    def unreadable_tasks(self) -> list[tuple[str, str, str]]:
        found = []
        for row in self._db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks ORDER BY created_at, id"):
            try:
                self._task(row)
            except StoreError as exc:
                if exc.code != UNREADABLE:
                    raise
                found.append((row[0], row[1], self._decoded.unreadable[row[0]][1]))
        return found

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
            asked = list(statuses)
            if not asked:
                return []
            rows = self._all(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {_status_clause(asked)} ORDER BY created_at, id",
                [s.value for s in asked],
            )
        return self._readable(rows)

    def task_heads(self, statuses: Iterable[Status]) -> list[TaskHead]:
        asked = list(statuses)
        if not asked:
            return []
        # The current command as current_command_ids reads it, asked of working tasks only: each is
        # an indexed look-up among the task's turns, and the sweep trusts it for no other status.
        rows = self._db.execute(
            f"SELECT id, ref, status, CASE WHEN status = 'working' THEN {_CURRENT_COMMAND_ID} END "
            f"FROM tasks WHERE {_status_clause(asked)} ORDER BY created_at, id",
            [s.value for s in asked],
        )
        return [TaskHead(r[0], r[1], _STATUSES[r[2]], r[3]) for r in rows]

    def recent_tasks(self, statuses: Iterable[Status], limit: int) -> list[Task]:
        asked = list(statuses)
        if not asked:
            return []
        rows = self._all(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {_status_clause(asked)} "
            "ORDER BY updated_at DESC, id DESC LIMIT ?",
            [*(s.value for s in asked), max(0, limit)],
        )
        return self._readable(rows)

    def match_tasks(self, prefix: str) -> list[Task]:
        # A prefix is a range on the unique indexes (ref and id): [prefix, prefix + U+10FFFF).
        # Taken literally, so "%" and "_" match only themselves.
        upper = prefix + "\U0010ffff"
        rows = self._all(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE ref >= ? AND ref < ? "
            f"UNION SELECT {_TASK_COLUMNS} FROM tasks WHERE id >= ? AND id < ? ORDER BY created_at, id",
            (prefix, upper, prefix, upper),
        )
        return self._readable(r for r in rows if r["ref"].startswith(prefix) or r["id"].startswith(prefix))

    def refs(self, near: str | None = None, limit: int = 2000) -> list[str]:
        if near:
            # Candidates for "did you mean": refs that share the first letter, and unfinished ones.
            first = near[:1]
            rows = self._db.execute(
                "SELECT ref FROM (SELECT ref FROM tasks WHERE ref >= ? AND ref < ? LIMIT ?) AS near "
                f"UNION SELECT ref FROM tasks WHERE {UNFINISHED_ROWS}",
                (first, first + "\U0010ffff", limit),
            )
            return sorted(r[0] for r in rows)
        return [r[0] for r in self._db.execute("SELECT ref FROM tasks ORDER BY ref")]

    def refs_by_id(self, task_ids: Iterable[str]) -> dict[str, str]:
        return {r[0]: r[1] for r in self._each_in("SELECT id, ref FROM tasks WHERE id IN ({marks})", task_ids)}

    def children(self, task_id: str) -> list[Task]:
        rows = self._all(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE parent_id = ? ORDER BY created_at, id", (task_id,))
        return self._readable(rows)

    def insert_task(self, new: NewTask, actor: Actor, *, task_id: str | None = None) -> Task:
        self._write()
        now = rfc3339(self.now())
        tid = task_id or new_id()
        try:
            with self._may_fail():
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
        except Exception as exc:
            if self._ref_taken(exc):
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
        # ``_value_`` is what ``.value`` returns, without the descriptor's call (this runs on every change).
        self._db.execute(
            _INSERT_CHANGE,
            (task_id, task_id, src._value_ if src else None, dst._value_, actor._value_, reason, self._stamp()),
        )
        return StatusChange(task_id, src, dst, actor, reason, self.now())

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

    def _cas(
        self,
        task_id: str,
        current: Status,
        to: Status,
        actor: Actor,
        reason: str | None,
        resting_cause: RestingCause | None,
        park: bool,
    ) -> StatusChange | None:
        """The hot path of a status change: the one status expected is the one changed from, so the UPDATE itself is
        the compare-and-set (no read first), and a park's UPDATE also states that no violation is pending. Two
        statements, the UPDATE and the status change's INSERT. None when the rules refuse the change or the row did
        not match; the caller's read path then says why (or finds the conflict a pending violation makes)."""
        way = _CAS_WAYS.get((current, to, actor, park))
        if way is None:
            way = _CAS_WAYS[(current, to, actor, park)] = _cas_way(current, to, actor, park)
        if not way:
            return None
        keep_sql, assign_sql, finished = way
        now = self._now_text or self._stamp()
        db, src = self._db, current._value_
        if finished:
            closing: tuple[str | None, ...] = (now if finished == 1 else None, task_id, src)
        else:
            closing = (task_id, src)
        if resting_cause is UNSET and keep_sql:
            cur = db.execute(keep_sql, (to._value_, now, now, *closing))
        else:
            cause = None if resting_cause is UNSET or resting_cause is None else _dumps(resting_cause.to_json())
            cur = db.execute(assign_sql, (to._value_, cause, now, now, *closing))
        if cur.rowcount != 1:
            return None
        db.execute(_INSERT_CHANGE, (task_id, task_id, src, to._value_, actor._value_, reason, now))
        return StatusChange(task_id, current, to, actor, reason, self._now)  # type: ignore[arg-type]  # set by _stamp

    def _transition(
        self,
        task_id: str,
        to: Status,
        actor: Actor,
        reason: str | None,
        expected_from: Status | Iterable[Status] | None,
        resting_cause: RestingCause | None,
        known: Row | None = None,
    ) -> StatusChange | None:
        """``known``: the task's (status, resting_cause) as the caller read them in this transaction."""
        self._write()
        if known is None:
            if isinstance(expected_from, Status):  # the engine's usual call: the one status it read
                change = self._cas(task_id, expected_from, to, actor, reason, resting_cause, False)
            else:
                one = _statuses(expected_from)
                change = (
                    self._cas(task_id, one[0], to, actor, reason, resting_cause, False)
                    if one and len(one) == 1
                    else None
                )
            if change is not None:
                return change
        expected = _statuses(expected_from)
        # Only the two columns a transition needs.
        row = known or self._one("SELECT status, resting_cause FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            self._require_task(task_id)  # raises the not-found error
        assert row is not None
        current = _STATUSES.get(row[0]) or Status(row[0])  # the constructor says what an unknown one is
        if expected is not None and current not in expected:
            self._expect(self._require_task(task_id), expected_from)
        check_transition(current, to, actor)
        if is_noop(current, to):  # the same status again changes nothing and writes no status-change row
            if resting_cause is not UNSET:
                self.set_resting_cause(task_id, resting_cause)
            return None
        if resting_cause is UNSET:
            cause_json = row[1] if to in RESTING else None
        else:
            cause_json = _dumps(resting_cause.to_json()) if resting_cause is not None else None
        now = self._stamp()
        finished, finished_at = _finished(current, to, now)
        self._db.execute(
            "UPDATE tasks SET status = ?, resting_cause = ?, updated_at = ?, last_interaction_at = ?"
            f"{finished} WHERE id = ?",
            (to.value, cause_json, now, now, *finished_at, task_id),
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
    ) -> StatusChange | None:
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
        if self._writable and isinstance(expected_from, Status):
            # Blocked unless a violation is pending, which the UPDATE states: the usual park is its two writes.
            change = self._cas(task_id, expected_from, Status.BLOCKED, actor, reason, resting_cause, True)
            if change is not None:
                return change
        row = self._one(
            "SELECT t.status, (SELECT COUNT(*) FROM violations v WHERE v.session_id = t.session_id "
            "AND v.task_id = t.id AND v.decision = 'pending'), t.resting_cause FROM tasks t WHERE t.id = ?",
            (task_id,),
        )
        if row is None:
            self._require_task(task_id)  # raises the not-found error
        assert row is not None
        target = park_status(int(row[1]))
        if (_STATUSES.get(row[0]) or Status(row[0])) is target:
            self._expect(self._require_task(task_id), expected_from)
            if resting_cause is not None:
                self.set_resting_cause(task_id, resting_cause)
            return None
        return self._transition(task_id, target, actor, reason, expected_from, resting_cause, (row[0], row[2]))

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
        for table in (
            "violations",
            "turns",
            "notes",
            "processes",
            "status_changes",
            "leases",
            "shipped_files",
            "live_turns",
        ):
            db.execute(f"DELETE FROM {table} WHERE task_id = ?", (task_id,))
        db.execute("UPDATE tasks SET session_id = NULL WHERE id = ?", (task_id,))
        db.execute("DELETE FROM sessions WHERE task_id = ?", (task_id,))
        db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    def changes_since(self, since: datetime) -> list[StatusChange]:
        # Oldest first; one task's, in the order they were made (one transaction's share one time).
        sql = (
            "SELECT task_id, from_status, to_status, actor, reason, at FROM status_changes WHERE at >= ? "
            "ORDER BY at, task_id, id"
        )
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
    def _session(self, row: Row) -> Session:
        key = tuple(row)
        seen = self._decoded.sessions.get(key[0])
        if seen is not None and seen[0] == key:
            return seen[1]
        session = self._decode_session(row)
        self._decoded.sessions[key[0]] = (key, session)
        return session

    @staticmethod
    def _decode_session(row: Row) -> Session:
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

    def interruption_counts(self, session_ids: Iterable[str]) -> dict[str, int]:
        sql = "SELECT id, consecutive_interruptions FROM sessions WHERE id IN ({marks})"
        return {r[0]: r[1] for r in self._each_in(sql, session_ids)}

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
    def _turn(self, row: Row, attempts: tuple[Attempt, ...] = ()) -> Turn:
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
    def _attempt(row: Row) -> Attempt:
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
        # A batch of tasks per query, each answered by its own indexed look-up, the id alone.
        sql = f"SELECT id, {_CURRENT_COMMAND_ID} FROM tasks WHERE id IN ({{marks}})"
        return {task_id: command_id for task_id, command_id in self._each_in(sql, task_ids) if command_id is not None}

    def turn_by_command(self, command_id: str, role: Role) -> Turn | None:
        row = self._one("SELECT id FROM turns WHERE command_id = ? AND role = ?", (command_id, role.value))
        return self.get_turn(row["id"]) if row else None

    def turn_count(self, task_id: str) -> int:
        (count,) = self._db.execute("SELECT COUNT(*) FROM turns WHERE task_id = ?", (task_id,)).fetchone()
        return int(count)

    def exchanges_before(self, task_id: str, sequence: int) -> int:
        row = self._db.execute(
            "SELECT COUNT(*) FROM turns t WHERE t.task_id = ? AND t.sequence < ? AND NOT (t.role = 'agent' AND ("
            "(t.command_id IS NOT NULL AND EXISTS ("
            "SELECT 1 FROM turns h WHERE h.command_id = t.command_id AND h.role = 'human'))"
            " OR (t.command_id IS NULL AND t.details LIKE '%\"log_turn\"%')))",
            (task_id, sequence),
        ).fetchone()
        return int(row[0])

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
    def _violation(row: Row) -> Violation:
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
    def register_process(
        self, task_id: str, kind: str, pid: int, command_id: str | None = None, *, owner: str | None = None
    ) -> None:
        self._write()
        self._db.execute(
            "INSERT INTO processes (task_id, kind, pid, command_id, started_at, owner) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT (task_id, kind) DO UPDATE SET pid = excluded.pid, command_id = excluded.command_id, "
            "started_at = excluded.started_at, owner = excluded.owner",
            (task_id, kind, pid, command_id, rfc3339(self.now()), owner),
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
            ProcessRecord(r["task_id"], r["kind"], r["pid"], r["command_id"], _req_time(r["started_at"]), r["owner"])
            for r in rows
        ]

    # -- workers and leases (docs/workers.md) ------------------------------------
    @staticmethod
    def _lease(row: Row) -> Lease:
        from corral.domain.team import Lease, LeaseState

        return Lease(
            task_id=row["task_id"],
            command_id=row["command_id"],
            epoch=int(row["epoch"]),
            state=LeaseState(row["state"]),
            plan=_loads(row["plan"]) or {},
            worker_id=row["worker_id"],
            host=row["host"],
            worktree=row["worktree"],
            job_id=row["job_id"],
            queued_at=_time(row["queued_at"]),
            claimed_at=_time(row["claimed_at"]),
            stop_by=row["stop_by"],
            unpushed=row["unpushed"],
        )

    def lease(self, task_id: str) -> Lease | None:
        row = self._one("SELECT * FROM leases WHERE task_id = ?", (task_id,))
        return None if row is None else self._lease(row)

    def followed(self, task_id: str, command_id: str) -> tuple[Lease | None, bool, Status | None]:
        row = self._one(
            "SELECT l.*, (SELECT status FROM tasks WHERE id = ?) AS task_status, EXISTS (SELECT 1 FROM turns "
            "WHERE command_id = ? AND role = 'agent') AS answered FROM (SELECT 1 AS one) AS one "
            "LEFT JOIN leases l ON l.task_id = ?",
            (task_id, command_id, task_id),
        )
        assert row is not None  # the one row the join starts from
        status = row["task_status"]
        if status is not None and status not in _STATUSES:
            self.get_task(task_id)  # a row no corral wrote: said as every read of it says it
        lease = None if row["task_id"] is None else self._lease(row)
        return lease, bool(row["answered"]), None if status is None else _STATUSES[status]

    def leases(self, states: Iterable[LeaseState] | None = None) -> list[Lease]:
        if states is None:
            rows = self._all("SELECT * FROM leases ORDER BY queued_at, task_id")
        else:
            wanted = [s.value for s in states]
            rows = self._all(
                f"SELECT * FROM leases WHERE state IN ({','.join('?' * len(wanted))}) ORDER BY queued_at, task_id",
                wanted,
            )
        return [self._lease(r) for r in rows]

    def queue_turn(self, task_id: str, command_id: str, plan: dict[str, Any]) -> Lease:
        self._write()
        self._require_task(task_id)
        now = rfc3339(self.now())
        # The epoch goes on from the task's last lease: a worker holding an older one is fenced off.
        self._db.execute(
            "INSERT INTO leases (task_id, command_id, epoch, state, plan, queued_at) VALUES (?,?,1,'queued',?,?) "
            "ON CONFLICT (task_id) DO UPDATE SET command_id = excluded.command_id, epoch = leases.epoch + 1, "
            "state = 'queued', plan = excluded.plan, worker_id = NULL, host = NULL, worktree = NULL, "
            "job_id = NULL, queued_at = excluded.queued_at, claimed_at = NULL, stop_by = NULL, unpushed = NULL",
            (task_id, command_id, _dumps(plan), now),
        )
        found = self.lease(task_id)
        assert found is not None
        return found

    def note_job(self, task_id: str, command_id: str, job_id: int) -> None:
        self._write()
        self._db.execute(
            "UPDATE leases SET job_id = ? WHERE task_id = ? AND command_id = ? AND state = 'queued'",
            (job_id, task_id, command_id),
        )

    def claim_turn(self, task_id: str, command_id: str, worker_id: str, host: str) -> Lease | None:
        self._write()
        cur = self._db.execute(
            "UPDATE leases SET state = 'claimed', epoch = epoch + 1, worker_id = ?, host = ?, claimed_at = ?, "
            "stop_by = NULL, unpushed = NULL WHERE task_id = ? AND command_id = ? AND state = 'queued'",
            (worker_id, host, rfc3339(self.now()), task_id, command_id),
        )
        return self.lease(task_id) if cur.rowcount == 1 else None

    def hold_local(self, task_id: str, command_id: str, owner: str, host: str) -> Lease:
        from corral.domain.team import LOCAL_PLAN

        self._write()
        self._require_task(task_id)
        now = rfc3339(self.now())
        # A new epoch, as a queued turn's: whatever held the task's lease before (a worker) is fenced off.
        self._db.execute(
            "INSERT INTO leases (task_id, command_id, epoch, state, plan, worker_id, host, queued_at, claimed_at) "
            "VALUES (?,?,1,'local',?,?,?,?,?) "
            "ON CONFLICT (task_id) DO UPDATE SET command_id = excluded.command_id, epoch = leases.epoch + 1, "
            "state = 'local', plan = excluded.plan, worker_id = excluded.worker_id, host = excluded.host, "
            "worktree = NULL, job_id = NULL, queued_at = excluded.queued_at, claimed_at = excluded.claimed_at, "
            "stop_by = NULL, unpushed = NULL",
            (task_id, command_id, _dumps(LOCAL_PLAN), owner, host, now, now),
        )
        found = self.lease(task_id)
        assert found is not None
        return found

    def check_fence(self, task_id: str, epoch: int) -> Lease:
        row = self._one("SELECT * FROM leases WHERE task_id = ?", (task_id,))
        lease = None if row is None else self._lease(row)
        if lease is None or lease.epoch != epoch or not lease.held:
            held = "no lease" if lease is None else f"epoch {lease.epoch} ({lease.state.value})"
            raise LeaseLost(
                f"The turn's lease on {task_id} was taken over: this worker holds epoch {epoch}, the task {held}.",
                hint=f"Nothing was written; another worker runs the task now (corral show {task_id}).",
            )
        return lease

    def set_lease_worktree(self, task_id: str, epoch: int, worktree: str) -> None:
        self._write()
        self.check_fence(task_id, epoch)
        self._db.execute("UPDATE leases SET worktree = ? WHERE task_id = ?", (worktree, task_id))

    def release_turn(self, task_id: str, epoch: int) -> bool:
        self._write()
        cur = self._db.execute(
            "UPDATE leases SET state = 'released', unpushed = NULL "
            "WHERE task_id = ? AND epoch = ? AND state IN ('claimed', 'local')",
            (task_id, epoch),
        )
        return bool(cur.rowcount == 1)

    def ask_stop(self, task_id: str, epoch: int, actor: str) -> bool:
        self._write()
        cur = self._db.execute(
            "UPDATE leases SET stop_by = ? WHERE task_id = ? AND epoch = ? AND state IN ('claimed', 'local')",
            (actor, task_id, epoch),
        )
        return bool(cur.rowcount == 1)

    def note_unpushed(self, task_id: str, epoch: int, reason: str | None) -> None:
        self._write()
        self.check_fence(task_id, epoch)
        self._db.execute("UPDATE leases SET unpushed = ? WHERE task_id = ?", (reason, task_id))

    def fence_off(self, task_id: str, epoch: int) -> bool:
        self._write()
        cur = self._db.execute(
            "UPDATE leases SET state = 'released', epoch = epoch + 1, worker_id = NULL "
            "WHERE task_id = ? AND epoch = ? AND state <> 'released'",
            (task_id, epoch),
        )
        return bool(cur.rowcount == 1)

    @staticmethod
    def _worker(row: Row) -> Worker:
        from corral.domain.team import Worker, WorkerState

        return Worker(
            id=row["id"],
            host=row["host"],
            pid=int(row["pid"]),
            state=WorkerState(row["state"]),
            lease_seconds=float(row["lease_seconds"]),
            started_at=_req_time(row["started_at"]),
            heartbeat_at=_req_time(row["heartbeat_at"]),
        )

    def beat_worker(self, worker_id: str, *, host: str, pid: int, state: WorkerState, lease_seconds: float) -> Worker:
        self._write()
        now = rfc3339(self.now())
        self._db.execute(
            "INSERT INTO workers (id, host, pid, state, lease_seconds, started_at, heartbeat_at) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
            "state = excluded.state, lease_seconds = excluded.lease_seconds, heartbeat_at = excluded.heartbeat_at",
            (worker_id, host, pid, state.value, float(lease_seconds), now, now),
        )
        found = self.get_worker(worker_id)
        assert found is not None
        return found

    def get_worker(self, worker_id: str) -> Worker | None:
        row = self._one("SELECT * FROM workers WHERE id = ?", (worker_id,))
        return None if row is None else self._worker(row)

    def workers(self) -> list[Worker]:
        return [self._worker(r) for r in self._all("SELECT * FROM workers ORDER BY started_at, id")]

    def ship(self, task_id: str, path: str, offset: int, data: bytes) -> None:
        self._write()
        if offset == 0:  # a file shipped again from its start (it was rewritten): its old bytes go
            self._db.execute("DELETE FROM shipped_files WHERE task_id = ? AND path = ?", (task_id, path))
        self._db.execute(
            "INSERT INTO shipped_files (task_id, path, offset_bytes, data) VALUES (?,?,?,?)",
            (task_id, path, offset, bytes(data)),
        )

    def ship_files(self, task_id: str, chunks: Sequence[tuple[str, int, bytes]]) -> None:
        self._write()
        last_start = {path: i for i, (path, offset, _data) in enumerate(chunks) if offset == 0}
        # A chunk before its file's last start would be deleted by it, as one ship after another does.
        kept = [(p, o, d) for i, (p, o, d) in enumerate(chunks) if i >= last_start.get(p, -1)]
        restarted = list(last_start)
        for i in range(0, len(restarted), _BATCH):
            part = restarted[i : i + _BATCH]
            self._db.execute(
                f"DELETE FROM shipped_files WHERE task_id = ? AND path IN ({','.join('?' * len(part))})",
                (task_id, *part),
            )
        step = _BATCH // 4  # four parameters a row
        for i in range(0, len(kept), step):
            rows = kept[i : i + step]
            self._db.execute(
                "INSERT INTO shipped_files (task_id, path, offset_bytes, data) VALUES "
                + ",".join(["(?,?,?,?)"] * len(rows)),
                tuple(a for path, offset, data in rows for a in (task_id, path, offset, bytes(data))),
            )

    def unship(self, task_id: str, path: str) -> None:
        self._write()
        self._db.execute("DELETE FROM shipped_files WHERE task_id = ? AND path = ?", (task_id, path))

    def shipped_sizes(self, task_id: str) -> dict[str, int]:
        rows = self._all(
            "SELECT path, MAX(offset_bytes + LENGTH(data)) AS size FROM shipped_files WHERE task_id = ? GROUP BY path",
            (task_id,),
        )
        return {r["path"]: int(r["size"]) for r in rows}

    def shipped(self, task_id: str, path: str, since: int = 0) -> list[tuple[int, bytes]]:
        rows = self._all(
            "SELECT offset_bytes, data FROM shipped_files WHERE task_id = ? AND path = ? "
            "AND offset_bytes + LENGTH(data) > ? ORDER BY offset_bytes",
            (task_id, path, since),
        )
        return [(int(r["offset_bytes"]), bytes(r["data"])) for r in rows]

    def shipped_past(self, task_id: str, since: Mapping[str, int]) -> dict[str, list[tuple[int, bytes]]]:
        found: dict[str, list[tuple[int, bytes]]] = {}
        wanted = list(since.items())
        step = _BATCH // 2  # two parameters a path
        for i in range(0, len(wanted), step):
            part = wanted[i : i + step]
            rows = self._all(
                "SELECT path, offset_bytes, data FROM shipped_files WHERE task_id = ? AND ("
                + " OR ".join(["(path = ? AND offset_bytes + LENGTH(data) > ?)"] * len(part))
                + ") ORDER BY path, offset_bytes",
                (task_id, *(a for pair in part for a in pair)),
            )
            for r in rows:
                found.setdefault(r["path"], []).append((int(r["offset_bytes"]), bytes(r["data"])))
        return found

    def set_live(self, task_id: str, command_id: str, doc: dict[str, Any]) -> None:
        self._write()
        self._db.execute(
            "INSERT INTO live_turns (task_id, command_id, doc, at) VALUES (?,?,?,?) ON CONFLICT (task_id) DO UPDATE "
            "SET command_id = excluded.command_id, doc = excluded.doc, at = excluded.at",
            (task_id, command_id, _dumps(doc), rfc3339(self.now())),
        )

    def live(self, task_ids: Iterable[str]) -> dict[str, tuple[str, dict[str, Any], datetime]]:
        found = {}
        for r in self._each_in("SELECT * FROM live_turns WHERE task_id IN ({marks})", task_ids):
            try:
                at = parse_time(r["at"])
            except ValueError:
                at = None
            if at is None or at.tzinfo is None:
                continue  # written by no corral (each writes its store's own time): nothing shipped
            found[r["task_id"]] = (r["command_id"], _shared(r["doc"]) or {}, at)
        return found

    def get_doc(self, name: str) -> dict[str, Any] | None:
        row = self._one("SELECT doc FROM shared_docs WHERE name = ?", (name,))
        return None if row is None else (_shared(row["doc"]) or {})

    def put_doc(self, name: str, doc: dict[str, Any]) -> None:
        self._write()
        self._db.execute(
            "INSERT INTO shared_docs (name, doc, at) VALUES (?,?,?) ON CONFLICT (name) DO UPDATE "
            "SET doc = excluded.doc, at = excluded.at",
            (name, _dumps(doc), rfc3339(self.now())),
        )

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
