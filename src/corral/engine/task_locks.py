"""Per-task lifecycle locks: an flock on a file in the task's state directory.

The kernel drops an flock when its holder dies, so a killed CLI never leaves a task
locked; the file records the holder's pid and command for messages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

from corral.adapters.locks import lock
from corral.engine.project import Project
from corral.errors import TaskBusy


@contextmanager
def task_lock(project: Project, task_id: str, *, what: str = "corral", timeout: float = 10.0) -> Iterator[None]:
    path = project.paths.lifecycle_lock(task_id)
    fd = lock(path, timeout)
    if fd is None:
        raise TaskBusy(
            f"Another corral command holds this task ({_holder(path)}).",
            hint="Wait for it to finish, then try again.",
        )
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "what": what}).encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(path: os.PathLike[str]) -> str:
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(4096) or b"{}")
        return f"pid {data.get('pid')}, {data.get('what')}"
    except (OSError, ValueError):
        return "unknown holder"
