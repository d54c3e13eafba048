"""A store that lost its rows is noticed: corral keeps outside the database what it last knew of it (its store
id and how many tasks were created in it), and refuses a database that comes back empty, truncated, from
another store or older than that, keeping the file; ``doctor`` says so; ``restore`` and ``store migrate``
put a database in place on purpose and the record follows them.

Through the real entry point, on a real SQLite file, damaged for real.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.cli.helpers import database
from tests.conftest import CLI, git


def record_of(db: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads(db.with_name("store-record.json").read_text())
    return doc


def store_doc(db: Path) -> dict[str, object]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (raw,) = conn.execute("SELECT doc FROM shared_docs WHERE name = 'corral.store'").fetchone()
    conn.close()
    doc: dict[str, object] = json.loads(raw)
    return doc


def error_of(result, code: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["error"]["code"] == code, doc
    error: dict[str, str] = doc["error"]
    return error


def database_check(corral) -> dict[str, str]:  # type: ignore[no-untyped-def]
    doc = corral("doctor", "--json")
    assert doc.returncode == 1 and "Traceback" not in doc.stderr
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "database"]
    assert check["status"] == "fail"
    return check  # type: ignore[no-any-return]


def test_the_record_follows_each_task_created_and_no_read(corral) -> None:
    corral.ok("create", "First", "--ref", "first")
    db = database(corral)
    record = record_of(db)
    assert record["tasks_created"] == 1 and record == {**store_doc(db), "database": str(db)}
    assert db.with_name("store-record.json").stat().st_mode & 0o777 == 0o600
    corral.ok("create", "Second", "--ref", "second")
    corral.ok("close", "second", "-m", "not needed")
    corral.ok("delete", "second", "--yes")  # a deleted task was still created: the count never goes down
    assert record_of(db)["tasks_created"] == 2
    before = db.with_name("store-record.json").stat().st_mtime_ns
    corral.ok("list", "--all")
    corral.ok("show", "first")
    assert db.with_name("store-record.json").stat().st_mtime_ns == before  # reads write nothing


def test_a_truncated_database_of_a_backlog_only_project_is_refused_not_recreated(corral) -> None:
    corral.ok("create", "Only in backlog", "--ref", "waiting")
    corral.ok("create", "Also in backlog", "--ref", "later")
    db = database(corral)
    for leftover in (db.with_name("corral.db-wal"), db.with_name("corral.db-shm")):
        leftover.unlink(missing_ok=True)
    db.write_bytes(b"")  # nothing else in the state directory says a task existed
    for args in (("list",), ("list", "--all"), ("create", "After"), ("prune",)):
        err = error_of(corral(*args, "--json"), "store-missing")
        assert str(db) in err["message"] and "empty (0 bytes)" in err["message"]
        assert "last knew 2 tasks created" in err["message"]
        assert "corral restore" in err["hint"]
    assert db.read_bytes() == b""  # kept as found, never re-created empty
    check = database_check(corral)
    assert check["message"].startswith("store-missing: ") and "last knew 2 tasks" in check["message"]
    # The hint's way out, typed as it reads, when the tasks are gone for good.
    rm = check["hint"].split("`")[-2]
    assert rm.startswith("rm '")
    Path(rm[4:-1]).unlink()
    assert corral.json("list", "--all")["tasks"] == []


def test_a_database_from_another_store_is_refused_and_moved_aside(corral, tmp_path: Path) -> None:
    corral.ok("create", "Mine", "--ref", "mine")
    db = database(corral)
    other_repo = tmp_path / "other"
    other_repo.mkdir()
    git(other_repo, "init", "-q", "-b", "main")
    git(other_repo, "commit", "-q", "--allow-empty", "-m", "other")
    other = CLI(other_repo)
    other.ok("create", "Theirs", "--ref", "theirs")
    other_db = database(other)
    other.ok("backup", "--to", str(tmp_path / "theirs.db"))
    for leftover in (db, db.with_name("corral.db-wal"), db.with_name("corral.db-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copy(tmp_path / "theirs.db", db)
    assert other_db != db

    err = error_of(corral("list", "--json"), "store-replaced")
    assert "not the store corral last knew here" in err["message"] and "another store's" in err["message"]
    kept = Path(err["message"].rsplit(" to ", 1)[1].rstrip("."))
    assert kept.parent == db.with_name("refused") and kept.is_file() and not db.exists()
    assert f"corral restore '{kept}'" in err["hint"]
    # Every command after it says the database is gone and where the refused one is; so does doctor.
    again = error_of(corral("list", "--json"), "store-missing")
    assert f"kept at {kept}" in again["message"]
    assert str(kept) in database_check(corral)["message"]
    # Meant after all: restoring it makes it the store corral knows here.
    corral.ok("restore", str(kept))
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["theirs"]
    assert record_of(db)["store_id"] == store_doc(db)["store_id"] == store_doc(other_db)["store_id"]


def test_an_older_copy_put_back_by_hand_is_refused_and_restore_takes_it(corral, tmp_path: Path) -> None:
    corral.ok("create", "First", "--ref", "first")
    made = Path(corral.json("backup")["backup"]["path"])
    corral.ok("create", "Second", "--ref", "second")
    db = database(corral)
    for leftover in (db.with_name("corral.db-wal"), db.with_name("corral.db-shm")):
        leftover.unlink(missing_ok=True)
    shutil.copy(made, db)  # by hand, not through corral restore
    err = error_of(corral("list", "--json"), "store-replaced")
    assert "holds 1 task created, an older copy or rows lost" in err["message"]
    assert "last knew here" in err["message"] and "2 tasks created" in err["message"]
    assert len(list(db.with_name("refused").glob("*.db"))) == 1
    # Through corral restore it is a choice: the record follows it, and new tasks count on from it.
    restored = corral.json("restore", str(made))["restored"]
    assert restored["kept"] is None
    assert record_of(db)["tasks_created"] == 1
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["first"]
    corral.ok("create", "Third", "--ref", "third")
    assert record_of(db)["tasks_created"] == 2 == store_doc(db)["tasks_created"]
