"""``corral store migrate``: a project's history from SQLite into PostgreSQL and back, without loss.

On a real PostgreSQL server (tests/support/postgres.py), with a history that has a parent and
child, sessions, turns with attempts and failure evidence naming diagnostics, violations both
decided and pending, notes, processes and many status changes.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import AttemptOutcome, FailureEvidence, FeedbackDelivery
from corral.domain.status import Status
from corral.domain.team import WorkerState
from corral.domain.violations import Decision
from corral.engine.project import Project
from corral.engine.shared_store.store_migrate import migrate
from corral.errors import CorralError, RefusedError, StoreMissing
from corral.store import NewTask, SQLiteStore, Store
from corral.store.dsn import schema_name
from corral.store.migrations import LATEST
from corral.store.postgres import PostgresStore
from tests.conftest import CLI, FakeClock
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database


def _history(store: Store, clock: FakeClock, diagnostics: Path) -> None:
    with store.write() as tx:
        parent = tx.insert_task(NewTask(ref="epic", goal="The epic", protected=("db/*.sql",)), Actor.HUMAN)
        child = tx.insert_task(
            NewTask(ref="fix-login", goal="Fix — ünïcode", prompt="do it", metadata={"k": [1, "x"]}), Actor.HUMAN
        )
        tx.update_task(child.id, parent_id=parent.id)
        session = tx.insert_session(child.id, worktree="/wt/fix-login", branch="corral/fix-login", base_commit="0" * 40)
        tx.set_status(child.id, Status.WORKING, Actor.HUMAN, "start")
    for i in range(3):
        clock.advance(1)
        evidence = FailureEvidence(
            source="harness",
            code="transient_network",
            phase="work",
            exit_code=1,
            details={"attempt": i},
            diagnostic=str(diagnostics / f"turn-{i}.log"),
        )
        with store.write() as tx:
            ask = tx.add_turn(
                child.id,
                role=Role.HUMAN,
                actor=Actor.HUMAN,
                kind="feedback",
                content=f"try {i}",
                session_id=session.id,
                feedback_delivery=FeedbackDelivery.PENDING,
                command_id=f"cmd-{i}",
            )
            turn = tx.add_turn(
                child.id,
                role=Role.AGENT,
                kind="work",
                content=f"answer {i}",
                session_id=session.id,
                usage={"input_tokens": 10 * i},
                failure=evidence,
                details={"diagnostics": str(diagnostics / f"turn-{i}")},
                command_id=f"cmd-{i}",
                started_at=clock(),
                ended_at=clock() + timedelta(seconds=5),
            )
            for n in (1, 2):
                tx.add_attempt(
                    turn.id,
                    number=n,
                    started_at=clock(),
                    ended_at=clock() + timedelta(seconds=n),
                    outcome=AttemptOutcome.FAILED if n == 1 else AttemptOutcome.SUCCEEDED,
                    failure_class="transient_network" if n == 1 else None,
                    failure=evidence if n == 1 else None,
                )
            tx.mark_feedback_consumed([ask.id])
    with store.write() as tx:
        tx.record_violations(child.id, ["db/a.sql", "db/b.sql", "db/c.sql"], check_from="abc")
        tx.decide_violations(child.id, {"db/a.sql": Decision.APPROVED, "db/b.sql": Decision.REVERTED}, Actor.HUMAN)
        tx.park(child.id, Actor.SYSTEM, "protected files changed")
        tx.add_comment(child.id, Actor.HUMAN, "a comment")
        tx.add_journal_entry(child.id, Actor.AGENT, "a journal entry")
        tx.add_journal_entry(child.id, Actor.BUILDER, "same instant, second")
        tx.register_process(child.id, "pair", 4242, "cmd-2")
        # A turn a worker on another host ran: its lease (a claimed epoch) and the worker's heartbeat.
        tx.beat_worker("w-1", host="build-2", pid=777, state=WorkerState.RUNNING, lease_seconds=30.0)
        tx.queue_turn(child.id, "cmd-2", {"kind": "unblock", "body": "b", "target": "main"})
        assert tx.claim_turn(child.id, "cmd-2", "w-1", "build-2") is not None
        # What it shipped for reviewers on other hosts: a file's bytes (a NUL and invalid UTF-8 too), its live status.
        tx.ship(child.id, "tasks/x/turns/2/output.log", 0, b'{"type":"init"}\n\x00\xff')
        tx.set_live(child.id, "cmd-2", {"phase": "running", "pid": 41})
        tx.put_doc("usage-limits", {"claude:1": {"resets_at": "2026-01-01T01:00:00.000000Z"}})
        tx.update_session(session.id, harness_session_id="h-1", auto_resumed=True, consecutive_interruptions=2)


def _everything(store: Store) -> dict[str, Any]:
    """Every record through the Store API, in the order it reads them."""
    with store.read() as tx:
        tasks = tx.tasks()
        return {
            "tasks": tasks,
            "refs": tx.refs(),
            "per_task": {
                t.id: (
                    tx.status_changes(t.id),
                    tx.sessions(t.id),
                    tx.turns(t.id),
                    tx.violations(t.id),
                    tx.comments(t.id),
                    tx.journal(t.id),
                    tx.processes(t.id),
                    tx.children(t.id),
                    tx.current_command(t.id),
                )
                for t in tasks
            },
            "since": tx.changes_since(datetime(2000, 1, 1, tzinfo=UTC)),
        }


@pytest.fixture
def pg_project(repo: Path, clock: FakeClock, pg_database: str, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.delenv("CORRAL_DATABASE_URL", raising=False)
    project = Project.open(repo, clock=clock)
    _history(project.store, clock, project.paths.diagnostics)
    project.close()
    monkeypatch.setenv("CORRAL_DATABASE_URL", pg_database)
    return Project.open(repo, clock=clock)


def test_to_postgres_and_back_loses_nothing(pg_project: Project, clock: FakeClock, pg_database: str) -> None:
    project = pg_project
    sqlite_before = SQLiteStore(project.paths.db, create=False)
    try:
        original = _everything(sqlite_before)
    finally:
        sqlite_before.close()

    done = migrate(project, "postgres")
    assert done.copied.counts == {
        "tasks": 2,
        "sessions": 1,
        "turns": 6,
        "attempts": 6,
        "status_changes": 4,
        "violations": 3,
        "notes": 3,
        "processes": 1,
        "workers": 1,
        "leases": 1,
        "shipped_files": 1,
        "live_turns": 1,
        "shared_docs": 2,  # the usage-limits doc, and the store's own id and count (store/sqlite_record.py)
    }
    assert len(done.copied.checksum) == 64
    assert "(schema corral_" in done.destination

    # The project now opens PostgreSQL, in the schema named from its identity: every clone's.
    store = project.store
    assert isinstance(store, PostgresStore)
    assert project.identity is not None
    assert store.schema == schema_name(project.identity.key) == project.pg_schema
    assert _everything(store) == original
    with store.read() as tx:
        child = tx.task_by_ref("fix-login")
        assert child is not None
        assert tx.pending_paths(child.id) == ["db/c.sql"]
        turns = tx.turns(child.id)
        assert turns[-1].failure is not None and turns[-1].failure.diagnostic == str(
            project.paths.diagnostics / "turn-2.log"
        )
        assert turns[-1].details == {"diagnostics": str(project.paths.diagnostics / "turn-2")}

    # New records continue after the copied ones (identities followed), in order.
    clock.advance(10)
    with store.write() as tx:
        tx.add_comment(child.id, Actor.HUMAN, "written in PostgreSQL")
        tx.set_status(child.id, Status.WORKING, Actor.HUMAN, "resume")
        tx.insert_session(child.id, worktree="/wt/2")
        tx.park(child.id, Actor.SYSTEM, "parked again")
    in_pg = _everything(store)
    assert [c.reason for c in in_pg["per_task"][child.id][0]][-2:] == ["resume", "parked again"]
    project.close()

    back = migrate(project, "sqlite")
    assert back.copied.counts["status_changes"] == 6 and back.copied.counts["notes"] == 4
    assert back.copied.counts["sessions"] == 2
    assert back.kept is not None and Path(back.kept).is_file()  # the SQLite file it replaced, kept
    kept = SQLiteStore(back.kept, create=False)
    try:
        assert _everything(kept) == original
    finally:
        kept.close()
    returned = SQLiteStore(project.paths.db, create=False)
    try:
        assert _everything(returned) == in_pg
    finally:
        returned.close()
    assert back.copied.checksum != done.copied.checksum


def test_the_checksum_is_the_same_on_both_sides(pg_project: Project) -> None:
    from corral.store.copy import read_all, summary

    done = migrate(pg_project, "postgres")
    lite = SQLiteStore(pg_project.paths.db, create=False)
    try:
        with lite.read() as a, pg_project.store.read() as b:
            assert isinstance(b, type(b))
            assert summary(read_all(a)) == summary(read_all(b)) == done.copied  # type: ignore[arg-type]
    finally:
        lite.close()


def test_a_schema_that_holds_records_is_refused_unless_replace(pg_project: Project) -> None:
    migrate(pg_project, "postgres")
    with pytest.raises(RefusedError) as info:
        migrate(pg_project, "postgres")
    assert info.value.code == "store-not-empty"
    assert "--replace" in (info.value.hint or "")
    again = migrate(pg_project, "postgres", replace=True)
    assert again.copied.counts["tasks"] == 2
    with pg_project.store.read() as tx:
        assert sorted(tx.refs()) == ["epic", "fix-login"]


def test_a_mismatched_copy_is_rolled_back(pg_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    from corral.store import copy

    real = copy.write_all

    def lossy(tx: Any, rows: Any) -> None:
        rows = dict(rows)
        rows["notes"] = rows["notes"][:-1]  # a lost row: the verification must catch it
        real(tx, rows)

    monkeypatch.setattr(copy, "write_all", lossy)
    with pytest.raises(CorralError) as info:
        migrate(pg_project, "postgres")
    assert info.value.code == "store-copy-mismatch"
    assert "notes" in info.value.message
    monkeypatch.setattr(copy, "write_all", real)
    with pg_project.store.read() as tx:
        assert tx.tasks() == []  # nothing was written


def test_a_working_turn_refuses_the_migration(
    pg_project: Project, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CORRAL_DATABASE_URL")
    plain = Project.open(pg_project.repo, clock=clock)
    with plain.store.write() as tx:
        child = tx.task_by_ref("fix-login")
        assert child is not None
        tx.set_status(child.id, Status.WORKING, Actor.HUMAN, "again")
    plain.close()
    with pytest.raises(RefusedError) as info:
        migrate(pg_project, "postgres")
    assert info.value.code == "turn-working"
    assert migrate(pg_project, "postgres", force=True).copied.counts["tasks"] == 2


def test_the_cli_migrates_and_config_show_masks_the_password(
    repo: Path, corral: CLI, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    corral.ok("create", "Fix the login", "--ref", "fix-login")
    # A password in the URL (the test server trusts loopback, so any password is accepted).
    url = pg_database.replace("postgresql://corral@", "postgresql://corral:s3cret-pw@")
    env = {"CORRAL_DATABASE_URL": url}
    shown = corral("config", "show", env=env)
    assert "s3cret-pw" not in shown.stdout + shown.stderr
    assert "postgresql://corral:****@" in shown.stdout
    as_json = corral.json("config", "show", env=env)
    assert as_json["settings"]["database_url"]["value"].startswith("postgresql://corral:****@")

    done = corral.json("store", "migrate", "--to", "postgres", env=env)
    assert done["migrated"]["counts"]["tasks"] == 1
    assert "s3cret-pw" not in json.dumps(done)
    listed = corral.json("list", env=env)
    assert "fix-login" in json.dumps(listed)
    doctor = corral("doctor", "--json", env=env)
    checks = {c["name"]: c for c in doctor.json()["checks"]} if "checks" in doctor.json() else None
    assert checks is not None and checks["database"]["status"] == "ok"
    assert "PostgreSQL" in checks["database"]["message"] and f"schema version {LATEST}" in checks["database"]["message"]
    assert "s3cret-pw" not in doctor.stdout + doctor.stderr


def test_database_url_in_corral_toml_is_ignored(repo: Path, corral: CLI, pg_database: str) -> None:
    (repo / "corral.toml").write_text(f'database_url = "{pg_database}"\n')
    corral.ok("create", "Fix the login", "--ref", "fix-login")
    shown = corral.json("config", "show")
    assert shown["settings"]["database_url"]["value"] is None
    assert any("database_url" in item for item in shown["ignored"])
    # The task went to this project's SQLite file, not to the server the repository named.
    state = corral.json("paths")
    db = Path(json.dumps(state).split('"database": "')[1].split('"')[0])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT ref FROM tasks").fetchall() == [("fix-login",)]


def test_an_unreachable_database_url_is_a_clear_error(corral: CLI) -> None:
    from tests.support.postgres import free_port

    result = corral("list", env={"CORRAL_DATABASE_URL": f"postgresql://me:pw@127.0.0.1:{free_port()}/x"})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "store-unreachable" in result.stderr or "cannot be reached" in result.stderr
    assert ":pw@" not in result.stderr


def test_choosing_postgres_over_an_sqlite_history_is_refused_until_it_is_migrated(pg_project: Project) -> None:
    with pytest.raises(StoreMissing) as info:
        pg_project.store  # noqa: B018  (opening it is the test)
    assert "holds 2 task(s)" in info.value.message
    assert "corral store migrate --to postgres" in (info.value.hint or "")
    migrate(pg_project, "postgres")
    with pg_project.store.read() as tx:
        assert sorted(tx.refs()) == ["epic", "fix-login"]


def test_a_new_project_on_postgres_starts_its_schema(
    repo: Path, clock: FakeClock, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_DATABASE_URL", pg_database)
    project = Project.open(repo, clock=clock)
    try:
        with project.store.write() as tx:
            tx.insert_task(NewTask(ref="first", goal="g"), Actor.HUMAN)
        assert not project.paths.db.exists()  # nothing went to SQLite
        assert isinstance(project.store, PostgresStore)
    finally:
        project.close()


def test_config_get_and_set_mask_the_password_too(corral: CLI, pg_database: str) -> None:
    url = pg_database.replace("postgresql://corral@", "postgresql://corral:s3cret-pw@")
    done = corral.ok("config", "set", "database_url", url)
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert "postgresql://corral:****@" in done.stdout + done.stderr
    got = corral.ok("config", "get", "database_url")
    assert got.stdout.strip() == url.replace("s3cret-pw", "****")
    # The value itself is kept as written (the user's file is theirs), and it is used.
    corral.ok("create", "Fix the login", "--ref", "fix-login")
    assert "fix-login" in json.dumps(corral.json("list"))


def test_doctor_names_an_unreachable_server_as_a_failed_check(corral: CLI) -> None:
    from tests.support.postgres import free_port

    url = f"postgresql://me:pw@127.0.0.1:{free_port()}/x"
    result = corral("doctor", "--json", env={"CORRAL_DATABASE_URL": url})
    assert "Traceback" not in result.stderr
    database = next(c for c in result.json()["checks"] if c["name"] == "database")
    assert database["status"] == "fail"
    assert database["message"].startswith("store-unreachable:")
    assert ":pw@" not in database["message"] and "database_url" in database["hint"]
