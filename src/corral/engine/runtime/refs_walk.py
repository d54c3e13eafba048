"""One walk of a repository's refs directories: the lock files, loose refs and special files there, and
which lock files are stale.

**Which lock files are stale.** git makes ``<name>.lock`` beside a file it is about to replace,
holds it while it writes (a ref update for milliseconds; ``packed-refs.lock`` for as long as
``pack-refs`` writes), and renames or removes it; a lock that stays after its git is gone makes
every later update of that ref fail. A lock that a git running *now* holds (corral's own in
another process, the person's) must not be removed: that git would then replace the ref
over a newer update. git's locks carry no owner, so the rule is by time and by use. A regular
file named ``*.lock`` under ``refs/`` (or ``packed-refs.lock``) is removed only when:

1. its inode last changed (``st_ctime``, which no ``utime`` can set back) before the turn
   ended (``turn_ended``): a lock made or touched after the agent's processes were gone is not
   the agent's, and is left ("in use"); and
2. no process has it open (``/proc/<pid>/fd``; ``pack-refs`` keeps ``packed-refs.lock`` open
   while it writes); and
3. it has not changed for ``grace`` seconds. git itself waits at most 100 ms for a ref's lock
   and 1 s for ``packed-refs.lock`` (``core.filesRefLockTimeout``, ``core.packedRefsTimeout``)
   before it calls one stale; a lock younger than ``grace`` is waited for (at most ``grace``)
   and looked at again. One that went meanwhile was a git's at work; one that changed is in use
   and left; one that is unchanged is removed — by the directory it was found in (no symbolic
   link is followed) and only when it is still the same inode.

Anything else named like a lock file — a directory, a FIFO, a socket, a symbolic link — is never
opened (a FIFO would block the reader) and never removed: it is reported for a person (git never
reads a ``*.lock``; it only fails to make one there).

Where a *ref* is expected, git does read: a FIFO, a socket or a device anywhere under ``refs/``
would block every git that lists refs (corral's own listing first), and a symbolic link under
corral's namespaces whose target is not ``refs/…`` is read through, to a file anywhere. These
are unlinked (never opened) before any git runs, and reported; they are the one thing removed
outside corral's namespaces, since no git makes them and every git stops at them.

The walk opens every directory with ``O_NOFOLLOW`` relative to its parent and opens nothing it finds;
what it removes it unlinks by the directory it was found in, and only while it is still the same inode.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from msgspec import Struct

from corral.domain.sanitize import sanitize_field
from corral.engine.runtime.stray_report import Found

#: corral's namespaces: a loose ref file is looked at only there (special files anywhere among the refs).
BRANCHES = "refs/heads/corral/"
OWN = "refs/corral/"
#: How long a lock file must stay unchanged before it is taken for stale (see the module's rule).
GRACE = 2.0
#: A lock whose inode changed this far after now is impossible for a git; never "in use".
CLOCK_SLACK = 300.0
#: How many directory entries the walk of the refs directories reads at most.
WALK_LIMIT = 500_000
_PROC = Path("/proc")


class Entry(Struct, frozen=True):
    """One name the walk found, with what identifies it (a later unlink acts only on that same inode)."""

    rel: str  # the path under the git directory, as git names it (refs/heads/corral/x.lock)
    mode: int
    ino: int
    dev: int
    ctime: float


def in_namespace(name: str) -> bool:
    """Whether ``name`` lies in corral's namespaces (:data:`BRANCHES`, :data:`OWN`)."""
    return name.startswith(BRANCHES) or name.startswith(OWN)


def walk(common: Path) -> tuple[list[Entry], list[Entry], bool]:
    """(lock files, loose ref files under corral's namespaces and special files anywhere among the refs,
    whether the walk was cut short).

    Directories are opened with ``O_NOFOLLOW`` relative to their parent: a symbolic link among
    the refs directories is never followed; nothing found is opened.
    """
    locks: list[Entry] = []
    loose: list[Entry] = []
    seen = 0
    try:
        st = os.lstat(common / "packed-refs.lock")
        locks.append(Entry("packed-refs.lock", st.st_mode, st.st_ino, st.st_dev, st.st_ctime))
    except OSError:
        pass
    try:
        top = os.open(common / "refs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return locks, loose, False
    stack: list[tuple[int, str]] = [(top, "refs")]
    cut = False
    while stack:
        fd, rel = stack.pop()
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    seen += 1
                    if seen > WALK_LIMIT:
                        cut = True
                        break
                    name = f"{rel}/{entry.name}"
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    found = Entry(name, st.st_mode, st.st_ino, st.st_dev, st.st_ctime)
                    if name.endswith(".lock"):
                        locks.append(found)  # a directory named so is reported, never entered
                    elif stat.S_ISDIR(st.st_mode):
                        try:
                            child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        except OSError:
                            continue
                        stack.append((child, name))
                    elif in_namespace(name) or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        loose.append(found)
        except OSError:
            pass
        finally:
            os.close(fd)
        if cut:
            for other, _ in stack:
                os.close(other)
            break
    return locks, loose, cut


def unlink_same(common: Path, entry: Entry) -> str | None:
    """Unlink ``entry`` by the directory it was found in, if it is still the same inode; None, or why not.

    Every directory on the way is opened with ``O_NOFOLLOW``: a symbolic link put in place of one
    since the walk is not followed.
    """
    parts = entry.rel.split("/")
    try:
        fd = os.open(common, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        for part in parts[:-1]:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != (entry.dev, entry.ino) or st.st_ctime != entry.ctime:
            return "it changed while corral looked: in use"
        os.unlink(parts[-1], dir_fd=fd)
        return None
    except FileNotFoundError:
        return ""  # gone by itself: nothing to do, nothing to report
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link stands where a directory was"
        return exc.strerror or str(exc)
    finally:
        os.close(fd)


def _open_by_processes(paths: Iterable[str]) -> dict[str, int]:
    """Which of ``paths`` some process has open (path → a pid), by ``/proc/<pid>/fd``; empty without /proc."""
    wanted = set(paths)
    held: dict[str, int] = {}
    if not wanted:
        return held
    try:
        pids = [p for p in os.listdir(_PROC) if p.isdigit()]
    except OSError:
        return held
    for pid in pids:
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue  # gone, or another user's
        for fd in names:
            try:
                target = os.readlink(f"{fds}/{fd}")
            except OSError:
                continue
            if target in wanted:
                held.setdefault(target, int(pid))
    return held


def hazard_of(common: Path, entry: Entry) -> str | None:
    """Why git must not meet ``entry`` (a loose ref's place) before it is gone; None when git may read it.

    A FIFO, a socket or a device among the refs blocks (or feeds) every git that lists refs; a
    symbolic link whose target is not ``refs/…`` is read *through* by git (a file anywhere).
    """
    if not (stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode)):
        return f"{_kind_of(entry.mode)} among the refs, which every git listing refs would read"
    if stat.S_ISLNK(entry.mode):
        try:
            target = os.readlink(common / entry.rel)
        except OSError:
            return None
        if not target.startswith("refs/"):
            return "a symbolic link out of the refs directory, which git would read through"
    return None


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def settle_locks(
    common: Path, locks: list[Entry], turn_ended: float, grace: float, now: Callable[[], float]
) -> tuple[list[Found], int]:
    """Apply the module's rule to each lock: (what was found, how many were removed)."""
    found: list[Found] = []
    removed = 0
    waiting: list[Entry] = []
    real = os.path.realpath(common)
    candidates: list[Entry] = []
    for lock in locks:
        if not stat.S_ISREG(lock.mode):
            why = f"{_kind_of(lock.mode)} where git makes a lock file: corral neither opens nor removes it"
            found.append(Found("lock", sanitize_field(lock.rel), None, False, why))
        elif turn_ended <= lock.ctime <= now() + CLOCK_SLACK:
            found.append(Found("lock", sanitize_field(lock.rel), None, False, "made after the turn: in use"))
        else:
            candidates.append(lock)
    held = _open_by_processes(os.path.join(real, c.rel) for c in candidates)
    for lock in candidates:
        pid = held.get(os.path.join(real, lock.rel))
        if pid is not None:
            found.append(Found("lock", sanitize_field(lock.rel), None, False, f"open by process {pid}: in use"))
        elif 0 <= now() - lock.ctime < grace:
            waiting.append(lock)
        else:
            removed += _remove_lock(common, lock, found)
    if waiting:
        time.sleep(max(0.0, min(grace, max(w.ctime + grace for w in waiting) - now())))
        for lock in waiting:
            removed += _remove_lock(common, lock, found)
    return found, removed


def _remove_lock(common: Path, lock: Entry, found: list[Found]) -> int:
    why = unlink_same(common, lock)
    if why == "":
        return 0  # its git finished meanwhile
    found.append(Found("lock", sanitize_field(lock.rel), None, why is None, why))
    return 1 if why is None else 0
