"""A daemon whose state directory was removed (a scratch ``CORRAL_HOME`` deleted under it) is still
stopped by ``corral daemon stop``, and stops by itself at its next tick: nothing can reach it any more."""

from __future__ import annotations

import os
import select
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.adapters.process import pid_alive
from corral.engine import daemons
from tests.conftest import CLI


@pytest.fixture
def home_daemon(repo: Path, corral: CLI) -> Iterator[int]:
    doc = corral.json("daemon", "start")
    pid = doc["daemon"]["pid"]
    assert doc["daemon"]["running"] is True and isinstance(pid, int)
    yield pid
    if pid_alive(pid) and "daemon" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
        os.kill(pid, 9)


def gone_within(pid: int, seconds: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def test_daemon_stop_stops_a_daemon_whose_state_directory_was_removed(home_daemon: int, corral: CLI) -> None:
    shutil.rmtree(daemons.daemon_dir())
    stopped = corral.json("daemon", "stop")
    assert stopped["was_running"] is True  # it found the daemon without its state file
    assert stopped["daemon"]["running"] is False
    assert gone_within(home_daemon, 5)
    assert corral.json("daemon", "stop")["was_running"] is False  # and nothing else is taken for it


def test_a_daemon_whose_state_directory_was_removed_stops_by_itself(home_daemon: int) -> None:
    shutil.rmtree(daemons.daemon_dir())
    assert gone_within(home_daemon, 15)  # its next tick sees its lock file gone
