"""Advisory file locks (flock), the one way: take one, or ask whether someone holds one.

The kernel drops an flock when its holder dies, so a killed process never leaves a lock
behind; a stale lock file is simply taken again.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from corral.adapters.files import private_dirs


def try_lock(path: Path) -> int | None:
    """The descriptor of ``path`` locked exclusively, or None when another process holds it.

    The caller keeps the descriptor open as long as it holds the lock and closes it to release.
    """
    private_dirs(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lock(path: Path, timeout: float, poll: float = 0.05) -> int | None:
    """Like :func:`try_lock`, trying again until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        fd = try_lock(path)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(poll)


def is_locked(path: Path) -> bool:
    """Whether some process holds ``path``'s lock (a missing file is not locked)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
