"""Reading a running turn's supervisor from outside: its ``status.json`` and whether it lives."""

from __future__ import annotations

import json
import os
from typing import Any

from corral.domain.records import Task
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.engine.project import Project

MAX_PID = 2**22  # Linux's pid_max ceiling; anything larger is not a process


def pid_alive(pid: int) -> bool:
    if pid <= 0 or pid > MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); /proc tells the truth on Linux.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def read_json(path: os.PathLike[str] | str) -> dict[str, Any] | None:
    """A protocol file's object, or None when it is missing or not (yet) valid JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def live_facts(project: Project, task: Task) -> Live | None:
    if task.status is not Status.WORKING:
        return None
    status = read_json(project.paths.protocol_dir(task.id) / "status.json")
    if status is None:
        return Live(alive=False)
    pid = status.get("pid")
    alive = isinstance(pid, int) and pid_alive(pid)
    raw_retry = status.get("retry")
    retry: dict[str, Any] = raw_retry if isinstance(raw_retry, dict) else {}
    return Live(
        alive=alive,
        phase=status.get("phase"),
        kind=status.get("kind"),
        retry_attempt=retry.get("attempt"),
        retry_class=retry.get("failure_class"),
        retry_reason=retry.get("reason"),
    )
