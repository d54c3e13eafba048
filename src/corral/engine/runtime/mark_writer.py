"""Who wrote a marker an agent's tool call left: this process, proved by its pid and start time.

Every marker (a wait, a progress line) is stamped with its writer's pid and start time
(``/proc/<pid>/stat`` field 22), so a reader that finds the writer gone (a SIGKILLed daemon)
or its pid held by another process believes none of it (:func:`writer_alive`). And
bookkeeping never breaks the call it observes: each piece runs through :func:`safely`, which
logs a failure and never raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.adapters.files import read_bounded
from corral.adapters.pid_identity import proc_info

#: The logger a failed piece of bookkeeping is reported to (the daemon's log, where it runs).
LOGGER = "corral.agent_marks"

#: The most a reader takes of a marker file.
MARKER_MAX_BYTES = 256 * 1024


_me: tuple[int, int | None] | None = None


def writer() -> tuple[int, int | None]:
    """This process's pid and start time (asked again after a fork)."""
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        info = proc_info(pid)
        _me = (pid, info.start if info is not None else None)
    return _me


def writer_alive(pid: object, start: object) -> bool:
    """Whether the process that wrote a marker still runs: its pid is live and, when the marker
    gave its start time, held by that very process (not one that took the pid since)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    info = proc_info(pid)
    if info is None:
        return False
    return not (isinstance(start, int) and not isinstance(start, bool) and info.start != start)


def safely(what: str, fn: Callable[[], Any]) -> Any:
    """Run one piece of bookkeeping; a failure is logged, never raised."""
    try:
        return fn()
    except Exception as exc:  # bookkeeping never breaks the call it observes
        import logging  # only a failure needs it: a read command never loads logging for this

        logging.getLogger(LOGGER).warning("agent-marks: could not %s: %s", what, exc)
        return None


def read_marker(path: Path, max_bytes: int = MARKER_MAX_BYTES) -> dict[str, Any] | None:
    """A marker file's JSON object, or None (missing, too large, not JSON): a reader never fails on one."""
    raw, _problem, _size = read_bounded(path, max_bytes)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
