"""A doorbell: a named pipe one process listens on and any other rings, to wake it at once.

The home daemon listens on one in its state directory. A launch rings it once the new supervisor is
registered, so the daemon watches that supervisor's exit (a pidfd) from its first moment, not from
its next look at the store a second later: a turn that dies in its first second is recorded at once,
not at the daemon's next tick. Ringing is one non-blocking open and a one-byte write: with nobody
listening (no daemon runs) the open fails at once and nothing waits.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NAME = "doorbell"


class Doorbell:
    """The listening end: ``fd`` turns readable when someone rings; :meth:`drain` before waiting again."""

    def __init__(self, path: Path, fd: int, keep: int) -> None:
        self.path = path
        self.fd = fd
        self._keep = keep  # a writer of our own: the pipe never reads as ended when a ringer closes

    def drain(self) -> None:
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        for fd in (self.fd, self._keep):
            try:
                os.close(fd)
            except OSError:
                pass


def listen(path: Path) -> Doorbell:
    """Make the named pipe at ``path`` (0600; whatever else stood there is replaced) and listen on it."""
    try:
        if not stat.S_ISFIFO(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        pass
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a named pipe", str(path))
        keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        os.close(fd)
        raise
    return Doorbell(path, fd, keep)


def ring(path: Path) -> bool:
    """Wake whoever listens at ``path``; False when nobody does (or the bell is not a named pipe)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # ENXIO: no listener; ENOENT: never made; ELOOP: not ours
        return False
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        os.write(fd, b"\n")
        return True
    except BlockingIOError:  # rung many times already and not yet drained: it wakes all the same
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
