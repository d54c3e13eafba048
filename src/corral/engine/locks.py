"""Per-task lifecycle locks: an flock on a file in the task's state directory.

The kernel drops an flock when its holder dies, so a killed CLI never leaves a
task locked; the file records the holder's pid and command for messages.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from corral.engine.project import Project
from corral.errors import TaskBusy


@contextmanager
def task_lock(project: Project, task_id: str, *, what: str = "corral", timeout: float = 10.0) -> Iterator[None]:
    path = project.paths.task_dir(task_id) / "lifecycle.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    raise TaskBusy(
                        f"Another corral command holds this task ({holder}).",
                        hint="Wait for it to finish, then try again.",
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "what": what}).encode(), 0)
        yield
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {data.get('pid')}, {data.get('what')}"
    except (OSError, ValueError):
        return "unknown holder"
