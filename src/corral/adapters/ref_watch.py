"""What changed among a repository's refs since they were read, without reading every ref again (Linux's inotify).

:class:`RefWatch` is made on the refs directories *before* they are read
(:func:`corral.adapters.ref_files.read_refs` adds each directory before listing it), so a
write after the read — by git or not, a file rewritten in place with its times put back, a
directory renamed — is an event; :meth:`RefWatch.now` then reads again only the paths the events
name. A queue that overflowed, or ``refs`` itself replaced, means "unknown" (None), and the
caller reads everything. Limits: a ref written through a hard link made outside ``refs/``, or
through a memory mapping kept after its file was closed, raises no event on these directories.
"""

from __future__ import annotations

import _thread
import errno
import os
import struct
import sys
from pathlib import Path
from typing import Any

from corral.adapters.ref_files import combine, read_packed, reread

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_Q_OVERFLOW, _IN_ISDIR, _IN_ONLYDIR, _IN_DONT_FOLLOW = 0x4000, 0x40000000, 0x01000000, 0x02000000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC  # as Linux defines them
#: What a directory's watch reports about its entries: any write, creation, removal or rename.
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE) | (
    _IN_ONLYDIR | _IN_DONT_FOLLOW
)
_EVENT = struct.Struct("iIII")
_libc: list[Any] = []  # [the C library with inotify, or None], once looked up


def _inotify() -> Any:
    if not _libc:
        lib = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # only here: ~3 ms to import, and only Linux has inotify

                lib = ctypes.CDLL(None, use_errno=True)
                lib.inotify_init1.argtypes = [ctypes.c_int]
                lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            except (ImportError, OSError, AttributeError):
                lib = None
        _libc.append(lib)
    return _libc[0]


class RefWatch:
    """inotify watches on the common directory and every refs directory the snapshot listed.

    Made before anything is read, so each write after the read (by git or not: a ref file
    rewritten in place, a directory renamed) is an event on its directory; the check then
    reads again only the paths the events name. Held by the process that took the snapshot;
    any other (the reconciler) reads every ref. An event queue that overflowed, or ``refs``
    itself replaced, means reading every ref too.
    """

    def __init__(self, lib: Any, fd: int, common: Path, skip: tuple[str, ...]) -> None:
        self.lib, self.fd, self.common, self.skip = lib, fd, common, skip
        self.dirs: dict[int, str] = {}  # watch descriptor → its directory ("" for the common directory)
        self.loose: dict[str, str | None] = {}
        self.packed: dict[str, str] = {}
        self.broken = False
        self.add("")

    @classmethod
    def start(cls, common: Path | None, skip: tuple[str, ...]) -> RefWatch | None:
        lib = _inotify() if common is not None else None
        if lib is None or common is None:
            return None
        fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None  # no instance left (fs.inotify.max_user_instances): every ref is read
        watch = cls(lib, fd, common, skip)
        if watch.broken:
            watch.close()
            return None
        return watch

    def add(self, rel: str) -> None:
        """Watch the directory ``rel`` (before it is listed). One gone meanwhile needs none: its
        parent's watch has the event. Out of watches (``fs.inotify.max_user_watches``): broken."""
        wd = self.lib.inotify_add_watch(self.fd, os.fsencode(self.common / rel if rel else self.common), _MASK)
        if wd >= 0:
            self.dirs[wd] = rel
        elif not rel or _errno() not in (errno.ENOENT, errno.ENOTDIR):
            self.broken = True

    def changes(self) -> tuple[set[str], bool] | None:
        """(the paths under ``refs/`` written since the watches were made, whether ``packed-refs`` was);
        None when that is unknown (the queue overflowed, ``refs`` itself was replaced)."""
        paths: set[str] = set()
        packed = False
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return paths, packed
            off = 0
            while off < len(buf):
                wd, mask, _cookie, size = _EVENT.unpack_from(buf, off)
                name = buf[off + 16 : off + 16 + size].rstrip(b"\0").decode(errors="surrogateescape")
                off += 16 + size
                if mask & _IN_Q_OVERFLOW:
                    return None
                rel = self.dirs.get(wd)
                if rel is None or not name:
                    continue  # a directory's own event (removed, moved): its parent's names it
                if rel:
                    paths.add(f"{rel}/{name}")
                elif name == "packed-refs":
                    packed = True
                elif name == "refs":
                    return None

    def now(self) -> dict[str, str] | None:
        """The refs now, by the snapshot's read and what changed since; None when it cannot tell."""
        try:
            found = self.changes()
            root = os.open(self.common, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        if found is None:
            os.close(root)
            return None
        paths, packed_changed = found
        loose = dict(self.loose)
        try:
            for rel in sorted(paths):  # a directory before what is under it
                reread(root, rel, loose, self.skip)
            packed = read_packed(self.common, self.skip) if packed_changed else self.packed
        except OSError:
            return None
        finally:
            os.close(root)
        return combine(loose, packed)

    def close(self) -> None:
        """Closed beside: the kernel waits out a grace period to close an inotify instance (~10 ms)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            _thread.start_new_thread(_close_quietly, (fd,))  # not threading's: it waits for the start


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()
