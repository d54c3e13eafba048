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
from typing import Any

from corral.adapters.locks import lock, try_lock
from corral.engine.project import Project
from corral.errors import TaskBusy


def target_lock_path(project: Project, target: str) -> Path:
    digest = _sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return project.paths.root / "locks" / f"target-{digest}.lock"


def _sha256(data: bytes) -> Any:
    """SHA-256 of ``data``: the interpreter's own, where it has one apart (``_sha256``, ``_sha2``), so that an accept
    does not load OpenSSL (``hashlib``, ~2 ms) for one digest of a branch name; else hashlib's."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]  # Python 3.12 and later
        except ImportError:
            from hashlib import sha256
    return sha256(data)


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
