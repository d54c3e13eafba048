"""What only the SQLite store promises: durability settings, migrations, refusal of foreign files,
concurrency between processes, STRICT tables, append-only history."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.errors import CorralError, StoreCorrupt, StoreError, StoreTooNew
from corral.store import NewTask, SQLiteStore
from corral.store.migrations import LATEST, MIGRATIONS
from corral.store.sqlite import BUSY_TIMEOUT
from tests.conftest import FakeClock
from tests.store.conformance import V3_ROWS, v3_lease_kept
from tests.store.old_schema import sqlite_at


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "corral.db"


@pytest.fixture
def store(db_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db_path, clock=clock)
    yield s
    s.close()


def _conn(store: SQLiteStore) -> sqlite3.Connection:
    db = store._db
    assert isinstance(db, sqlite3.Connection)
    return db


def _make_task(store: SQLiteStore, ref: str = "fix-login") -> str:
    with store.write() as tx:
        return tx.insert_task(NewTask(ref=ref, goal="g"), Actor.HUMAN).id


# -- durability settings -------------------------------------------------------------------


def test_the_connection_uses_wal_and_synchronous_full(store: SQLiteStore, db_path: Path) -> None:
    db = _conn(store)
    assert db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    # WAL is persistent in the file: another connection sees it too
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"


def test_a_write_transaction_takes_the_lock_up_front(store: SQLiteStore, db_path: Path) -> None:
    """BEGIN IMMEDIATE: while a write transaction is open, another writer cannot start one."""
    other = sqlite3.connect(db_path, timeout=0.05, isolation_level=None)
    try:
        with store.write(), pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()


# -- migrations ----------------------------------------------------------------------------------


def test_migrations_from_a_new_file_are_recorded(store: SQLiteStore, db_path: Path, clock: FakeClock) -> None:
    assert db_path.exists()
    assert store.schema_version() == LATEST
    rows = _conn(store).execute("SELECT version, name, applied_at FROM schema_migrations ORDER BY version").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(n, name) for n, name, _ in MIGRATIONS]
    assert all(r[2] == "2026-01-01T00:00:00.000000Z" for r in rows)
    assert store.check() == []


def test_migrations_from_an_empty_file(db_path: Path, clock: FakeClock) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"")
    s = SQLiteStore(db_path, clock=clock)
    try:
        assert s.schema_version() == LATEST
        tables = {r[0] for r in _conn(s).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"tasks", "sessions", "turns", "attempts", "status_changes", "violations", "notes"} <= tables
        assert "schema_migrations" in tables
    finally:
        s.close()


def test_reopening_a_migrated_file_migrates_nothing_and_keeps_the_data(db_path: Path, clock: FakeClock) -> None:
    first = SQLiteStore(db_path, clock=clock)
    task_id = _make_task(first)
    first.close()
    clock.advance(3600)
    second = SQLiteStore(db_path, clock=clock)
    try:
        rows = _conn(second).execute("SELECT version, applied_at FROM schema_migrations").fetchall()
        # Every migration was applied at the first open, none again at the second.
        assert [tuple(r) for r in rows] == [(n, "2026-01-01T00:00:00.000000Z") for n in range(1, LATEST + 1)]
        with second.read() as tx:
            assert tx.get_task(task_id) is not None
    finally:
        second.close()


def test_a_v3_file_gains_process_owners_and_local_leases_with_every_row_kept(db_path: Path, clock: FakeClock) -> None:
    db_path.parent.mkdir(parents=True)
    raw = sqlite3.connect(db_path, isolation_level=None)
    raw.execute("PRAGMA foreign_keys = ON")
    with sqlite_at(raw, 3):
        for statement in V3_ROWS:
            raw.execute(statement)
    with pytest.raises(sqlite3.IntegrityError):  # v3 knows no local lease
        raw.execute("UPDATE leases SET state = 'local'")
    raw.close()
    s = SQLiteStore(db_path, clock=clock)
    try:
        assert s.schema_version() == LATEST == 8
        v3_lease_kept(s)
        indexes = {r[0] for r in _conn(s).execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "leases_state" in indexes and "turns_current_command" in indexes
        assert s.check() == []
    finally:
        s.close()


# -- files corral must refuse without touching them --------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a database, just some text that happens to be here\n" * 3,
        bytes(range(256)) * 40,
        b"SQLite format 3\x00" + b"\xff" * 4080,
    ],
    ids=["text", "binary", "bad-header"],
)
def test_a_file_that_is_not_a_database_is_refused_and_left_alone(db_path: Path, content: bytes) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(content)
    with pytest.raises(StoreCorrupt) as info:
        SQLiteStore(db_path)
    assert str(db_path) in info.value.message
    assert info.value.exit_code == 1
    assert info.value.code == "store-corrupt"
    assert info.value.hint and "Nothing was changed" in info.value.hint
    assert db_path.read_bytes() == content
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["corral.db"]


def _future_database(path: Path, journal_mode: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA journal_mode = {journal_mode}")
    raw.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    raw.executemany(
        "INSERT INTO schema_migrations VALUES (?, ?, ?)",
        [(n, f"m{n}", "2030-01-01T00:00:00Z") for n in range(1, LATEST + 2)],
    )
    raw.commit()
    raw.close()
    return path.read_bytes()


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_database_from_a_newer_corral_is_refused_and_left_alone(db_path: Path, journal_mode: str) -> None:
    """The hint says "nothing was changed": that must hold whatever journal mode the file is in."""
    before = _future_database(db_path, journal_mode)
    with pytest.raises(StoreTooNew) as info:
        SQLiteStore(db_path)
    assert str(db_path) in info.value.message
    assert str(LATEST + 1) in info.value.message
    assert info.value.code == "store-too-new"
    assert info.value.exit_code == 1
    assert db_path.read_bytes() == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["corral.db"]


# -- concurrency: two stores on one file --------------------------------------------------------


def test_two_stores_in_two_threads_lose_no_update(db_path: Path, clock: FakeClock) -> None:
    setup = SQLiteStore(db_path, clock=clock)
    task_id = _make_task(setup)
    with setup.write() as tx:
        tx.update_task(task_id, metadata={"count": 0})
    setup.close()
    rounds = 40
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def worker(name: str) -> None:
        s = SQLiteStore(db_path, clock=clock)
        try:
            barrier.wait()
            for i in range(rounds):
                with s.write() as tx:
                    task = tx.get_task(task_id)
                    assert task is not None
                    tx.update_task(task_id, metadata={"count": task.metadata["count"] + 1})
                    tx.add_turn(task_id, role=Role.HUMAN, actor=Actor.HUMAN, kind="note", content=f"{name}-{i}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    check = SQLiteStore(db_path, clock=clock)
    try:
        with check.read() as tx:
            task = tx.get_task(task_id)
            turns = tx.turns(task_id)
        assert task is not None and task.metadata["count"] == 2 * rounds
        assert [t.sequence for t in turns] == list(range(1, 2 * rounds + 1))
        assert sorted(t.content for t in turns) == sorted(f"{n}-{i}" for n in "ab" for i in range(rounds))
    finally:
        check.close()


_WORKER = textwrap.dedent(
    """
    import sys
    from corral.domain.actors import Actor
    from corral.store import SQLiteStore
    path, task_id, rounds, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = SQLiteStore(path)
    for i in range(rounds):
        with store.write() as tx:
            task = tx.get_task(task_id)
            tx.update_task(task_id, metadata={"count": task.metadata["count"] + 1})
            tx.add_comment(task_id, Actor.HUMAN, f"{name}-{i}")
    store.close()
    """
)


def test_two_processes_writing_the_same_file_lose_no_update(db_path: Path) -> None:
    setup = SQLiteStore(db_path)
    task_id = _make_task(setup)
    with setup.write() as tx:
        tx.update_task(task_id, metadata={"count": 0})
    setup.close()
    rounds = 30
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(db_path), task_id, str(rounds), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
        )
        for name in ("p", "q")
    ]
    for p in procs:
        _out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err.decode()
    check = SQLiteStore(db_path)
    try:
        with check.read() as tx:
            task = tx.get_task(task_id)
            comments = tx.comments(task_id)
        assert task is not None and task.metadata["count"] == 2 * rounds
        assert sorted(c.body for c in comments) == sorted(f"{n}-{i}" for n in "pq" for i in range(rounds))
    finally:
        check.close()


def test_a_reader_sees_a_snapshot_while_a_writer_commits(db_path: Path, clock: FakeClock) -> None:
    writer = SQLiteStore(db_path, clock=clock)
    reader = SQLiteStore(db_path, clock=clock)
    try:
        task_id = _make_task(writer)
        with reader.read() as rtx:
            assert rtx.get_task(task_id) is not None
            with writer.write() as wtx:  # WAL: a writer is not blocked by a reader
                wtx.set_status(task_id, Status.WORKING, Actor.HUMAN)
            assert rtx.get_task(task_id).status is Status.BACKLOG  # type: ignore[union-attr]
        with reader.read() as rtx:
            assert rtx.get_task(task_id).status is Status.WORKING  # type: ignore[union-attr]
    finally:
        writer.close()
        reader.close()


# -- schema guarantees --------------------------------------------------------------------------


def test_strict_tables_reject_wrong_types(store: SQLiteStore) -> None:
    db = _conn(store)
    task_id = _make_task(store)
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO sessions (id, task_id, consecutive_interruptions, created_at) VALUES (?,?,?,?)",
            ("s1", task_id, "three", "2026-01-01T00:00:00Z"),
        )
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO attempts (turn_id, number, started_at, outcome) VALUES ('t', 'one', 'x', 'failed')",
        )
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE tasks SET goal = ? WHERE id = ?", (b"\x00\x01", task_id))


def test_check_constraints_reject_unknown_statuses_and_actorless_human_turns(store: SQLiteStore) -> None:
    db = _conn(store)
    task_id = _make_task(store)
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE tasks SET status = 'closed' WHERE id = ?", (task_id,))
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO turns (id, task_id, sequence, role, actor, kind, content, started_at) "
            "VALUES ('t', ?, 1, 'human', NULL, 'unblock', 'x', '2026-01-01T00:00:00Z')",
            (task_id,),
        )
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO turns (id, task_id, sequence, role, actor, kind, content, started_at) "
            "VALUES ('t', ?, 1, 'agent', 'agent', 'start', 'x', '2026-01-01T00:00:00Z')",
            (task_id,),
        )


def test_status_changes_are_append_only(store: SQLiteStore) -> None:
    db = _conn(store)
    task_id = _make_task(store)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE status_changes SET actor = 'system' WHERE task_id = ?", (task_id,))
    assert db.execute("SELECT actor FROM status_changes WHERE task_id = ?", (task_id,)).fetchone()[0] == "human"


def test_notes_are_append_only(store: SQLiteStore) -> None:
    db = _conn(store)
    task_id = _make_task(store)
    with store.write() as tx:
        tx.add_journal_entry(task_id, Actor.HUMAN, "decided")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE notes SET body = 'rewritten'")


def test_a_transaction_that_fails_to_begin_is_a_store_error(db_path: Path, clock: FakeClock) -> None:
    """A writer that cannot get the lock within its busy timeout reports store-busy, not a traceback."""
    store = SQLiteStore(db_path, clock=clock, busy_timeout=0.05)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError) as info, store.write():
            pass
        assert info.value.code == "store-busy"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        store.close()


def test_the_busy_timeout_is_the_stores_argument_with_one_default(db_path: Path, clock: FakeClock) -> None:
    default = SQLiteStore(db_path, clock=clock)
    short = SQLiteStore(db_path, clock=clock, busy_timeout=0.25)
    try:
        assert default.busy_timeout == BUSY_TIMEOUT == 10.0
        assert _conn(default).execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
        assert _conn(short).execute("PRAGMA busy_timeout").fetchone()[0] == 250
    finally:
        default.close()
        short.close()
    with pytest.raises(ValueError):
        SQLiteStore(db_path, clock=clock, busy_timeout=-1)


def test_a_writer_waits_for_a_lock_released_within_its_busy_timeout(db_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(db_path, clock=clock, busy_timeout=30)
    blocker = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    holding = threading.Event()
    release = threading.Timer(0.3, lambda: (blocker.execute("ROLLBACK"), holding.set()))
    release.start()
    try:
        with store.write() as tx:  # waits for the blocker instead of failing
            assert holding.is_set()
            tx.insert_task(NewTask(ref="after-the-lock", goal="g"), Actor.HUMAN)
        with store.read() as tx:
            assert tx.task_by_ref("after-the-lock") is not None
    finally:
        release.join()
        blocker.close()
        store.close()


def test_a_file_where_the_state_directory_must_go_is_a_store_error(tmp_path: Path) -> None:
    """DESIGN.md: cause failures with "a file where a directory must go". The store must say
    which path is in the way (a typed error), not leak a bare OSError."""
    blocker = tmp_path / "home"
    blocker.write_text("a file, not a directory\n")
    with pytest.raises(CorralError) as info:
        SQLiteStore(blocker / "projects" / "repo--0123" / "corral.db")
    assert str(blocker) in info.value.message
    assert info.value.hint
    assert blocker.read_text() == "a file, not a directory\n"


def test_a_task_read_again_unchanged_is_the_record_already_decoded(store: SQLiteStore, db_path: Path) -> None:
    with store.write() as tx:
        tid = tx.insert_task(NewTask(ref="decoded-once", goal="g"), Actor.HUMAN).id
    with store.read() as tx:
        first = tx.get_task(tid)
        listed = tx.tasks([Status.BACKLOG])
    assert first is not None and listed[0] is first  # one decode serves every read of the same row
    with store.write() as tx:
        tx.update_task(tid, goal="changed")
    with store.read() as tx:
        again = tx.get_task(tid)
    assert again is not None and again is not first and again.goal == "changed"
    # A change made by another process (another connection) is seen: the row decides, not the memo.
    other = sqlite3.connect(db_path)
    other.execute("UPDATE tasks SET goal = 'from elsewhere' WHERE id = ?", (tid,))
    other.commit()
    other.close()
    with store.read() as tx:
        seen = tx.get_task(tid)
    assert seen is not None and seen.goal == "from elsewhere"


def test_a_session_read_again_unchanged_is_the_record_already_decoded(store: SQLiteStore) -> None:
    with store.write() as tx:
        tid = tx.insert_task(NewTask(ref="session-once", goal="g"), Actor.HUMAN).id
        sid = tx.insert_session(tid, worktree="/w", branch="corral/session-once").id
    with store.read() as tx:
        first = tx.get_session(sid)
        by_id = tx.sessions_by_id([sid])
    assert first is not None and by_id[sid] is first
    with store.write() as tx:
        tx.update_session(sid, consecutive_interruptions=2)
    with store.read() as tx:
        again = tx.get_session(sid)
    assert again is not None and again.consecutive_interruptions == 2


def test_a_commit_of_another_connection_moves_the_change_mark_as_ones_own_do(store: SQLiteStore, db_path: Path) -> None:
    other = SQLiteStore(db_path)
    try:
        before = store.change_mark()
        _make_task(other, "from-elsewhere")
        moved = store.change_mark()
        assert moved != before
        _make_task(store, "from-here")
        assert store.change_mark() not in (before, moved)
        assert store.change_mark() == store.change_mark()
    finally:
        other.close()


def test_a_working_tasks_current_command_is_read_from_its_index_alone(store: SQLiteStore) -> None:
    from corral.store.sqltx import _CURRENT_COMMAND_ID

    plan = " ".join(
        str(r[3])
        for r in _conn(store).execute(
            f"EXPLAIN QUERY PLAN SELECT id, {_CURRENT_COMMAND_ID} FROM tasks WHERE status = 'working'"
        )
    )
    assert "COVERING INDEX turns_current_command" in plan, plan
