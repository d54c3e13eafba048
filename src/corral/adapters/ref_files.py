"""A repository's refs read from its files as git reads them, with no git process.

git keeps a ref in a loose file under ``refs/`` or as a line of ``packed-refs`` (the loose file
wins). Reading those files directly needs no git process: about a third of a ``for-each-ref``'s
time with a thousand loose refs. :func:`read_refs` gives up (None) wherever the files are not the
whole story — reftable, a symbolic link among the refs (a git-new-workdir) — and the caller asks
git instead.

A watch of what changed since the read (:class:`corral.adapters.ref_watch.RefWatch`, Linux's
inotify) is told each directory before it is listed (:class:`Watching`) and keeps what was read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol


def common_dir(worktree: Path) -> Path | None:
    """The repository's common git directory, read from the worktree's ``.git`` (no git process)."""
    dot = worktree / ".git"
    try:
        if dot.is_dir():
            return dot
        found = _pointed(dot)
        return found[1].resolve() if found is not None else None
    except OSError:
        return None


def git_dirs(worktree: Path) -> tuple[Path, Path] | None:
    """(the worktree's own git directory, the repository's common one) from its ``.git``, where that is a
    directory (both) or a regular ``gitdir:`` file; None for anything else, a symbolic link included."""
    dot = worktree / ".git"
    try:
        st = os.lstat(dot)
        if stat.S_ISDIR(st.st_mode):
            return dot, dot
        return _pointed(dot) if stat.S_ISREG(st.st_mode) else None
    except OSError:
        return None


def _pointed(dot: Path) -> tuple[Path, Path] | None:
    """A linked worktree's ``.git`` file read as git reads it: the directory its ``gitdir:`` line names, and the
    common one that directory's ``commondir`` names (itself without one); None for another content."""
    line = dot.read_text().strip()
    if not line.startswith("gitdir:"):
        return None
    own = Path(line.removeprefix("gitdir:").strip())
    own = own if own.is_absolute() else dot.parent / own
    common = (own / "commondir").read_text().strip() if (own / "commondir").is_file() else "."
    return own, (Path(common) if os.path.isabs(common) else own / common)


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


def reread(root: int, rel: str, loose: dict[str, str | None], skip: tuple[str, ...]) -> None:
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


def read_packed(common: Path, skip: tuple[str, ...]) -> dict[str, str]:
    try:
        packed = (common / "packed-refs").read_bytes()
    except FileNotFoundError:
        return {}
    return {
        ref: sha.decode().lower()
        for sha, raw in _PACKED.findall(packed)
        if not (ref := raw.decode(errors="surrogateescape")).startswith(skip)
    }


def combine(loose: Mapping[str, str | None], packed: Mapping[str, str]) -> dict[str, str]:
    """Loose refs shadow packed ones (a loose file without a value hides its packed namesake)."""
    refs = {ref: sha for ref, sha in packed.items() if ref not in loose}
    refs.update((ref, sha) for ref, sha in loose.items() if sha is not None)
    return refs


class Watching(Protocol):
    """What :func:`read_refs` tells of its read: each directory before it is listed, then what it read."""

    loose: dict[str, str | None]
    packed: dict[str, str]

    def add(self, rel: str) -> None: ...


def read_refs(
    common: Path | None, skip: tuple[str, ...], watch: Watching | None = None, *, under: str = "refs"
) -> dict[str, str] | None:
    """Every guarded ref's value, read from the repository's files as git reads them; None where they
    cannot be (no common directory, reftable, an unreadable file): then the caller asks git.

    The same refs as ``for-each-ref``: loose refs (read first, as git does, so a concurrent
    ``pack-refs`` hides none) shadow ``packed-refs``; symbolic refs, broken ones and names git
    would refuse (a lock file) are left out, and so are the namespaces in ``skip``. A symbolic link
    among them (a symbolic ref the old way, a linked directory) is left to git. No process, and
    each file opened beside its directory's descriptor: about a third of a ``for-each-ref``'s
    time with 1,000 loose refs. With ``watch``, each directory is watched before it is listed, and
    the watch keeps what was read (the check after the turn reads only what changed since).
    ``under`` limits the read to one namespace (``refs/heads``: the branches).
    """
    if common is None or (common / "reftable").exists() or (common / "packed-refs").is_symlink():
        return None  # refs not in files, or files git reaches through links (a git-new-workdir)
    loose: dict[str, str | None] = {}
    try:
        root = os.open(common, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        _walk(root, under, loose, skip, watch.add if watch is not None else None)
        packed = read_packed(common, skip)
        if under != "refs":
            packed = {ref: sha for ref, sha in packed.items() if ref.startswith(f"{under}/")}
    except OSError:
        return None
    finally:
        os.close(root)
    if watch is not None:
        watch.loose, watch.packed = loose, packed
    return combine(loose, packed)
