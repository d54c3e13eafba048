"""The Store conformance suite (tests/store/conformance.py) run against ``PostgresStore`` on a real server,
and what is PostgreSQL's own: the schema per project, writers serialized, a newer schema refused,
an unreachable server named plainly, the same tables and columns as SQLite."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.errors import CorralError, RefusedError, StoreError, StoreTooNew
from corral.store import NewTask, SQLiteStore
from corral.store.migrations import LATEST
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock
from tests.store.conformance import *  # noqa: F403  (the test_* functions of the suite)
from tests.store.conformance import V3_ROWS, v3_lease_kept
from tests.store.old_schema import postgres_at
from tests.support import postgres as pg_support
from tests.support.postgres import Server, admin, free_port

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema


@pytest.fixture
def store(pg_server: str, pg_schema: str, clock: FakeClock) -> Iterator[PostgresStore]:
    db = PostgresStore(pg_server, schema=pg_schema, clock=clock, mark_seconds=0)  # every change mark asked anew
    yield db
    db.close()


def _columns_pg(url: str, schema: str) -> dict[str, set[str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %s", (schema,)
        ).fetchall()
    found: dict[str, set[str]] = {}
    for table, column in rows:
        found.setdefault(table, set()).add(column)
    return found


def test_the_schema_has_the_tables_and_columns_of_sqlites(store: PostgresStore, pg_server: str, tmp_path: Path) -> None:
    lite = SQLiteStore(tmp_path / "corral.db")
    db = sqlite3.connect(tmp_path / "corral.db")
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    sqlite_columns = {t: {r[1] for r in db.execute(f"PRAGMA table_info({t})")} for t in tables}
    db.close()
    lite.close()
    pg_columns = _columns_pg(pg_server, store.schema)
    # PostgreSQL names the row order SQLite keeps implicitly (rowid) as a column; nothing else differs.
    assert {t: c - {"rowid"} for t, c in pg_columns.items()} == sqlite_columns
    assert store.schema_version() == LATEST


def test_projects_in_one_database_are_kept_apart_by_schema(pg_server: str, pg_schema: str, clock: FakeClock) -> None:
    other_schema = pg_schema + "_b"
    one = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    two = PostgresStore(pg_server, schema=other_schema, clock=clock)
    try:
        with one.write() as tx:
            tx.insert_task(NewTask(ref="fix-login", goal="g"), Actor.HUMAN)
        with two.write() as tx:
            tx.insert_task(NewTask(ref="fix-login", goal="other"), Actor.HUMAN)  # the same ref: another project
        with one.read() as tx:
            assert [t.goal for t in tx.tasks()] == ["g"]
        with two.read() as tx:
            assert [t.goal for t in tx.tasks()] == ["other"]
    finally:
        one.close()
        two.close()
        admin(pg_server, f'DROP SCHEMA IF EXISTS "{other_schema}" CASCADE')


def test_a_refused_ref_leaves_the_transaction_usable(store: PostgresStore) -> None:
    with store.write() as tx:
        tx.insert_task(NewTask(ref="fix-login", goal="g"), Actor.HUMAN)
    with store.write() as tx:
        with pytest.raises(RefusedError):
            tx.insert_task(NewTask(ref="fix-login", goal="again"), Actor.HUMAN)
        tx.insert_task(NewTask(ref="fix-login-2", goal="next"), Actor.HUMAN)  # PostgreSQL did not abort it
    with store.read() as tx:
        assert sorted(tx.refs()) == ["fix-login", "fix-login-2"]


def test_an_agents_nul_is_kept_as_its_escape_never_a_refused_write(store: PostgresStore) -> None:
    # PostgreSQL's text cannot hold a NUL; an agent's result that carried one (the receipt's text is
    # the agent's own) must still be recorded, the NUL as the printable escape the intake uses.
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="fix-login", goal="g"), Actor.HUMAN)
        tx.add_turn(task.id, role=Role.AGENT, kind="start", content="before\x00after", details={"k": "a\x00b"})
    with store.read() as tx:
        (turn,) = tx.turns(task.id)
    assert turn.content == "before\\u0000after"
    assert turn.details == {"k": "a\x00b"}  # JSON keeps a NUL as ``\\u0000`` in its text: exact


def test_writers_are_serialized_so_a_compare_and_set_is_never_raced(store: PostgresStore) -> None:
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="fix-login", goal="g"), Actor.HUMAN)
    barrier = threading.Barrier(4)
    won: list[str] = []
    refused: list[str] = []

    def start(name: str) -> None:
        barrier.wait()
        try:
            with store.write() as tx:
                tx.set_status(task.id, Status.WORKING, Actor.HUMAN, name, expected_from=Status.BACKLOG)
            won.append(name)
        except RefusedError:
            refused.append(name)

    threads = [threading.Thread(target=start, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 3
    with store.read() as tx:
        assert [c.to_status for c in tx.status_changes(task.id)] == [Status.BACKLOG, Status.WORKING]


def test_a_writer_waits_for_the_lock_then_is_busy(pg_server: str, pg_schema: str, clock: FakeClock) -> None:
    holder = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    waiter = PostgresStore(pg_server, schema=pg_schema, clock=clock, busy_timeout=0.2)
    try:
        with holder.write() as tx:
            tx.insert_task(NewTask(ref="a", goal="g"), Actor.HUMAN)
            with pytest.raises(StoreError) as info, waiter.write() as other:
                other.insert_task(NewTask(ref="b", goal="g"), Actor.HUMAN)
        assert info.value.code == "store-busy"
        with waiter.read() as tx:
            assert tx.refs() == ["a"]
    finally:
        holder.close()
        waiter.close()


def test_a_newer_schema_is_refused_with_sqlites_error_and_nothing_changes(
    store: PostgresStore, pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    store.close()
    admin(
        pg_server,
        f'INSERT INTO "{pg_schema}".schema_migrations (version, name, applied_at) '
        f"VALUES ({LATEST + 1}, 'future', 'x')",
    )
    with pytest.raises(StoreTooNew) as info:
        PostgresStore(pg_server, schema=pg_schema, clock=clock)
    assert info.value.code == "store-too-new"
    assert f"schema version {LATEST + 1}, newer than this corral understands (up to {LATEST})" in info.value.message
    assert "pip install -U corral" in (info.value.hint or "")


def test_a_v3_schema_gains_process_owners_and_local_leases_with_every_row_kept(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    with psycopg.connect(pg_server, autocommit=True) as conn:
        with postgres_at(conn, pg_schema, 3):
            for statement in V3_ROWS:
                conn.execute(statement)
        with pytest.raises(psycopg.errors.CheckViolation):  # v3 knows no local lease
            conn.execute("UPDATE leases SET state = 'local'")
    store = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    try:
        assert store.schema_version() == LATEST == 8
        v3_lease_kept(store)
        assert store.check() == [] and store.health() == []
        with psycopg.connect(pg_server) as conn:
            indexes = {
                r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (pg_schema,))
            }
        assert "turns_current_command" in indexes
    finally:
        store.close()


def test_an_unreachable_server_is_a_coded_error_without_the_password() -> None:
    url = f"postgresql://corral:s3cret@127.0.0.1:{free_port()}/corral"
    with pytest.raises(StoreError) as info:
        PostgresStore(url, schema="corral_x", connect_timeout=2)
    assert info.value.code == "store-unreachable"
    assert "s3cret" not in info.value.message and "****" in info.value.message
    assert "database_url" in (info.value.hint or "")


def test_health_is_empty_when_healthy_and_names_a_dropped_table(store: PostgresStore, pg_server: str) -> None:
    assert store.health() == []
    assert store.check() == []
    admin(pg_server, f'DROP TABLE "{store.schema}".processes')
    faults = store.health()
    assert [f.code for f in faults] == ["store-corrupt"]
    assert "processes" in faults[0].message


def test_a_connection_the_server_dropped_is_replaced_without_an_error(store: PostgresStore, pg_server: str) -> None:
    with store.write() as tx:
        tx.insert_task(NewTask(ref="a", goal="g"), Actor.HUMAN)
    admin(pg_server, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'corral'")
    with store.read() as tx:
        assert [t.ref for t in tx.tasks()] == ["a"]
    with store.write() as tx:
        tx.insert_task(NewTask(ref="b", goal="g"), Actor.HUMAN)


def test_a_server_that_stopped_is_unreachable_not_a_traceback(clock: FakeClock) -> None:
    server = Server()
    try:
        store = PostgresStore(server.url, schema="corral_gone", clock=clock, connect_timeout=1, busy_timeout=1)
        with store.write() as tx:
            tx.insert_task(NewTask(ref="a", goal="g"), Actor.HUMAN)
    finally:
        server.stop()
    try:
        with pytest.raises(CorralError) as info, store.read() as tx:
            tx.tasks()
        assert info.value.code == "store-unreachable"
        assert "cannot be reached" in info.value.message and info.value.hint
        faults = store.health()
        assert [f.code for f in faults] == ["store-unreachable"]
    finally:
        store.close()


def test_backup_is_an_sqlite_file_with_every_record(store: PostgresStore, tmp_path: Path) -> None:
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="a", goal="g"), Actor.HUMAN)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "go")
    dest = tmp_path / "backup.db"
    store.backup_to(str(dest))
    assert dest.stat().st_mode & 0o777 == 0o600
    assert SQLiteStore.verify_file(dest) == LATEST
    copy = SQLiteStore(dest, create=False)
    try:
        with copy.read() as tx:
            assert [c.to_status for c in tx.status_changes(task.id)] == [Status.BACKLOG, Status.WORKING]
    finally:
        copy.close()
    with pytest.raises(StoreError) as info:
        store.backup_to(str(dest))
    assert info.value.code == "backup-exists"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://me:pw@db:5432/corral", "postgresql://me:****@db:5432/corral"),
        ("postgres://me@db/corral", "postgres://me@db/corral"),
        ("postgresql://me:p%40ss@db/corral?sslmode=require", "postgresql://me:****@db/corral?sslmode=require"),
        ("postgresql://db/corral?user=me&password=pw", "postgresql://db/corral?user=me&password=****"),
        ("host=db user=me password='it\\'s a pw' dbname=corral", "host=db user=me password=**** dbname=corral"),
        ("host=db password=plain", "host=db password=****"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    from corral.store.dsn import redact

    assert redact(url) == shown


def test_a_schema_is_named_from_the_state_directory() -> None:
    from corral.store.dsn import schema_name

    assert schema_name("my-app--4f1c2a9b7e01") == "corral_my_app_4f1c2a9b7e01"
    long_one, other = "x" * 80 + "--a", "x" * 80 + "--b"
    assert len(schema_name(long_one)) <= 63 and schema_name(long_one) != schema_name(other)


def test_the_change_mark_sees_another_hosts_commit_and_is_asked_of_the_server_at_most_every_mark_seconds(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    watching = PostgresStore(pg_server, schema=pg_schema, clock=clock, mark_seconds=3600)
    writing = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    fresh = PostgresStore(pg_server, schema=pg_schema, clock=clock, mark_seconds=0)
    try:
        before, asked = watching.change_mark(), fresh.change_mark()
        with writing.write() as tx:
            tx.insert_task(NewTask(ref="from-elsewhere", goal="g"), Actor.HUMAN)
        assert watching.change_mark() == before  # within its mark_seconds: the last answer, no query
        assert fresh.change_mark() != asked  # asked anew: the other store's commit is seen
        watching.mark_seconds = 0
        assert watching.change_mark() != before
    finally:
        for db in (watching, writing, fresh):
            db.close()
