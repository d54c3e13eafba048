"""The state directory is the user's alone: what corral creates is 0700/0600, and wider modes are found.

A real turn's own files (its turn directory, output and stderr logs, the filed receipt) are
created private; a store opened under the private umask is created 0600 with its -wal and
-shm (real SQLite); and :func:`private_mode_findings` names every directory and file of the
state that is wider — planted with real ``chmod`` — and leaves a worktree's contents alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.engine.paths import ProjectPaths
from corral.engine.private_state import (
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    make_private_dir,
    prepare_private_state,
    private_mode_findings,
    private_umask,
)
from corral.engine.runtime import protocol as proto
from corral.store import SQLiteStore
from tests.failures.conftest import new_task, run_start


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_turn_creates_its_directory_logs_and_receipt_private(fproj, agent):
    task = new_task(fproj)
    run_start(fproj, task)
    turn_dir = fproj.paths.turn_dir(task.id, 1)
    assert mode(fproj.paths.turns_dir(task.id)) == PRIVATE_DIR_MODE
    assert mode(turn_dir) == PRIVATE_DIR_MODE
    for name in ("output.log", "stderr.log", proto.RESPONSE):
        assert mode(turn_dir / name) == PRIVATE_FILE_MODE, name
    flagged = {f.path for f in private_mode_findings(fproj.paths)}
    assert not flagged & {turn_dir, turn_dir / "output.log", turn_dir / "stderr.log", turn_dir / proto.RESPONSE}


def test_a_store_opened_under_the_private_umask_is_0600_with_its_wal_and_shm(tmp_path: Path):
    before = os.umask(0o022)
    try:
        paths = ProjectPaths(repo=tmp_path / "repo", home=tmp_path / "home", root=tmp_path / "home" / "projects" / "x")
        with private_umask():
            prepare_private_state(paths)
            store = SQLiteStore(paths.db)
        assert os.umask(0o022) == 0o022  # the caller's umask is back
        store.close()  # the last connection closing removes the -wal and -shm...
        store = SQLiteStore(paths.db)  # ...and, opened again under umask 022, SQLite makes them anew
        db = paths.db
        files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
        assert all(p.exists() for p in files)
        assert [mode(p) for p in files] == [PRIVATE_FILE_MODE] * 3  # with the database's own mode
        for directory in (paths.home, paths.home / "projects", paths.root, paths.tasks, paths.logs):
            assert mode(directory) == PRIVATE_DIR_MODE, directory
        assert private_mode_findings(paths) == []
        store.close()
    finally:
        os.umask(before)


def test_private_mode_findings_name_every_wider_mode_and_skip_worktree_contents(tmp_path: Path):
    paths = ProjectPaths(repo=tmp_path / "repo", home=tmp_path / "home", root=tmp_path / "home" / "p")
    with private_umask():
        prepare_private_state(paths)
        make_private_dir(paths.turn_dir("t1", 1))
        make_private_dir(paths.worktree("t1") / "src")
        for path in (paths.db, paths.output_log("t1", 1), paths.worktree("t1") / "src" / "app.py"):
            path.write_text("x")
    assert private_mode_findings(paths) == []

    wal = paths.db.with_name("corral.db-wal")
    wal.write_text("")
    os.chmod(wal, 0o644)
    os.chmod(paths.root, 0o755)
    os.chmod(paths.db, 0o640)
    os.chmod(paths.turn_dir("t1", 1), 0o750)
    os.chmod(paths.output_log("t1", 1), 0o604)
    os.chmod(paths.worktrees, 0o755)
    os.chmod(paths.worktree("t1") / "src" / "app.py", 0o644)  # the agent's file: not corral's to judge
    found = {f.path: (f.mode, f.wanted) for f in private_mode_findings(paths)}
    assert found == {
        paths.root: (0o755, 0o700),
        paths.db: (0o640, 0o600),
        wal: (0o644, 0o600),
        paths.turn_dir("t1", 1): (0o750, 0o700),
        paths.output_log("t1", 1): (0o604, 0o600),
        paths.worktrees: (0o755, 0o700),
    }
    finding = next(f for f in private_mode_findings(paths) if f.path == paths.db)
    assert finding.fix == f"chmod 600 '{paths.db}'" and "0640" in finding.message
