"""Writing a file so a crash leaves the old one or the new one, never half of either.

A temp file beside the target (0600), written and fsynced, renamed over the target, and
the directory fsynced so the rename itself survives a power loss.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, payload: bytes, *, durable: bool = True, mtime: float | None = None) -> None:
    """Replace ``path`` with ``payload``; with ``durable``, fsynced before and after the rename.

    ``mtime`` sets the file's modification time before it appears (retention measures it).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, payload)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)
