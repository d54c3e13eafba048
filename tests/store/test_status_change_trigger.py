"""Schema 9: a status change is one statement. The compare-and-set ``UPDATE`` of the task's row names who changes
its status and why, and the trigger on the status writes the status-change row in that statement; parking decides
blocked or conflict in the same statement. The records are the same as before, on both stores; a schema-8 store,
SQLite or PostgreSQL, migrates with its rows kept and its tasks' rows saying who set their status."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.domain.violations import Decision
from corral.errors import RefusedError, StoreError
from corral.store import NewTask, SQLiteStore
from corral.store.migrations import LATEST
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock
from tests.store import either
from tests.store.old_schema import postgres_at, sqlite_at
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema

store = either.store

AT = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-02T00:00:00.000000Z"


def _setter(store: SQLiteStore | PostgresStore, task_id: str) -> tuple[str | None, str | None]:
    with store.read() as tx:
        row = tx.execute("SELECT status_actor, status_reason FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return row[0], row[1]


def _history(store: SQLiteStore | PostgresStore, task_id: str) -> list[tuple[int, str | None, str, str, str | None]]:
    with store.read() as tx:
        rows = tx.execute(
            "SELECT id, from_status, to_status, actor, reason FROM status_changes WHERE task_id = ? ORDER BY id",
            (task_id,),
        ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _working(store: SQLiteStore | PostgresStore, ref: str = "t") -> str:
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref=ref, goal="Move"), Actor.HUMAN)
        tx.insert_session(task.id, branch=f"corral/{ref}")
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    return task.id


def test_the_task_row_says_who_set_its_status_and_each_change_is_recorded_once(store, clock) -> None:  # type: ignore[no-untyped-def]
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="t", goal="Move"), Actor.HUMAN)
        tx.insert_session(task.id, branch="corral/t")
    assert _setter(store, task.id) == ("human", "created")
    clock.advance(1)
    with store.write() as tx:
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    clock.advance(1)
    with store.write() as tx:
        change = tx.park(task.id, Actor.SYSTEM, None, expected_from=Status.WORKING)
        at = tx.now()
    assert change is not None and (change.from_status, change.to_status) == (Status.WORKING, Status.BLOCKED)
    assert _setter(store, task.id) == ("system", None)
    with store.write() as tx:  # several expected: the path that reads first, recorded by the same trigger
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "again", expected_from=(Status.BLOCKED, Status.CONFLICT))
    with store.write() as tx:  # none expected
        tx.park(task.id, Actor.SYSTEM, "ended")
    assert _history(store, task.id) == [
        (1, None, "backlog", "human", "created"),
        (2, "backlog", "working", "human", "start"),
        (3, "working", "blocked", "system", None),
        (4, "blocked", "working", "human", "again"),
        (5, "working", "blocked", "system", "ended"),
    ]
    with store.read() as tx:
        changes = tx.status_changes(task.id)
        row = tx.get_task(task.id)
    assert changes[2].at == at and row is not None and row.status is Status.BLOCKED
    assert _setter(store, task.id) == ("system", "ended")


def test_park_decides_conflict_from_the_current_sessions_pending_violations_in_one_statement(store, clock) -> None:  # type: ignore[no-untyped-def]
    task_id = _working(store)
    with store.write() as tx:
        old = tx.get_task(task_id).session_id  # type: ignore[union-attr]
        assert old is not None
        tx.record_violations(task_id, ["a.txt"])
    with store.write() as tx:
        change = tx.park(task_id, Actor.SYSTEM, "turn ended", expected_from=Status.WORKING)
    assert change is not None and change.to_status is Status.CONFLICT
    with store.write() as tx:
        tx.decide_violations(task_id, {"a.txt": Decision.APPROVED}, Actor.HUMAN)
        tx.park(task_id, Actor.HUMAN, "decided", expected_from=Status.CONFLICT)
        tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "go", expected_from=Status.BLOCKED)
        tx.record_violations(task_id, ["b.txt"])
        tx.insert_session(task_id, branch="corral/t2")  # a new session: the old one's pending paths are not its own
    with store.write() as tx:
        change = tx.park(task_id, Actor.SYSTEM, "turn ended", expected_from=Status.WORKING)
    assert change is not None and change.to_status is Status.BLOCKED
    assert [r[2] for r in _history(store, task_id)] == [
        "backlog",
        "working",
        "conflict",
        "blocked",
        "working",
        "blocked",
    ]


def test_a_task_moved_meanwhile_refuses_the_one_statement_and_writes_nothing(store) -> None:  # type: ignore[no-untyped-def]
    task_id = _working(store)
    before = _history(store, task_id)
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.park(task_id, Actor.SYSTEM, "late", expected_from=Status.INTERRUPTED)
    assert info.value.code == "status-changed"
    assert _history(store, task_id) == before and _setter(store, task_id) == ("human", "start")


def test_an_update_of_the_status_by_hand_is_recorded_and_one_that_leaves_it_is_not(store) -> None:  # type: ignore[no-untyped-def]
    task_id = _working(store)
    with store.write() as tx:
        tx.update_task(task_id, goal="Move more")
        tx.execute("UPDATE tasks SET status = status WHERE id = ?", (task_id,))  # names it, leaves it
    assert len(_history(store, task_id)) == 2
    with store.write() as tx:  # not through the store's methods: the record is written all the same
        tx.execute("UPDATE tasks SET status = 'interrupted' WHERE id = ?", (task_id,))
    assert _history(store, task_id)[-1] == (3, "working", "interrupted", "human", "start")


class _Sent:
    """The store's connection, with every statement the store sends it noted (SQLite's own trace also names the
    statements a trigger runs, under the statement that fired it)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.sent: list[str] = []

    def execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        self.sent.append(sql.split()[0])
        return self.db.execute(sql, args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)


def test_a_sqlite_status_change_is_one_statement_between_begin_and_commit(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "corral.db", clock=clock)
    try:
        task_id = _working(store)
        real = store._db
        store._db = sent = _Sent(real)  # type: ignore[assignment]
        written: list[str] = []
        real.set_trace_callback(written.append)
        try:
            with store.write() as tx:
                tx.park(task_id, Actor.SYSTEM, None, expected_from=Status.WORKING)
            with store.write() as tx:
                tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
        finally:
            real.set_trace_callback(None)
            store._db = real
    finally:
        store.close()
    assert sent.sent == ["BEGIN", "UPDATE", "COMMIT", "BEGIN", "UPDATE", "COMMIT"]
    assert not [s for s in written if s.startswith(("SELECT", "INSERT"))]  # no read first, no insert of its own
    assert [r[2] for r in _history_of(tmp_path / "corral.db", task_id)] == ["backlog", "working", "blocked", "working"]


def _history_of(path: Path, task_id: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT id, from_status, to_status FROM status_changes WHERE task_id = ? ORDER BY id", (task_id,)
        ).fetchall()
    finally:
        db.close()


def _v8_rows(execute: object, insert_changes: object) -> None:
    """A schema-8 store's rows: a blocked task with three changes, a finished one, and one with no change at all."""
    for task_id, ref, status, finished in (("t1", "open", "blocked", None), ("t2", "done", "complete", LATER)):
        execute(  # type: ignore[operator]
            "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at, finished_at) "
            "VALUES (?, ?, 'Kept', ?, ?, ?, ?, ?)",
            (task_id, ref, status, AT, LATER, LATER, finished),
        )
    execute(  # type: ignore[operator]
        "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
        "VALUES ('t3', 'bare', 'Kept', 'backlog', ?, ?, ?)",
        (AT, AT, AT),
    )
    insert_changes(  # type: ignore[operator]
        [
            (1, "t1", None, "backlog", "human", "created", AT),
            (2, "t1", "backlog", "working", "human", "start", AT),
            (3, "t1", "working", "blocked", "system", None, LATER),
            (1, "t2", None, "backlog", "human", "created", AT),
            (2, "t2", "backlog", "complete", "system", "merged", LATER),
        ]
    )


def _kept(store: SQLiteStore | PostgresStore) -> None:
    assert store.schema_version() == LATEST
    assert _setter(store, "t1") == ("system", None)
    assert _setter(store, "t2") == ("system", "merged")
    assert _setter(store, "t3") == (None, None)
    assert [r[0] for r in _history(store, "t1")] == [1, 2, 3]
    assert len(_history(store, "t2")) == 2 and _history(store, "t3") == []  # the migration recorded nothing
    with store.write() as tx:
        tx.set_status("t1", Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
        tx.set_status("t3", Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    assert _history(store, "t1")[-1] == (4, "blocked", "working", "human", "unblock")
    assert _history(store, "t3") == [(1, "backlog", "working", "human", "start")]
    with store.read() as tx:
        assert [c.reason for c in tx.status_changes("t1")] == ["created", "start", None, "unblock"]


def test_a_schema_8_sqlite_store_migrates_with_its_rows_kept(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "corral.db"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    with sqlite_at(raw, 8):
        _v8_rows(raw.execute, lambda rows: raw.executemany("INSERT INTO status_changes VALUES (?,?,?,?,?,?,?)", rows))
    raw.close()
    store = SQLiteStore(path, clock=clock)
    try:
        _kept(store)
        assert store.check() == []
    finally:
        store.close()


def test_a_schema_8_postgres_store_migrates_with_its_rows_kept(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    with psycopg.connect(pg_server, autocommit=True) as conn, postgres_at(conn, pg_schema, 8):

        def execute(sql: str, args: tuple[object, ...]) -> None:
            conn.execute(sql.replace("?", "%s"), args)

        def changes(rows: list[tuple[object, ...]]) -> None:
            conn.cursor().executemany(
                "INSERT INTO status_changes (id, task_id, from_status, to_status, actor, reason, at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                rows,
            )

        _v8_rows(execute, changes)
    store = PostgresStore(pg_server, schema=pg_schema, clock=clock, mark_seconds=0)
    try:
        _kept(store)
    finally:
        store.close()


def test_a_read_transaction_refuses_the_one_statement_park_and_writes_nothing(store) -> None:  # type: ignore[no-untyped-def]
    task_id = _working(store)
    with pytest.raises(StoreError, match="read transaction"), store.read() as tx:
        tx.park(task_id, Actor.SYSTEM, "ended", expected_from=Status.WORKING)
    assert len(_history(store, task_id)) == 2 and _setter(store, task_id) == ("human", "start")
