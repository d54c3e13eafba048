"""Files corral keeps its state in: the user's alone, written so a crash leaves the old one or the
new one, read so a symlink, a FIFO or a huge file never hurts.

Everything corral creates under its state directory and ``CORRAL_HOME`` is private: directories
:data:`PRIVATE_DIR_MODE`, files :data:`PRIVATE_FILE_MODE`, whatever the process's umask — made
here (:func:`private_dirs`, :func:`write_atomic`, :func:`create_once`, :func:`open_private` for a
log or a lock kept open). A write is a temp file beside the target (0600), written and fsynced,
renamed over the target, and the directory fsynced so the rename itself survives a power loss.
A read never follows a symlink, never blocks on a FIFO, and never loads more than its bound.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

#: The modes of what corral creates: the user's alone (its logs name the user's repositories and tasks).
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dirs(path: Path) -> None:
    """``path`` and its missing parents, each created 0700: what corral keeps is the user's alone."""
    missing = []
    here = path
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            pass


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """A descriptor on ``path`` (a log appended to, a lock), which is created 0600 in directories created 0700.

    An existing file wider than that — made by an older corral, or under a wide umask by a
    helper that did not come here — is narrowed to the user's bits when it is the user's own.
    A symlink is refused (``ELOOP``): nothing in the state directory points elsewhere.
    """
    private_dirs(path.parent)
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) & 0o077 and info.st_uid == os.getuid() and stat.S_ISREG(info.st_mode):
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o077)  # the owner's bits only
    except OSError:
        os.close(fd)
        raise
    return fd


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
    private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
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


def create_once(path: Path, payload: bytes) -> bytes:
    """What ``path`` holds, made with ``payload`` (0600, durable) by the first caller that finds it absent.

    Written whole to a temp file first and linked into place, so two callers at once agree on one
    content and no reader ever sees half of it.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another caller made it first: its content is the one
    else:
        fsync_dir(path.parent)
    finally:
        os.unlink(tmp)
    return path.read_bytes()


def entry_exists(path: str) -> bool:
    """Whether anything is at ``path`` (a dangling symlink counts): ``os.path.lexists`` without the
    exception a missing entry raises inside it, which costs more than the look-up. The reconciler
    and ``list`` ask it of every running turn's receipt and markers."""
    return os.access(path, os.F_OK, follow_symlinks=False)


def read_bounded(path: str | Path, max_bytes: int) -> tuple[bytes | None, str | None, int | None]:
    """(content, problem, size): the file's bytes, or why they cannot be used — ``missing``,
    ``symlink``, ``not-regular`` or ``too-large`` (then ``size`` says how large)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, "missing", None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "symlink", None
        return None, "missing" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else "not-regular", None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not-regular", None
        if info.st_size > max_bytes:
            return None, "too-large", info.st_size
        raw = os.read(fd, min(info.st_size, max_bytes) + 1)  # a file that grew is still caught
    except OSError:
        return None, "not-regular", None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        return None, "too-large", len(raw)
    return raw, None, len(raw)
