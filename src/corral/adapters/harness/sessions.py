"""A harness session's files on this host, and a copy carried from another host put where its resume looks.

A harness keeps each session's transcript in a directory of its own — Claude Code's
``projects``, Codex's ``sessions``, Pi's ``sessions`` — under a name its resume looks for
(docs/harnesses.md#sessions-across-hosts). Each adapter names a session's files there
(:class:`SessionFiles`: the directory, this session's place in it, and its files by names that
are the same on every host) and says which carried names are the session's own and how a file
must be rewritten for this host (``Harness.carried``). :func:`install` writes the carried copy:
regular files only, 0600, each under the session's place in the harness's own directory and
nowhere else, whatever a carried name says — no absolute name, no ``..``, and no symlink
followed below that directory (a name that meets one fails; nothing is written through it).
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from msgspec import Struct

from corral.domain.refs import is_plain_id

#: Bytes of one carried name: a harness's names are short; a long one is not its own.
NAME_MAX = 1024


class SessionFiles(Struct, frozen=True):
    """One harness session's files on this host.

    ``root`` is the harness's own session directory: a carried file is written under it and nowhere
    else. ``place`` is where this session's files lie under ``root`` for a turn run in the given
    worktree (keyed by the worktree where the harness keys it). ``names`` are those files as paths
    relative to ``place``, POSIX-style: what travels, the same on every host.
    """

    root: Path
    place: Path
    names: tuple[str, ...] = ()


def plain_id(session_id: str) -> bool:
    """Whether ``session_id`` (a UUID, for all three harnesses) is a token a file name may be made of."""
    return is_plain_id(session_id)


def safe_name(name: str) -> bool:
    """A relative POSIX path of plain components: no absolute path, no ``.`` or ``..``, no empty part."""
    if not name or len(name) > NAME_MAX or "\\" in name or "\0" in name or name.startswith("/"):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def regular_files(top: Path, base: Path) -> Iterator[str]:
    """Every regular file under ``top`` (a symlinked file or directory is neither read nor followed),
    as a path relative to ``base``."""
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            return
    except OSError:
        return
    for dirpath, dirnames, filenames in os.walk(top):  # os.walk never follows a symlinked directory
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if is_regular(path):
                yield path.relative_to(base).as_posix()


def is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def install(files: SessionFiles, carried: Mapping[str, bytes]) -> list[Path]:
    """Write each carried file at its name under ``files.place``; the paths written.

    Each goes to a temporary file beside its target (0600, created, never opened through a link)
    and is renamed over it, so a resume never reads half a transcript. A missing directory below
    ``files.root`` is made 0700; one that is a symlink, or a name that is not :func:`safe_name`,
    fails with ``ValueError`` or ``OSError`` — before anything is written for that name.
    """
    place = files.place.relative_to(files.root).as_posix()  # ValueError: a place outside the root
    prefix = [] if place == "." else place.split("/")
    if not all(safe_name(p) for p in prefix):
        raise ValueError(f"the session's place {files.place} is not under {files.root}")
    for name in carried:
        if not safe_name(name):
            raise ValueError(f"{name!r} is not a name under the session's directory")
    os.makedirs(files.root, mode=0o700, exist_ok=True)
    written = []
    for name, data in carried.items():
        parts = [*prefix, *name.split("/")]
        _write_below(files.root, parts, data)
        written.append(files.root.joinpath(*parts))
    return written


def _write_below(root: Path, parts: list[str], data: bytes) -> None:
    # The root is the user's own directory (it may be a link they made); below it, every component
    # is opened with O_NOFOLLOW, so nothing a link points at is ever written.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
        name = parts[-1]
        tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            os.fsync(out)
        finally:
            os.close(out)
        try:
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # a link at the name is replaced, not followed
        except OSError:
            os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
