"""Schema 8: a task's finished time keys the partial status indexes, and status changes are keyed by their task
and a number within it. A change between two unfinished statuses writes the task's row and its status change
and no page of any other b-tree; the reads that used the dropped index are served by an index still; a schema-7
store, SQLite or PostgreSQL, migrates with every row kept."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import psycopg
import pytest

from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.status import Status
from corral.errors import StoreCorrupt, StoreError
from corral.store import NewTask, SQLiteStore
from corral.store import sqlite as sqlite_store
from corral.store.migrations import LATEST, MIGRATIONS
from corral.store.postgres import PostgresStore
from corral.store.sqltx import _status_clause
from tests.conftest import FakeClock
from tests.store import either
from tests.store.old_schema import postgres_at, sqlite_at
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema

AT = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-02T00:00:00.000000Z"

#: A schema-7 store's rows: three tasks whose status changes interleave (ids counted across the table, as they were).
V7_TASKS = [
    ("t1", "open", "blocked", AT, LATER),
    ("t2", "done", "complete", AT, LATER),
    ("t3", "dropped", "abandoned", AT, AT),
]
V7_CHANGES = [
    (1, "t1", None, "backlog", "human", "created", AT),
    (2, "t2", None, "backlog", "human", "created", AT),
    (3, "t1", "backlog", "working", "human", "start", AT),
    (4, "t3", None, "backlog", "human", "created", AT),
    (5, "t2", "backlog", "working", "human", "start", AT),
    (6, "t1", "working", "blocked", "system", "turn ended", LATER),
    (7, "t3", "backlog", "abandoned", "human", "close", AT),
    (8, "t2", "working", "submitted", "agent", "done", LATER),
    (9, "t2", "submitted", "merging", "human", "accept", LATER),
    (10, "t2", "merging", "complete", "system", "merged", LATER),
]


#: Rows that refer to those tasks (SQLite makes ``tasks`` again): a session that is t1's current one, t3 a child of
#: t1, and a comment on t2.
V7_REFERENCES = [
    f"INSERT INTO sessions (id, task_id, branch, created_at) VALUES ('s1', 't1', 'corral/open', '{AT}')",
    "UPDATE tasks SET session_id = 's1' WHERE id = 't1'",
    "UPDATE tasks SET parent_id = 't1' WHERE id = 't3'",
    f"INSERT INTO notes (id, task_id, kind, actor, body, at) VALUES ('n1', 't2', 'comment', 'human', 'Kept', '{AT}')",
]


store = either.store


def _finished_at(store: SQLiteStore | PostgresStore, task_id: str) -> str | None:
    with store.read() as tx:
        row = tx.execute("SELECT finished_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
    value: str | None = row[0]
    return value


def test_a_task_has_a_finished_time_exactly_while_its_status_is_finished(store, clock) -> None:  # type: ignore[no-untyped-def]
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="t", goal="Finish"), Actor.HUMAN)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    assert _finished_at(store, task.id) is None
    clock.advance(5)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM, "turn ended", expected_from=Status.WORKING)
        tx.set_status(task.id, Status.ABANDONED, Actor.HUMAN, "close", expected_from=Status.BLOCKED)
        finished = tx.now()
    assert _finished_at(store, task.id) == rfc3339(finished)  # the time of the change that finished it
    with store.read() as tx:
        assert [t.ref for t in tx.recent_tasks([Status.ABANDONED], 5)] == ["t"]
        assert tx.tasks([Status.BLOCKED, Status.BACKLOG]) == []
    with store.write() as tx:  # reopened: unfinished again, listed among the unfinished
        tx.park(task.id, Actor.HUMAN, "reopen")
    assert _finished_at(store, task.id) is None
    with store.read() as tx:
        assert [t.ref for t in tx.tasks([Status.BLOCKED])] == ["t"]
        assert tx.recent_tasks([Status.ABANDONED], 5) == []
        changes = tx.status_changes(task.id)
    assert [c.to_status for c in changes] == [
        Status.BACKLOG,
        Status.WORKING,
        Status.BLOCKED,
        Status.ABANDONED,
        Status.BLOCKED,
    ]


def test_a_finished_time_on_an_unfinished_task_or_none_on_a_finished_one_is_refused(store) -> None:  # type: ignore[no-untyped-def]
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="t", goal="Stay"), Actor.HUMAN)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.CheckViolation)), store.write() as tx:
        tx.execute("UPDATE tasks SET finished_at = ? WHERE id = ?", (AT, task.id))
    assert _finished_at(store, task.id) is None
    with store.write() as tx:
        tx.set_status(task.id, Status.ABANDONED, Actor.HUMAN, "close")
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.CheckViolation)), store.write() as tx:
        tx.execute("UPDATE tasks SET finished_at = NULL WHERE id = ?", (task.id,))
    assert _finished_at(store, task.id) is not None


def test_status_changes_are_numbered_within_their_task_and_read_in_order(store, clock) -> None:  # type: ignore[no-untyped-def]
    ids = []
    for ref in ("a", "b"):
        with store.write() as tx:
            ids.append(tx.insert_task(NewTask(ref=ref, goal=f"Task {ref}"), Actor.HUMAN).id)
    for _ in range(3):  # the two tasks' changes interleave
        for task_id in ids:
            clock.advance(1)
            with store.write() as tx:
                tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
                tx.park(task_id, Actor.SYSTEM, "ended", expected_from=Status.WORKING)
                tx.set_status(task_id, Status.BACKLOG, Actor.HUMAN, "back", expected_from=Status.BLOCKED)
    with store.read() as tx:
        sql = "SELECT id FROM status_changes WHERE task_id = ? ORDER BY id"
        numbers = {task_id: [r[0] for r in tx.execute(sql, (task_id,))] for task_id in ids}
        history = tx.status_changes(ids[0])
        since = tx.changes_since(clock.now.replace(year=2000))
    assert numbers[ids[0]] == numbers[ids[1]] == list(range(1, 11))
    assert [c.to_status for c in history[1:4]] == [Status.WORKING, Status.BLOCKED, Status.BACKLOG]
    assert len(since) == 20
    assert [c.at for c in since] == sorted(c.at for c in since)  # oldest first
    mine = [c for c in since if c.task_id == ids[0]]
    assert [(c.from_status, c.to_status) for c in mine] == [(c.from_status, c.to_status) for c in history]


def _wal_pages(wal: Path) -> list[int]:
    data = wal.read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    return [struct.unpack(">I", data[at : at + 4])[0] for at in range(32, len(data), 24 + page_size)]


def test_a_change_between_unfinished_statuses_writes_only_the_task_and_its_change(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "corral.db"
    store = SQLiteStore(path, clock=clock)
    try:
        with store.write() as tx:
            for n in range(50):  # other tasks, finished and not, so every index has entries
                other = tx.insert_task(NewTask(ref=f"o{n}", goal="Other"), Actor.HUMAN)
                if n % 2:
                    tx.set_status(other.id, Status.ABANDONED, Actor.HUMAN, "close")
            task = tx.insert_task(NewTask(ref="t", goal="Move"), Actor.HUMAN)
            tx.insert_session(task.id, branch="corral/t")
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(5):
            with store.write() as tx:
                tx.park(task.id, Actor.SYSTEM, None, expected_from=Status.WORKING)
            with store.write() as tx:
                tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
        pages = _wal_pages(path.with_name("corral.db-wal"))
        try:
            owners = {r[1]: r[0] for r in store._db.execute("SELECT name, pageno FROM dbstat")}
        except sqlite3.OperationalError:
            pytest.fail("this SQLite has no dbstat table: use one built with SQLITE_ENABLE_DBSTAT_VTAB (Python's has)")
    finally:
        store.close()
    written = {owners[p] for p in pages}
    assert written == {"tasks", "status_changes"}, written
    # One page of each per transition, and a leaf split now and then as the task's history grows (schema 7
    # wrote four pages per transition: the row, an entry of the status index, the change and its task index).
    assert 10 * 2 <= len(pages) <= 10 * 2 + 4


def _plan(db: sqlite3.Connection, sql: str, args: tuple[object, ...] = ()) -> str:
    return " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, args))


def test_sqlite_reads_of_status_changes_and_unfinished_refs_use_an_index(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "corral.db"
    SQLiteStore(path, clock=clock).close()
    db = sqlite3.connect(path)
    try:
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "status_changes_task" not in indexes
        one = _plan(db, "SELECT from_status FROM status_changes WHERE task_id = ? ORDER BY id", ("t",))
        assert "SEARCH status_changes USING PRIMARY KEY (task_id=?)" in one and "TEMP B-TREE" not in one
        near = _plan(db, "SELECT ref FROM tasks WHERE finished_at IS NULL")
        assert "tasks_unfinished" in near
        heads = f"SELECT id FROM tasks WHERE {_status_clause([Status.WORKING])} ORDER BY created_at, id"
        assert "tasks_unfinished" in _plan(db, heads, ("working",))
    finally:
        db.close()


def _v7_sqlite(path: Path) -> None:
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    with sqlite_at(raw, 7):
        for task_id, ref, status, created, updated in V7_TASKS:
            raw.execute(
                "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
                "VALUES (?, ?, 'Kept', ?, ?, ?, ?)",
                (task_id, ref, status, created, updated, updated),
            )
        raw.executemany("INSERT INTO status_changes VALUES (?, ?, ?, ?, ?, ?, ?)", V7_CHANGES)
        for statement in V7_REFERENCES:
            raw.execute(statement)
    raw.close()


def _v7_postgres(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn, postgres_at(conn, schema, 7):
        for task_id, ref, status, created, updated in V7_TASKS:
            conn.execute(
                "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
                "VALUES (%s, %s, 'Kept', %s, %s, %s, %s)",
                (task_id, ref, status, created, updated, updated),
            )
        conn.cursor().executemany(
            "INSERT INTO status_changes (id, task_id, from_status, to_status, actor, reason, at) "
            "OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s, %s, %s, %s, %s)",
            V7_CHANGES,
        )
        for statement in V7_REFERENCES:
            conn.execute(statement)


def _kept(store: SQLiteStore | PostgresStore) -> None:
    """What a schema-7 store's rows read as after the migration, and the next change of a migrated task."""
    assert store.schema_version() == LATEST == 8
    with store.read() as tx:
        assert [t.ref for t in tx.tasks([Status.BLOCKED, Status.WORKING])] == ["open"]
        assert [t.ref for t in tx.recent_tasks([Status.COMPLETE, Status.ABANDONED], 5)] == ["done", "dropped"]
        for task_id, *_ in V7_TASKS:
            kept = [(c.from_status, c.to_status, c.actor, c.reason) for c in tx.status_changes(task_id)]
            assert kept == [
                (Status(src) if src else None, Status(dst), Actor(actor), reason)
                for _, tid, src, dst, actor, reason, _at in V7_CHANGES
                if tid == task_id
            ]
        finished = dict(tx.execute("SELECT id, finished_at FROM tasks").fetchall())
        opened = tx.get_task("t1")
        assert opened is not None and opened.session_id == "s1"
        assert [s.id for s in tx.sessions("t1")] == ["s1"]
        assert [t.ref for t in tx.children("t1")] == ["dropped"]
        assert [n.body for n in tx.comments("t2")] == ["Kept"]
    assert finished == {"t1": None, "t2": LATER, "t3": AT}  # the last change of a finished task
    with store.write() as tx:
        tx.set_status("t1", Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
    with store.read() as tx:
        numbers = [r[0] for r in tx.execute("SELECT id FROM status_changes WHERE task_id = 't1' ORDER BY id")]
        assert tx.status_changes("t1")[-1].reason == "unblock"
    assert numbers == [1, 3, 6, 7]  # kept as they were; the next counts on from the task's last


def test_a_schema_7_sqlite_store_migrates_with_its_rows_kept(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "corral.db"
    _v7_sqlite(path)
    store = SQLiteStore(path, clock=clock)
    try:
        _kept(store)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"), store.write() as tx:
            tx.execute("UPDATE status_changes SET reason = 'rewritten'")
        assert store.check() == []
        # the foreign keys, off while the tables were made again, are enforced again
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"), store.write() as tx:
            tx.execute(f"INSERT INTO sessions (id, task_id, created_at) VALUES ('x', 'nobody', '{AT}')")
    finally:
        store.close()
    db = sqlite3.connect(path)
    try:
        sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'status_changes'").fetchone()[0]
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        db.close()
    assert "WITHOUT ROWID" in sql and "status_changes_task" not in indexes
    assert {"tasks_unfinished", "tasks_finished"} <= indexes


def test_a_schema_7_sqlite_store_with_a_broken_reference_still_migrates_and_breaks_no_other(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "corral.db"
    _v7_sqlite(path)
    raw = sqlite3.connect(path)  # foreign keys off, as a damaged file might have been written
    raw.execute(f"INSERT INTO sessions (id, task_id, created_at) VALUES ('lost', 'gone', '{AT}')")
    raw.commit()
    raw.close()
    store = SQLiteStore(path, clock=clock)
    try:
        assert store.schema_version() == LATEST
        assert [p for p in store.check() if p.startswith("foreign key")] == ["foreign key: sessions row 2 -> tasks"]
    finally:
        store.close()


def test_a_migration_that_would_break_a_reference_is_refused_and_changes_nothing(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "corral.db"
    _v7_sqlite(path)

    def drops_a_task(db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM tasks WHERE id = 't1'")  # its session and child still name it

    monkeypatch.setattr(sqlite_store, "MIGRATIONS", [*MIGRATIONS, (LATEST + 1, "breaks", drops_a_task)])
    monkeypatch.setattr(sqlite_store, "LATEST", LATEST + 1)
    with pytest.raises(StoreCorrupt, match="nothing was changed") as info:
        SQLiteStore(path, clock=clock)
    assert "sessions row 1 -> tasks" in info.value.message
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == 7
        assert db.execute("SELECT COUNT(*) FROM tasks WHERE id = 't1'").fetchone()[0] == 1
    finally:
        db.close()


def test_a_schema_7_postgres_store_migrates_with_its_rows_kept(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    _v7_postgres(pg_server, pg_schema)
    store = PostgresStore(pg_server, schema=pg_schema, clock=clock, mark_seconds=0)
    try:
        _kept(store)
        with pytest.raises(StoreError, match="append-only"), store.write() as tx:
            tx.execute("UPDATE status_changes SET reason = 'rewritten'")
        with psycopg.connect(pg_server) as conn:
            indexes = {
                r[0]: r[1]
                for r in conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
                    "AND tablename IN ('tasks', 'status_changes')",
                    (pg_schema,),
                )
            }
        assert "status_changes_task" not in indexes
        assert "(task_id, id)" in indexes["status_changes_pkey"]
        assert "finished_at IS NULL" in indexes["tasks_unfinished"]
        assert "finished_at IS NOT NULL" in indexes["tasks_finished"]
    finally:
        store.close()
