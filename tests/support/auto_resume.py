"""What the real-harness seam tests share about a turn auto-resumed by the daemon."""

from __future__ import annotations

import time
from collections.abc import Callable
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
