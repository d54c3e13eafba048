"""A repository's refs read from its files as git reads them, and a watch that tells which changed.

git keeps a ref in a loose file under ``refs/`` or as a line of ``packed-refs`` (the loose file
wins). Reading those files directly needs no git process: about a third of a ``for-each-ref``'s
time with a thousand loose refs. :func:`read_refs` gives up (None) wherever the files are not the
whole story — reftable, a symbolic link among the refs (a git-new-workdir) — and the caller asks
git instead.

:class:`RefWatch` (Linux's inotify) is made on the refs directories *before* they are read, so a
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
import re
import stat
import struct
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def common_dir(worktree: Path) -> Path | None:
    """The repository's common git directory, read from the worktree's ``.git`` (no git process)."""
    dot = worktree / ".git"
    try:
        if dot.is_dir():
            return dot
        line = dot.read_text().strip()
        if not line.startswith("gitdir:"):
            return None
        own = Path(line.removeprefix("gitdir:").strip())
        own = own if own.is_absolute() else worktree / own
        common = (own / "commondir").read_text().strip() if (own / "commondir").is_file() else "."
        found = Path(common) if os.path.isabs(common) else own / common
        return found.resolve()
    except OSError:
        return None


_BAD_COMPONENT = re.compile(r"^\.|\.\.|[\x00-\x20\x7f~^:?*\[\\]|@\{|\.lock$|\.$")
_HEX = b"0123456789abcdefABCDEF"
#: A line of ``packed-refs`` naming a ref (not its header, not a peeled ``^`` line).
_PACKED = re.compile(rb"^([0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?) (refs/[^\r\n]+)", re.MULTILINE)


def _oid(data: bytes) -> str | None:
    """The object name a loose ref file holds, as git parses it (hex from its start, then the end or
    a space); None if it holds none (a symbolic ref's ``ref: …``, garbage)."""
    token = data.split(None, 1)[0] if data[:1].strip() else b""
    return token.decode().lower() if len(token) in (40, 64) and not token.translate(None, _HEX) else None


def _read_loose(dir_fd: int, name: str) -> str | None:
    """The value of one loose ref file (None: not an object name, as a symbolic ref's ``ref: …``)."""
    f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        return _oid(os.read(f, 128))
    finally:
        os.close(f)


def _walk(
    root: int, top: str, loose: dict[str, str | None], skip: tuple[str, ...], watch: Callable[[str], None] | None
) -> None:
    """Every loose ref under the directory ``top`` (relative to the common directory ``root``) into ``loose``.

    ``watch`` is told each directory before it is listed. A directory or file that goes away
    meanwhile is simply not there; the exempt namespaces are not even listed.
    """
    stack = [top]
    while stack:
        rel = stack.pop()
        if watch is not None:
            watch(rel)
        try:
            fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            with os.scandir(fd) as entries:
                for e in entries:
                    name = e.name
                    if _BAD_COMPONENT.search(name):  # a lock file, a name git refuses
                        continue
                    ref = f"{rel}/{name}"
                    if e.is_dir(follow_symlinks=False):
                        if not f"{ref}/".startswith(skip):
                            stack.append(ref)
                    elif e.is_symlink():  # a symbolic ref the old way, or a linked directory: git's to read
                        raise OSError(errno.ELOOP, "a symbolic link among the refs", ref)
                    elif not e.is_file(follow_symlinks=False):
                        loose[ref] = None  # no ref at all (it hides a packed one, as git's broken ref does)
                    else:
                        try:
                            loose[ref] = _read_loose(fd, name)
                        except FileNotFoundError:
                            pass  # deleted meanwhile
        finally:
            os.close(fd)


def _reread(root: int, rel: str, loose: dict[str, str | None], skip: tuple[str, ...]) -> None:
    """``loose`` brought up to date for the path ``rel``: whatever it held at or under it, read again."""
    under = f"{rel}/"
    for ref in [r for r in loose if r.startswith(under)]:
        del loose[ref]
    loose.pop(rel, None)
    if any(_BAD_COMPONENT.search(c) for c in rel.split("/")):
        return
    try:
        st = os.lstat(rel, dir_fd=root)
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISDIR(st.st_mode):
        if not under.startswith(skip):
            _walk(root, rel, loose, skip, None)
    elif rel.startswith(skip):
        return
    elif stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "a symbolic link among the refs", rel)
    elif not stat.S_ISREG(st.st_mode):
        loose[rel] = None
    else:
        head, _, name = rel.rpartition("/")
        try:
            fd = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            loose[rel] = _read_loose(fd, name)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)


def _read_packed(common: Path, skip: tuple[str, ...]) -> dict[str, str]:
    try:
        packed = (common / "packed-refs").read_bytes()
    except FileNotFoundError:
        return {}
    return {
        ref: sha.decode().lower()
        for sha, raw in _PACKED.findall(packed)
        if not (ref := raw.decode(errors="surrogateescape")).startswith(skip)
    }


def _combine(loose: Mapping[str, str | None], packed: Mapping[str, str]) -> dict[str, str]:
    """Loose refs shadow packed ones (a loose file without a value hides its packed namesake)."""
    refs = {ref: sha for ref, sha in packed.items() if ref not in loose}
    refs.update((ref, sha) for ref, sha in loose.items() if sha is not None)
    return refs


def read_refs(common: Path | None, skip: tuple[str, ...], watch: RefWatch | None = None) -> dict[str, str] | None:
    """Every guarded ref's value, read from the repository's files as git reads them; None where they
    cannot be (no common directory, reftable, an unreadable file): then the caller asks git.

    The same refs as ``for-each-ref``: loose refs (read first, as git does, so a concurrent
    ``pack-refs`` hides none) shadow ``packed-refs``; symbolic refs, broken ones and names git
    would refuse (a lock file) are left out, and so are the namespaces in ``skip``. A symbolic link
    among them (a symbolic ref the old way, a linked directory) is left to git. No process, and
    each file opened beside its directory's descriptor: about a third of a ``for-each-ref``'s
    time with 1,000 loose refs. With ``watch``, each directory is watched before it is listed, and
    the watch keeps what was read (the check after the turn reads only what changed since).
    """
    if common is None or (common / "reftable").exists() or (common / "packed-refs").is_symlink():
        return None  # refs not in files, or files git reaches through links (a git-new-workdir)
    loose: dict[str, str | None] = {}
    try:
        root = os.open(common, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        _walk(root, "refs", loose, skip, watch.add if watch is not None else None)
        packed = _read_packed(common, skip)
    except OSError:
        return None
    finally:
        os.close(root)
    if watch is not None:
        watch.loose, watch.packed = loose, packed
    return _combine(loose, packed)


# -- what changed, without reading every ref again (Linux's inotify) -----------------------------

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
                _reread(root, rel, loose, self.skip)
            packed = _read_packed(self.common, self.skip) if packed_changed else self.packed
        except OSError:
            return None
        finally:
            os.close(root)
        return _combine(loose, packed)

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
