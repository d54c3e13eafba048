"""``corral store migrate`` puts a database in place on purpose, so what corral knows of the SQLite store
follows it: back from PostgreSQL, the file that arrives is the store known here, even one whose history
began on PostgreSQL and so carries no store id of its own (tests/cli/test_cli_lost_rows.py has the rest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.engine.project import Project
from tests.conftest import CLI
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database


def record_of(db: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads(db.with_name("store-record.json").read_text())
    return doc


@pytest.mark.parametrize("began_on_postgres", [False, True])
def test_migrating_back_to_sqlite_updates_the_record(
    repo: Path, corral: CLI, pg_database: str, monkeypatch: pytest.MonkeyPatch, began_on_postgres: bool
) -> None:
    corral.ok("create", "Before", "--ref", "before")
    db = Path(corral.json("paths")["paths"]["database"])
    first = record_of(db)
    assert first["tasks_created"] == 1
    env = {"CORRAL_DATABASE_URL": pg_database}
    corral.json("store", "migrate", "--to", "postgres", env=env)
    corral.ok("create", "On the server", "--ref", "server", env=env)
    corral.ok("create", "Also there", "--ref", "there", env=env)
    if began_on_postgres:  # a team store made on the server has no store id of SQLite's
        monkeypatch.setenv("CORRAL_DATABASE_URL", pg_database)
        project = Project.open(repo)
        try:
            with project.store.write() as tx:
                tx.execute("DELETE FROM shared_docs WHERE name = ?", ("corral.store",))
        finally:
            project.close()
        monkeypatch.delenv("CORRAL_DATABASE_URL")
    corral.json("store", "migrate", "--to", "sqlite", env=env)
    listed = corral("list", "--all", "--json")  # no database_url: SQLite again
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert [t["ref"] for t in listed.json()["tasks"]] == ["before", "server", "there"]
    after = record_of(db)
    if began_on_postgres:
        assert after["store_id"] != first["store_id"] and after["tasks_created"] == 3
    else:
        assert after == first  # the same store, its count carried (tasks made on the server count from here)
    corral.ok("create", "Back home", "--ref", "home")
    assert record_of(db)["tasks_created"] == int(after["tasks_created"]) + 1  # type: ignore[call-overload]
