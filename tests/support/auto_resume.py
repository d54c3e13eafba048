"""What the real-harness seam tests share: a daemon of their own, and waiting for a task's state."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def until_auto_resumed(show: Callable[[], dict[str, Any]], timeout: float = 60) -> dict[str, Any]:
    """``show()`` (a task's ``show --json``) once the task rests ``blocked`` with three agent turns:
    the killed turn's error, and the auto-resumed turn's answer (the first turn's own counts too)."""
    deadline = time.monotonic() + timeout
    shown = show()
    while time.monotonic() < deadline:
        agent_turns = [t for t in shown["turns"] if t["role"] == "agent"]
        if shown["task"]["status"] == "blocked" and len(agent_turns) == 3:
            return shown
        time.sleep(0.5)
        shown = show()
    raise AssertionError(
        f"not auto-resumed: {shown['task']['status']} "
        f"{[(t['sequence'], t['role'], t['kind'], t['content'][:80]) for t in shown['turns']]}"
    )


def spawn_daemon(repo: Path, env: Mapping[str, str], tick: float = 0.5) -> subprocess.Popen[bytes]:
    """``corral daemon run`` as a process of its own, silent, ticking every ``tick`` s: the daemon of
    ``env``'s CORRAL_HOME, which serves ``repo`` with every other project kept there."""
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "daemon", "run", "--tick", str(tick)],
        cwd=repo, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def until_substate(show: Callable[[], dict[str, Any]], prefix: str, timeout: float = 30) -> dict[str, Any]:
    """``show()`` once the task's substate begins with ``prefix``."""
    deadline = time.monotonic() + timeout
    shown = show()
    while not str(shown["task"]["substate"]).startswith(prefix):
        assert time.monotonic() < deadline, shown["task"]
        time.sleep(0.2)
        shown = show()
    return shown
