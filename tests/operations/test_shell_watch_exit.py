"""corral's shell waits on a real command to its exit, ends it at its limit or with its agent, and leaves no descriptor
open after the watch."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from corral.adapters.process import Started, SubprocessRunner
from corral.engine.operations import shell


def _start(tmp_path: Path, script: str) -> Started:
    return SubprocessRunner().start(["/bin/sh", "-c", script], cwd=tmp_path)


def test_a_real_command_that_exits_is_left_alone_with_its_code(tmp_path: Path) -> None:
    child = _start(tmp_path, "sleep 0.2; exit 3")
    assert shell.watch(child, lambda: True, 30) == (False, False)
    assert child.returncode == 3


def test_a_real_command_past_its_limit_is_ended(tmp_path: Path) -> None:
    child = _start(tmp_path, "exec sleep 60")
    assert shell.watch(child, lambda: True, 0.3) == (True, False)
    assert child.returncode == -signal.SIGKILL


def test_a_real_command_is_ended_when_its_agent_goes_while_it_runs(tmp_path: Path) -> None:
    child = _start(tmp_path, "exec sleep 60")
    gone_at = time.monotonic() + 0.3  # the agent is seen alive for a while, then gone
    assert shell.watch(child, lambda: time.monotonic() < gone_at, 30) == (False, True)
    assert child.returncode == -signal.SIGKILL


def test_no_descriptor_is_left_open_after_the_watch(tmp_path: Path) -> None:
    before = len(list(Path("/proc/self/fd").iterdir()))
    for _ in range(5):
        child = _start(tmp_path, "true")
        assert shell.watch(child, lambda: True, 30) == (False, False)
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()
        child.stderr.close()
    assert len(list(Path("/proc/self/fd").iterdir())) == before
