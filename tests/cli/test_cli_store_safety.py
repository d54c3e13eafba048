"""A database that vanished is not a fresh start; faults read as what they are; backup and restore.

Through the real entry point: a real failed turn leaves a task directory, a worktree and a
diagnostic; then ``corral.db`` is truncated, deleted, byte-flipped or made immutable for real.
Every command is refused with a coded error naming the file and the cause, ``doctor`` reports
it without crashing, nothing is pruned, and ``corral restore`` brings the history back.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from corral.daemon.daemon_service import Daemon
from corral.engine.project import Project
from tests.cli.helpers import database, state_paths, to_working
from tests.cli.test_cli_accept import WORK
from tests.cli.test_cli_turns import fake_env
from tests.conftest import git


def no_traceback(result) -> None:  # type: ignore[no-untyped-def]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr


def error_of(result, code: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    no_traceback(result)
    doc = json.loads(result.stdout)
    assert doc["error"]["code"] == code, doc
    error: dict[str, str] = doc["error"]
    return error


#: An agent that is not logged in: a fatal failure, so the turn fails at once, never retried.
NOT_LOGGED_IN = [{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}]


def failed_turn(corral, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """A task whose real turn failed (its agent is not logged in): a task dir, a worktree, a diagnostic."""
    agent = corral.cwd.parent / "not-logged-in"
    agent.mkdir()
    for name, value in fake_env(agent, NOT_LOGGED_IN).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Keep my history", "--ref", "keep")
    started = corral("start", "keep", "--wait")
    assert started.returncode == 1 and "keep is blocked" in started.stdout  # the failure, recorded
    paths = {k: Path(v) for k, v in state_paths(corral).items()}
    assert any(paths["tasks"].iterdir()) and any(paths["worktrees"].iterdir())
    (diag_dir,) = list(paths["diagnostics"].iterdir())
    paths["diagnostic"] = next(diag_dir.iterdir())
    return paths


def evidence(paths: dict[str, Path]) -> list[str]:
    return sorted(str(p) for d in ("tasks", "worktrees", "diagnostics") for p in paths[d].rglob("*"))


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_vanished_database_is_refused_with_evidence_kept_and_nothing_pruned(
    corral, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    paths = failed_turn(corral, monkeypatch)
    db = paths["database"]
    before = evidence(paths)
    if damage == "truncated":
        db.write_bytes(b"")
    else:
        db.unlink()
    for args in (("list",), ("show", "keep"), ("create", "After"), ("prune",), ("backup",)):
        err = error_of(corral(*args, "--json"), "store-missing")
        assert (
            str(db) in err["message"] and ("empty (0 bytes)" if damage == "truncated" else "missing") in err["message"]
        )
        assert "1 task directories (tasks/)" in err["message"] and "1 worktrees (worktrees/)" in err["message"]
        assert "1 diagnostics directories (diagnostics/)" in err["message"]
        assert "Nothing was changed or pruned" in err["hint"] and "corral restore" in err["hint"]
        assert "No backup is in" in err["hint"]
        assert "aside" not in err["hint"]
    assert (db.read_bytes() == b"") if damage == "truncated" else not db.exists()
    doc = corral("doctor", "--json")
    no_traceback(doc)
    assert doc.returncode == 1
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "database"]
    assert check["status"] == "fail" and check["message"].startswith("store-missing: ")
    # the daemon's daily prune deletes nothing either
    proj = Project.open(corral.cwd)
    events: list[dict[str, object]] = []
    daemon = Daemon(on_event=events.append)
    daemon.prune_once(daemon.adopt(proj))
    assert [e["event"] for e in events] == ["prune-refused"] and events[0]["code"] == "store-missing"
    assert events[0]["project"] == str(proj.repo)
    proj.close()
    assert evidence(paths) == before and paths["diagnostic"].exists()
    assert (db.read_bytes() == b"") if damage == "truncated" else not db.exists()


def test_backup_then_loss_then_restore_brings_the_history_back(corral, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = failed_turn(corral, monkeypatch)
    db = paths["database"]
    made = Path(corral.json("backup")["backup"]["path"])
    assert made.parent == paths["state"] / "backups" and made.stat().st_mode & 0o777 == 0o600
    db.write_bytes(b"")
    err = error_of(corral("list", "--json"), "store-missing")
    assert f"corral restore '{made}'" in err["hint"]  # the newest backup, named
    restored = corral.json("restore", str(made))["restored"]
    assert restored["schema"] >= 1 and restored["kept"] is None  # an empty file holds nothing to keep
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["keep"]
    # a second restore keeps the database it replaces, first
    corral.ok("create", "Made after the backup", "--ref", "later")
    again = corral.json("restore", str(made))["restored"]
    kept = Path(again["kept"])
    assert kept.name.endswith("-before-restore.db") and kept.stat().st_mode & 0o777 == 0o600
    assert [t["ref"] for t in corral.json("list", "--all")["tasks"]] == ["keep"]
    back = corral.json("restore", str(kept))["restored"]
    assert back["kept"]
    assert sorted(t["ref"] for t in corral.json("list", "--all")["tasks"]) == ["keep", "later"]
    # a healthy store prunes again, and keeps what is not past its time
    pruned = corral.json("prune")["pruned"]
    assert pruned["diagnostics"]["orphaned_tasks"] == [] and paths["diagnostic"].exists()


def test_restore_refuses_a_file_that_is_not_a_corral_database_and_changes_nothing(corral, tmp_path: Path) -> None:
    corral.ok("create", "Stay", "--ref", "stay")
    db = database(corral)
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    err = error_of(corral("restore", str(text), "--json"), "store-corrupt")
    assert str(text) in err["message"] and "Nothing was changed" in err["hint"]
    itself = corral("restore", str(db), "--json")
    assert itself.returncode == 2 and "the database itself" in itself.stdout
    assert [t["ref"] for t in corral.json("list")["tasks"]] == ["stay"]
    assert not (db.parent / "backups").exists() or not any((db.parent / "backups").iterdir())


def test_restore_refuses_while_a_turn_works_or_a_daemon_runs_unless_forced(corral) -> None:
    corral.ok("create", "Busy", "--ref", "busy")
    made = corral.json("backup")["backup"]["path"]
    to_working(corral, "busy")
    err = error_of(corral("restore", made, "--json"), "turn-working")
    assert "busy" in err["message"] and "--force" in err["hint"]
    assert corral.json("show", "busy")["task"]["status"] == "working"
    forced = corral.json("restore", made, "--force")["restored"]
    assert forced["kept"] and corral.json("show", "busy")["task"]["status"] == "backlog"
    corral.ok("daemon", "start")  # the home's daemon, which serves this project: it holds its database open
    try:
        refused = corral("restore", made, "--json")
        assert json.loads(refused.stdout)["error"]["code"] == "daemon-running" and refused.returncode == 3
    finally:
        corral.ok("daemon", "stop")
    assert corral.json("restore", made)["restored"]  # stopped: nothing holds it


def test_flipped_database_bytes_are_store_corrupt_everywhere_and_doctor_reports_them(corral) -> None:
    corral.ok("create", "A goal worth keeping", "--ref", "flip")
    made = Path(corral.json("backup")["backup"]["path"])
    db = database(corral)
    raw = db.read_bytes()
    assert raw.count(b"A goal worth keeping") == 1
    flipped = raw.replace(b"A goal worth keeping", b"A goal \xff\xferth keeping")
    db.write_bytes(flipped)
    for args in (("list",), ("show", "flip")):
        err = error_of(corral(*args, "--json"), "store-corrupt")
        assert str(db) in err["message"] and "not UTF-8" in err["message"]
        assert "corral restore" in err["hint"] and ".recover" in err["hint"] and "Nothing was changed" in err["hint"]
    doc = corral("doctor", "--json")
    no_traceback(doc)
    assert doc.returncode == 1
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "database"]
    assert check["status"] == "fail" and "store-corrupt" in check["message"] and "not UTF-8" in check["message"]
    # the backup made before the damage comes back, and the damaged file is kept as it was
    assert corral("restore", str(made), "--json").returncode == 0
    kept = [p for p in (db.parent / "backups").iterdir() if p.name.endswith("-before-restore.db")]
    assert len(kept) == 1 and b"A goal \xff\xferth keeping" in kept[0].read_bytes()  # copied, damage and all
    assert [t["goal"] for t in corral.json("list")["tasks"]] == ["A goal worth keeping"]


def test_an_immutable_database_is_store_read_only_and_doctor_says_so(corral) -> None:
    corral.ok("create", "Frozen", "--ref", "frozen")
    db = database(corral)
    subprocess.run(["chattr", "+i", str(db)], check=True)
    try:
        err = error_of(corral("create", "Refused", "--json"), "store-read-only")
        assert str(db) in err["message"] and "immutable (chattr +i)" in err["message"]
        assert f"chattr -i '{db}'" in err["hint"]
        assert [t["ref"] for t in corral.json("list")["tasks"]] == ["frozen"]  # reads still work
        doc = corral("doctor", "--json")
        no_traceback(doc)
        assert doc.returncode == 1
        (check,) = [c for c in doc.json()["checks"] if c["name"] == "database"]
        assert check["status"] == "fail" and "store-read-only" in check["message"]
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    corral.ok("create", "Now it works", "--ref", "works")


def _worktree_removed_by_hand(corral, tmp_path: Path) -> tuple[dict[str, str], Path]:  # type: ignore[no-untyped-def]
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    wt = Path(corral.json("show", "feat", env=env)["task"]["worktree"])
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "commit the notes")
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    return env, wt


def test_doctor_reports_a_worktree_removed_by_hand_and_the_branch_that_keeps_its_commits(corral, tmp_path) -> None:
    env, wt = _worktree_removed_by_hand(corral, tmp_path)
    doc = corral("doctor", "--json", env=env)
    no_traceback(doc)
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "worktree"]
    assert check["status"] == "fail" and str(wt) in check["message"] and "worktree-missing" in check["message"]
    assert "corral/feat" in check["hint"] and "git log" in check["hint"]


def test_accept_of_a_worktree_removed_by_hand_is_a_coded_refusal(corral, tmp_path) -> None:
    env, wt = _worktree_removed_by_hand(corral, tmp_path)
    result = corral("accept", "feat", "--json", env=env)
    no_traceback(result)
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["event"] == "error" and last["error"]["code"] == "accept-refused"
    assert str(wt) in last["error"]["message"]


def test_a_database_deleted_under_a_running_daemon_stops_its_prune(corral, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's open connection still reads the deleted file: its health says so and nothing goes."""
    paths = failed_turn(corral, monkeypatch)
    proj = Project.open(corral.cwd)
    events: list[dict[str, object]] = []
    daemon = Daemon(on_event=events.append)
    slot = daemon.adopt(proj)
    with proj.store.read() as tx:
        assert [t.ref for t in tx.tasks()] == ["keep"]  # the daemon has it open
    before = evidence(paths)
    orphan = paths["diagnostics"] / "0123456789abcdef" / "gone.json"  # a deleted task's: pruned when healthy
    orphan.parent.mkdir()
    orphan.write_text("{}")
    db = paths["database"]
    for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        name.unlink(missing_ok=True)
    daemon.prune_once(slot)
    assert [e["event"] for e in events] == ["prune-refused"] and events[0]["code"] == "store-missing"
    assert "deleted or replaced after corral opened it" in str(events[0]["message"])
    assert orphan.exists() and set(before) <= set(evidence(paths))
    proj.close()


def _doctor_database(corral, env: dict[str, str]) -> dict[str, str]:  # type: ignore[no-untyped-def]
    doc = corral("doctor", "--json", env=env)
    no_traceback(doc)
    assert doc.returncode == 1
    (check,) = [c for c in doc.json()["checks"] if c["name"] == "database"]
    return check  # type: ignore[no-any-return]


def test_a_full_disk_and_a_read_only_mount_are_named_by_every_command_and_by_doctor(corral, tmp_path: Path) -> None:
    """CORRAL_HOME on a real 4 MiB tmpfs, filled to ENOSPC, then remounted read-only."""
    from tests.store.test_sqlite_faults import _fill, _remount, tmpfs

    with tmpfs(tmp_path / "home", "4M") as home:
        env = {"CORRAL_HOME": str(home)}
        corral.ok("create", "Before the disk filled", "--ref", "before", env=env)
        db = database(corral, env=env)
        filler = _fill(home)
        err = error_of(corral("create", "x" * 50_000, "--json", env=env), "store-disk-full")
        assert str(db) in err["message"] and "Free space" in err["hint"] and "aside" not in err["hint"]
        check = _doctor_database(corral, env)
        assert check["status"] == "fail" and check["message"].startswith("store-disk-full: ")
        filler.unlink()
        assert [t["ref"] for t in corral.json("list", env=env)["tasks"]] == ["before"]
        _remount(home, "ro")
        try:
            for args in (("list",), ("create", "Refused")):
                err = error_of(corral(*args, "--json", env=env), "store-read-only")
                assert str(db) in err["message"] and "mounted read-only" in err["message"]
                assert "read-write" in err["hint"] and "aside" not in err["hint"]
            check = _doctor_database(corral, env)
            assert check["status"] == "fail" and check["message"].startswith("store-read-only: ")
        finally:
            _remount(home, "rw")
        assert [t["ref"] for t in corral.json("list", env=env)["tasks"]] == ["before"]
