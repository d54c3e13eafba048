"""What only an agent's tool call can tell, and how it is cleared: the subtasks it waits on, and the
line it says it is at.

Three pieces of bookkeeping, written by the process that serves the agent's tool calls (the
daemon's MCP endpoint) and read by every surface through ``liveness.live_facts`` and the one
substate derivation (``domain/substate``): wait markers (``runtime/wait_markers``), persisted wait
intervals (``runtime/wait_intervals``) and the progress line (``runtime/progress_line``), each
stamped with the process that wrote it (``runtime/mark_writer``).

This module removes the markers: :func:`clear` at a turn's teardown and :func:`clear_owned` at a
clean daemon stop. Neither ever raises into what it cleans up after.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from corral.engine.project import Project
from corral.engine.runtime import marked
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.mark_writer import read_marker, safely
from corral.engine.runtime.wait_markers import WAITING, update_marker


def clear(protocol_dir: Path) -> None:
    """A turn's teardown: its waits and its progress line go (never raises)."""

    def remove() -> None:
        proto.remove(protocol_dir, WAITING, proto.PROGRESS)
        marked.forget(protocol_dir)  # after the markers: an entry is never missing beside one

    safely("clear the turn's markers", remove)


def clear_owned(project: Project, pid: int) -> None:
    """A clean stop of the process ``pid`` (the daemon): remove every marker it wrote (never raises)."""

    def drop(waits: list[dict[str, Any]], recent: list[dict[str, Any]]) -> None:
        waits[:] = [w for w in waits if w.get("pid") != pid]
        recent[:] = [e for e in recent if e.get("pid") != pid]

    def sweep() -> None:
        try:
            entries = list(os.scandir(project.paths.tasks))
        except FileNotFoundError:
            return
        for entry in entries:
            safely("clear a stopped writer's markers", functools.partial(_clear_one, entry.name))

    def _clear_one(task_id: str) -> None:
        protocol_dir = project.paths.protocol_dir(task_id)
        if (protocol_dir / WAITING).exists():
            update_marker(protocol_dir, drop)
        found = read_marker(protocol_dir / proto.PROGRESS)
        if found is not None and found.get("pid") == pid:
            proto.remove(protocol_dir, proto.PROGRESS)

    safely("clear the markers a stopped process wrote", sweep)
