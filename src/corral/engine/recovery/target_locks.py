"""The per-target lock: accepts into one target serialize on :func:`target_lock`.

Recovery of a stranded accept takes the same lock first, so no accept works on a checkout a
dead one left half-updated. The lock is the accepting host's own (a file under the state
directory): on the shared store another host's accept is kept apart by the remote's
compare-and-swap instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from corral.adapters.locks import lock, try_lock
from corral.engine.project import Project
from corral.errors import TaskBusy


def target_lock_path(project: Project, target: str) -> Path:
    import hashlib  # imported by the few paths that lock a target: every reconcile loads this module

    digest = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return project.paths.root / "locks" / f"target-{digest}.lock"


@contextmanager
def target_lock(project: Project, target: str, *, timeout: float) -> Iterator[None]:
    """Exclusive use of ``target``'s merge and its checked-out worktree; TaskBusy after ``timeout``."""
    path = target_lock_path(project, target)
    fd = lock(path, timeout) if timeout > 0 else try_lock(path)
    if fd is None:
        raise TaskBusy(
            f"Another accept into {target} is still running.",
            hint="Wait for it to finish, then try again.",
        )
    try:
        yield
    finally:
        os.close(fd)
