"""Schema 7: the status index is two partial indexes, the unfinished tasks by creation and the finished ones by
their last change, so that a status change between two unfinished statuses rewrites one entry in place.
The reads by status give the same answers on both stores whatever statuses they are asked for, the SQLite
planner takes the partial index the statuses fit, and a schema-6 store migrates with its rows kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.store import NewTask, SQLiteStore
from corral.store.migrations import LATEST
from corral.store.postgres import PostgresStore
from corral.store.sqltx import _status_clause
from tests.conftest import FakeClock
from tests.store import either
from tests.store.old_schema import postgres_at, sqlite_at
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema

#: (ref, the statuses it passes through from backlog); each task ends at the last one.
PATHS = {
    "w": [Status.WORKING],
    "b": [Status.WORKING, Status.BLOCKED],
    "c": [Status.WORKING, Status.SUBMITTED, Status.MERGING, Status.COMPLETE],
    "a": [Status.ABANDONED],
    "k": [],
}


store = either.store


def fill(store: SQLiteStore | PostgresStore, clock: FakeClock) -> dict[str, str]:
    ids = {}
    for ref, path in PATHS.items():
        with store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal=f"Task {ref}"), Actor.HUMAN)
            ids[ref] = task.id
            for status in path:
                clock.advance(1)
                if status is Status.BLOCKED:
                    tx.park(task.id, Actor.SYSTEM, "move")
                else:
                    tx.set_status(task.id, status, Actor.HUMAN, "move")
        clock.advance(1)
    return ids


@pytest.mark.parametrize(
    ("asked", "refs"),
    [
        ([Status.WORKING, Status.BLOCKED], ["w", "b"]),  # unfinished only: the unfinished index
        ([Status.COMPLETE, Status.ABANDONED], ["c", "a"]),  # finished only: the finished index
        ([Status.BACKLOG, Status.COMPLETE], ["c", "k"]),  # both: no partial index holds them
        ([Status.ZOMBIE], []),
    ],
)
def test_reads_by_status_answer_the_same_whichever_index_holds_them(store, clock, asked, refs) -> None:  # type: ignore[no-untyped-def]
    ids = fill(store, clock)
    with store.read() as tx:
        by_creation = [t.ref for t in tx.tasks(asked)]
        heads = [h.ref for h in tx.task_heads(asked)]
        recent = [t.ref for t in tx.recent_tasks(asked, 10)]
    created = list(PATHS)
    assert by_creation == heads == sorted(refs, key=created.index)
    # newest change first: the last task filled was changed last
    assert recent == sorted(refs, key=created.index, reverse=True)
    assert all(ids[r] for r in refs)


def test_a_task_leaving_the_unfinished_ones_is_read_among_the_finished(store, clock) -> None:  # type: ignore[no-untyped-def]
    ids = fill(store, clock)
    with store.write() as tx:
        tx.set_status(ids["b"], Status.ABANDONED, Actor.HUMAN, "drop")
    with store.read() as tx:
        assert [t.ref for t in tx.tasks([Status.WORKING, Status.BLOCKED])] == ["w"]
        assert [t.ref for t in tx.recent_tasks([Status.COMPLETE, Status.ABANDONED], 1)] == ["b"]
        assert "b" not in tx.refs("zz")  # the unfinished refs offered for a near miss
        assert "w" in tx.refs("zz")


def _plan(db: sqlite3.Connection, sql: str, args: tuple[object, ...]) -> str:
    return " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))


def test_sqlite_reads_by_status_use_the_partial_index_their_statuses_fit(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "corral.db"
    store = SQLiteStore(path, clock=clock)
    fill(store, clock)
    store.close()
    db = sqlite3.connect(path)
    try:
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"tasks_unfinished", "tasks_finished"} <= indexes and "tasks_status" not in indexes
        # The conditions the store's reads state, planned on the same file.
        unfinished = _status_clause([Status.WORKING, Status.BLOCKED])
        finished = _status_clause([Status.COMPLETE, Status.ABANDONED])
        mixed = _status_clause([Status.BACKLOG, Status.COMPLETE])
        by_creation = f"SELECT id FROM tasks WHERE {unfinished} ORDER BY created_at"
        assert "tasks_unfinished" in _plan(db, by_creation, ("working", "blocked"))
        latest = f"SELECT id FROM tasks WHERE {finished} ORDER BY updated_at DESC LIMIT 5"
        assert "tasks_finished" in _plan(db, latest, ("complete", "abandoned"))
        assert "tasks_unfinished" not in _plan(db, f"SELECT id FROM tasks WHERE {mixed}", ("backlog", "complete"))
    finally:
        db.close()


def test_a_schema_6_sqlite_store_gets_the_partial_indexes_with_its_rows_kept(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "corral.db"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    with sqlite_at(raw, 6):
        at = "2026-01-01T00:00:00.000000Z"
        raw.execute(
            "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
            "VALUES ('t1', 'old', 'Kept', 'blocked', ?, ?, ?)",
            (at, at, at),
        )
    assert "tasks_status" in {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    raw.close()
    store = SQLiteStore(path, clock=clock)
    try:
        assert store.schema_version() == LATEST == 8
        with store.read() as tx:
            assert [t.ref for t in tx.tasks([Status.BLOCKED])] == ["old"]
    finally:
        store.close()
    db = sqlite3.connect(path)
    try:
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        db.close()
    assert "tasks_status" not in indexes and {"tasks_unfinished", "tasks_finished"} <= indexes


def test_a_schema_6_postgres_store_gets_the_partial_indexes_with_its_rows_kept(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    with psycopg.connect(pg_server, autocommit=True) as conn, postgres_at(conn, pg_schema, 6):
        at = "2026-01-01T00:00:00Z"
        conn.execute(
            "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
            "VALUES ('t1', 'old', 'Kept', 'complete', %s, %s, %s)",
            (at, at, at),
        )
    store = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    try:
        assert store.schema_version() == LATEST == 8
        with store.read() as tx:
            assert [t.ref for t in tx.recent_tasks([Status.COMPLETE], 5)] == ["old"]
        with psycopg.connect(pg_server) as conn:
            indexes = {
                r[0]: r[1]
                for r in conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'tasks'",
                    (pg_schema,),
                )
            }
        assert "tasks_status_updated" not in indexes
        assert "WHERE" in indexes["tasks_unfinished"] and "WHERE" in indexes["tasks_finished"]
    finally:
        store.close()
