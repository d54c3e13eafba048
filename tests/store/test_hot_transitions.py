"""The usual status change is two writes and nothing else: the compare-and-set UPDATE and the status change's INSERT,
with a park's UPDATE stating that no violation is pending. Whatever that UPDATE does not match (a pending
violation, a task moved meanwhile, a finished task) takes the read path, which writes what it always wrote. Both
stores, the same answers; the statements are counted on SQLite, whose driver shows each one."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.domain.clock import rfc3339, stamp_text
from corral.domain.records import RestingCause
from corral.domain.status import Status
from corral.errors import RefusedError
from corral.store import NewTask, SQLiteStore
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock
from tests.store import either
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_schema = pg_support.pg_schema

store = either.store


def working(store: SQLiteStore | PostgresStore, ref: str = "t") -> str:
    with store.write() as tx:
        task = tx.insert_task(NewTask(ref=ref, goal="Move"), Actor.HUMAN)
        tx.insert_session(task.id, branch=f"corral/{ref}")
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
    return task.id


def history(store: SQLiteStore | PostgresStore, task_id: str) -> list[tuple[str | None, str, str, str | None]]:
    with store.read() as tx:
        return [
            (c.from_status and c.from_status.value, c.to_status.value, c.actor.value, c.reason)
            for c in tx.status_changes(task_id)
        ]


def test_a_park_expecting_working_with_a_pending_violation_is_conflict(store) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.write() as tx:
        tx.record_violations(task_id, ["migrations/001.sql"])
        change = tx.park(task_id, Actor.SYSTEM, "turn ended", expected_from=Status.WORKING)
    assert change is not None and (change.from_status, change.to_status) == (Status.WORKING, Status.CONFLICT)
    with store.read() as tx:
        assert tx.get_task(task_id).status is Status.CONFLICT  # type: ignore[union-attr]
    assert history(store, task_id)[-1] == ("working", "conflict", "system", "turn ended")
    assert len(history(store, task_id)) == 3  # created, started, parked: one record each


def test_a_pending_violation_of_an_earlier_session_does_not_make_a_park_conflict(store) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.write() as tx:
        tx.record_violations(task_id, ["old.sql"])
        tx.park(task_id, Actor.SYSTEM, expected_from=Status.WORKING)  # conflict
    with store.write() as tx:  # a new session: the old one's pending path is not this one's
        tx.insert_session(task_id, branch="corral/t")
        tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "again", expected_from=Status.CONFLICT)
    with store.write() as tx:
        change = tx.park(task_id, Actor.SYSTEM, "turn ended", expected_from=Status.WORKING)
    assert change is not None and change.to_status is Status.BLOCKED


def test_a_park_expecting_a_status_the_task_left_is_refused_and_writes_nothing(store) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.write() as tx:
        tx.park(task_id, Actor.SYSTEM, expected_from=Status.WORKING)
    before = history(store, task_id)
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.park(task_id, Actor.SYSTEM, "again", expected_from=Status.INTERRUPTED)
    assert info.value.code == "status-changed"
    with store.write() as tx:  # already blocked, as expected: nothing to do
        assert tx.park(task_id, Actor.SYSTEM, "again", expected_from=Status.BLOCKED) is None
    assert history(store, task_id) == before


def test_a_park_expecting_one_status_writes_its_cause_and_a_later_change_clears_it(store, clock) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    cause = RestingCause("usage_limit", clock.now, Actor.SYSTEM)
    with store.write() as tx:
        tx.park(task_id, Actor.SYSTEM, "limit", expected_from=Status.WORKING, resting_cause=cause)
    with store.read() as tx:
        assert tx.get_task(task_id).resting_cause == cause  # type: ignore[union-attr]
    with store.write() as tx:  # a resting status given no cause keeps it
        tx.set_status(task_id, Status.SUBMITTED, Actor.HUMAN, "sent", expected_from=Status.BLOCKED)
    with store.read() as tx:
        assert tx.get_task(task_id).resting_cause == cause  # type: ignore[union-attr]
    with store.write() as tx:
        tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "again", expected_from=Status.SUBMITTED)
    with store.read() as tx:
        assert tx.get_task(task_id).resting_cause is None  # type: ignore[union-attr]


def test_a_change_into_and_out_of_a_finished_status_moves_the_task_between_the_listings(store, clock) -> None:  # type: ignore[no-untyped-def]
    task_id = working(store)
    with store.write() as tx:
        tx.park(task_id, Actor.SYSTEM, expected_from=Status.WORKING)
    clock.advance(5)
    with store.write() as tx:
        change = tx.set_status(task_id, Status.ABANDONED, Actor.HUMAN, "not needed", expected_from=Status.BLOCKED)
    assert change is not None and change.at == clock.now
    with store.read() as tx:
        assert [t.id for t in tx.tasks([Status.ABANDONED])] == [task_id]
        assert [t.id for t in tx.recent_tasks([Status.ABANDONED, Status.COMPLETE], 5)] == [task_id]
        assert tx.tasks([Status.BLOCKED, Status.WORKING]) == []
    clock.advance(5)
    with store.write() as tx:
        tx.set_status(task_id, Status.BACKLOG, Actor.HUMAN, "reopened", expected_from=Status.ABANDONED)
    with store.read() as tx:
        assert [t.id for t in tx.tasks([Status.BACKLOG])] == [task_id]
        assert tx.recent_tasks([Status.ABANDONED, Status.COMPLETE], 5) == []
    assert history(store, task_id)[-2:] == [
        ("blocked", "abandoned", "human", "not needed"),
        ("abandoned", "backlog", "human", "reopened"),
    ]


def test_changes_of_two_tasks_interleaved_are_each_numbered_within_their_task(store) -> None:  # type: ignore[no-untyped-def]
    first, second = working(store, "a"), working(store, "b")
    for _ in range(3):
        for task_id in (first, second):
            with store.write() as tx:
                tx.park(task_id, Actor.SYSTEM, expected_from=Status.WORKING)
            with store.write() as tx:
                tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
    for task_id in (first, second):
        assert [h[:2] for h in history(store, task_id)] == [(None, "backlog"), ("backlog", "working")] + [
            ("working", "blocked"),
            ("blocked", "working"),
        ] * 3


def statements(db: sqlite3.Connection, texts: list[str] | None = None) -> list[str]:
    sent: list[str] = []

    def seen(sql: str) -> None:
        sent.append(" ".join(sql.split()[:2]).upper())
        if texts is not None:
            texts.append(sql)

    db.set_trace_callback(seen)
    return sent


def test_the_usual_park_and_unblock_send_two_writes_each_and_no_read(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "corral.db", clock=clock)
    try:
        task_id = working(store)
        texts: list[str] = []
        sent = statements(store._db, texts)
        with store.write() as tx:
            tx.park(task_id, Actor.SYSTEM, None, expected_from=Status.WORKING)
        with store.write() as tx:
            tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
        store._db.set_trace_callback(None)
        assert sent == ["BEGIN IMMEDIATE", "UPDATE TASKS", "INSERT INTO", "COMMIT"] * 2
        assert [h[:2] for h in history(store, task_id)[-2:]] == [("working", "blocked"), ("blocked", "working")]
        # Neither write fills a temporary table first (SQLite does for an INSERT that selects from its own table).
        for sql in texts[1:3] + texts[5:7]:
            program = [row[1] for row in store._db.execute("EXPLAIN " + sql)]
            assert "OpenEphemeral" not in program and "OpenAutoindex" not in program, sql
    finally:
        store.close()


def test_a_park_that_finds_a_pending_violation_reads_and_writes_conflict(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "corral.db", clock=clock)
    try:
        task_id = working(store)
        with store.write() as tx:
            tx.record_violations(task_id, ["secrets.env"])
        sent = statements(store._db)
        with store.write() as tx:
            change = tx.park(task_id, Actor.SYSTEM, None, expected_from=Status.WORKING)
        store._db.set_trace_callback(None)
        assert change is not None and change.to_status is Status.CONFLICT
        # the UPDATE that matched nothing, the read that finds the violation, then the change itself
        assert sent == ["BEGIN IMMEDIATE", "UPDATE TASKS", "SELECT T.STATUS,", "UPDATE TASKS", "INSERT INTO", "COMMIT"]
    finally:
        store.close()


def test_a_time_is_stored_as_rfc3339_writes_it() -> None:
    rng = random.Random(34)
    times = [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 0, 0, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 1, 1, 0, 0, 0, 0),  # naive: rfc3339 takes it as local time
    ]
    base = datetime(2026, 12, 6, 15, 43, 2, tzinfo=UTC)
    for _ in range(2000):  # runs of the same second, neighbouring seconds, a jump back, a month on
        base += timedelta(microseconds=rng.choice([1, 999_999, 1_000_000, -1_000_001, 30 * 86_400 * 10**6]))
        times.append(base)
    for value in times:
        assert stamp_text(value) == rfc3339(value), value
