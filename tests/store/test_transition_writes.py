"""A status change writes as little as the same records and guarantees allow: when the caller names the one
status it expects, the update itself is the compare-and-set (no read first); PostgreSQL keeps one index
of the status and the last change (schema 6), where it kept two. Both stores, the same answers."""

from __future__ import annotations

import psycopg
import pytest

from corral.domain.actors import Actor
from corral.domain.records import RestingCause
from corral.domain.status import Status
from corral.errors import IllegalTransition, RefusedError
from corral.store import NewTask, SQLiteStore
from corral.store.migrations import LATEST
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock
from tests.store import either
from tests.store.old_schema import postgres_at
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema


store = either.store


def working(store: SQLiteStore | PostgresStore) -> str:
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref="t", goal="Move"), Actor.HUMAN)
        tx.insert_session(task.id, branch="corral/t")
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    return task.id


def test_a_change_from_the_one_expected_status_is_recorded_once_with_its_cause(store, clock) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    cause = RestingCause("crash", clock.now, Actor.SYSTEM)
    with store.write() as tx:
        change = tx.set_status(
            task_id, Status.INTERRUPTED, Actor.SYSTEM, "crashed", expected_from=Status.WORKING, resting_cause=cause
        )
    assert change is not None and (change.from_status, change.to_status) == (Status.WORKING, Status.INTERRUPTED)
    with store.read() as tx:
        assert tx.get_task(task_id).resting_cause == cause  # type: ignore[union-attr]
    with store.write() as tx:  # working is not resting: the cause goes
        tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "again", expected_from=Status.INTERRUPTED)
    with store.read() as tx:
        task = tx.get_task(task_id)
        changes = tx.status_changes(task_id)
    assert task is not None and task.status is Status.WORKING and task.resting_cause is None
    assert [(c.from_status, c.to_status, c.actor, c.reason) for c in changes[-2:]] == [
        (Status.WORKING, Status.INTERRUPTED, Actor.SYSTEM, "crashed"),
        (Status.INTERRUPTED, Status.WORKING, Actor.HUMAN, "again"),
    ]


def test_a_task_moved_meanwhile_is_refused_and_nothing_is_written(store) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.read() as tx:
        before = len(tx.status_changes(task_id))
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
    assert info.value.code == "status-changed"
    with pytest.raises(IllegalTransition), store.write() as tx:  # the rules, not the row, refuse this one
        tx.set_status(task_id, Status.BACKLOG, Actor.HUMAN, "back", expected_from=Status.WORKING)
    with store.read() as tx:
        assert tx.get_task(task_id).status is Status.WORKING  # type: ignore[union-attr]
        assert len(tx.status_changes(task_id)) == before


def test_park_moves_to_blocked_with_one_record(store) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.write() as tx:
        change = tx.park(task_id, Actor.SYSTEM, "done", expected_from=Status.WORKING)
    assert change is not None and change.to_status is Status.BLOCKED
    with store.read() as tx:
        assert tx.get_task(task_id).status is Status.BLOCKED  # type: ignore[union-attr]
        assert tx.status_changes(task_id)[-1].reason == "done"


def test_a_schema_5_postgres_store_gets_one_status_index_with_its_rows_kept(
    pg_server: str, pg_schema: str, clock: FakeClock
) -> None:
    with psycopg.connect(pg_server, autocommit=True) as conn, postgres_at(conn, pg_schema, 5):
        at = "2026-01-01T00:00:00Z"
        conn.execute(
            "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
            "VALUES ('t1', 'old', 'Kept', 'backlog', %s, %s, %s)",
            (at, at, at),
        )
    store = PostgresStore(pg_server, schema=pg_schema, clock=clock)
    try:
        assert store.schema_version() == LATEST == 8
        with store.read() as tx:
            kept = tx.get_task("t1")
            assert kept is not None and kept.ref == "old" and kept.status is Status.BACKLOG
        with psycopg.connect(pg_server) as conn:
            indexes = {
                r[0]: r[1]
                for r in conn.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'tasks'",
                    (pg_schema,),
                )
            }
        assert "tasks_status" not in indexes and "tasks_updated" not in indexes
        # schema 7 then makes it the two partial indexes (tests/store/test_status_indexes.py)
        assert "tasks_status_updated" not in indexes and "tasks_unfinished" in indexes
    finally:
        store.close()
