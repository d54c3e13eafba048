"""Every file corral creates is the user's alone: after a real turn (the fake agent, which commits),
its logs, ``failures``, ``doctor`` and the home daemon's start and stop — all run under umask 022 —
no file under ``CORRAL_HOME`` is readable or writable by group or others and no directory is
open to them; a worktree's checkout (the repository's own files, as git makes them) is inside a
0700 directory. ``doctor`` then finds nothing of corral's own to warn about.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from corral.testing.fake_agent import wrapper_script

SCENARIO = [
    {"init": True},
    {"text": "working"},
    {"write": {"path": "done.txt", "content": "done\n"}},
    {"commit": "The work"},
    {"result": "Done."},
]


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def wider(home: Path) -> list[str]:
    """Every entry under ``home`` that group or others may read, write or enter (worktree checkouts aside)."""
    found = []
    worktrees = {p for p in home.glob("projects/*/worktrees")}
    for root, dirs, files in os.walk(home):
        here = Path(root)
        if here in worktrees:
            dirs[:] = []  # each checkout is the repository's, as git writes it; the directory above is checked
        for name in [*dirs, *files]:
            path = here / name
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            if stat.S_IMODE(info.st_mode) & 0o077:
                found.append(f"{oct(stat.S_IMODE(info.st_mode))} {path.relative_to(home)}")
    return found


def test_nothing_corral_creates_is_open_to_group_or_others(corral, tmp_path, umask_022):
    home = Path(os.environ["CORRAL_HOME"])
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [SCENARIO]}))
    env = {
        "CORRAL_CLAUDE_BIN": str(wrapper_script(tmp_path / "bin")),
        "CORRAL_FAKE_SCENARIO": str(scenario),
        "CORRAL_FAKE_RECORD": str(tmp_path / "record"),
    }
    try:
        corral.ok("daemon", "start", env=env)
        corral.ok("create", "Private files", "--ref", "private", env=env)
        corral.ok("start", "private", "--wait", env=env, timeout=120)
        for args in (("logs", "private"), ("failures", "private"), ("show", "private"), ("diff", "private")):
            corral.ok(*args, env=env)
        doctor = corral("doctor", "--json", env=env, timeout=120)
    finally:
        subprocess.run([sys.executable, "-m", "corral", "daemon", "stop"], cwd=corral.cwd, capture_output=True)
    assert home.is_dir()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert wider(home) == []
    private = [c for c in doctor.json()["checks"] if c["name"] == "private"]
    assert [c["status"] for c in private] == ["ok"], private


def test_the_daemons_log_stays_private_when_it_rotates(tmp_path, umask_022):
    from corral.daemon.daemon_service import _logger
    from corral.engine import daemons

    home = tmp_path / "home"
    logger = _logger(home)
    try:
        for n in range(3_000):  # past maxBytes: rotated, a fresh log opened
            logger.info("line %d %s", n, "x" * 400)
        logs = sorted(daemons.daemon_dir(home).glob(daemons.log_file(home).name + "*"))
        assert len(logs) >= 2
        assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in logs} == {"0o600"}
    finally:
        for handler in list(logger.handlers):
            handler.close()
            logger.removeHandler(handler)


def test_an_existing_wider_log_of_corrals_own_is_narrowed_when_opened(tmp_path, umask_022):
    from corral.adapters.files import open_private

    log = tmp_path / "state" / "logs" / "supervisor.log"
    log.parent.mkdir(parents=True)
    log.write_text("an older corral's line\n")
    log.chmod(0o644)
    fd = open_private(log)
    os.write(fd, b"a new line\n")
    os.close(fd)
    assert oct(stat.S_IMODE(log.stat().st_mode)) == "0o600"
    assert log.read_text() == "an older corral's line\na new line\n"
    fresh = tmp_path / "fresh" / "deeper" / "daemon.out"
    os.close(open_private(fresh))
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (fresh, fresh.parent, fresh.parent.parent)] == [
        "0o600",
        "0o700",
        "0o700",
    ]
