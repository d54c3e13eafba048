"""Stray refs: after a turn, lock files, symbolic refs and refs under corral's namespaces that corral did not make.

An agent that can write in the repository's refs directories can leave behind what makes
corral's later git steps fail or lie: a ``refs/heads/corral/<ref>.lock`` (every update of that
branch then fails: "File exists"), a ``packed-refs.lock`` (every deletion of a packed ref
fails), a task's branch turned into a symbolic ref (``ref: refs/heads/main``: a step that
follows it acts on ``main``), or thousands of refs under ``refs/heads/corral/``. :func:`sweep`
removes them after the turn and says what it removed and what it left.

**Which refs are corral's.** Only names under corral's namespaces are ever looked at:
``refs/heads/corral/`` and ``refs/corral/``. There, a ref is corral's when its name is one corral
makes for a task in the store (:data:`ONE_PER_TASK`, :data:`MANY_PER_TASK`): the task's branch
``refs/heads/corral/<ref>``, ``refs/corral/archive/<ref>`` (workspace), ``refs/corral/verified/<ref>``
(the last verified tip), ``refs/corral/wip/<ref>`` and ``refs/corral/remote-wip/<ref>`` (remote),
and everything under ``refs/corral/kept/<ref>/`` (ref guard, read-only turns) and
``refs/corral/stale/<ref>/`` (remote). A new namespace corral makes refs in must be added to
those tables, or the sweep removes its refs (tests/runtime/test_stray_refs.py reads the source for
``refs/corral/<name>/`` and fails on a name missing here). Any other name there is removed; so is
a symbolic ref at any name there, corral's own names included (corral never makes one), and a
loose ref file git cannot read (a dangling symbolic ref, garbage, a name git refuses). Names
outside corral's namespaces are never touched: ``refs/remotes/origin/HEAD`` is a symbolic ref a
clone makes, and the person's branches are theirs.

The list of tasks is read *after* the refs are listed (``known_task_refs`` may be a callable,
called then): a task's row is written before its branch is made, so a branch that a concurrent
``start`` makes while the sweep runs is never taken for a stray.

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

**How refs are removed.** One ``git for-each-ref`` over the two namespaces, with ``%00``
separators and ``%(symref)`` (names are taken byte for byte, whatever bytes they hold), then one
``git update-ref --no-deref -z --stdin`` transaction of ``delete <name> <value>`` lines: a
symbolic ref is deleted itself, never followed to the ref it names, and each deletion is a
compare-and-swap against the value listed. Hooks and fsmonitor are off for it. When git refuses
the transaction, the refs are listed again: one gone meanwhile (another sweep) is dropped, one
moved since it was listed or whose lock is in use is left and reported, and the rest is tried
again. 3,000 refs cost two git processes, not 3,000. A loose file git does not list
(unreadable) is unlinked by the directory it was found in, if still the same inode.

Not swept: the per-worktree git directories (``worktrees/<name>/``: a worktree's ``HEAD.lock``,
``index.lock`` and its own ``refs/``), and what sits under a task's own ``refs/corral/kept/<ref>/``
or ``refs/corral/stale/<ref>/`` (their names are open-ended; an agent kept out of ``refs/corral/``
by the sandbox cannot write there). A sweep after one task's turn also removes what another
task's running agent left meanwhile; a lock that agent holds now is younger than this turn's end,
and left.

**What to do with the report.** Store it (``StrayReport.to_json``) with the turn; ``summary``
is the line ``show`` gives. ``task_refs`` names the refs at corral's own names that were removed
(a task's branch that was a symbolic ref or unreadable): the caller puts each back from the
last verified tip (``refs/corral/verified/<ref>``).

A task's branch itself is deleted by :func:`corral.adapters.branches.delete_task_branch`.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from corral.adapters.branches import first_error
from corral.adapters.git import UNTRUSTED_WORKTREE_ARGS, Git
from corral.adapters.ref_files import common_dir
from corral.domain.record import record
from corral.domain.refs import is_ref
from corral.domain.sanitize import sanitize_field
from corral.errors import GitError

BRANCHES = "refs/heads/corral/"
OWN = "refs/corral/"
#: ``refs/corral/<name>/<task ref>``: one ref per task.
ONE_PER_TASK = frozenset({"archive", "verified", "wip", "remote-wip"})
#: ``refs/corral/<name>/<task ref>/…``: any number per task.
MANY_PER_TASK = frozenset({"kept", "stale"})
#: Every git corral runs on refs an agent could have written: no hooks, no fsmonitor.
QUIET = UNTRUSTED_WORKTREE_ARGS  # what git in a task's worktree gets: no hooks, no fsmonitor
#: How long a lock file must stay unchanged before it is taken for stale (see the module's rule).
GRACE = 2.0
#: A lock whose inode changed this far after now is impossible for a git; never "in use".
CLOCK_SLACK = 300.0
#: How many entries a report lists (its counts are whole).
ITEMS_KEPT = 20
#: How many directory entries the walk of the refs directories reads at most.
WALK_LIMIT = 500_000
#: How many times a refused transaction is tried again without the refs git named.
RETRIES = 3
_FORMAT = "--format=%(refname)%00%(objectname)%00%(symref)"
_PROC = Path("/proc")


@record
class Found:
    """One stray: a lock file, a ref, a symbolic ref or an unreadable ref file, and what became of it."""

    kind: str  # "lock" | "ref" | "symref" | "broken"
    name: str  # the ref's name, or the lock's path in the git directory; escaped for display
    value: str | None  # a ref's object, a symbolic ref's target; None for a lock or an unreadable file
    removed: bool
    why: str | None = None  # why it was left

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "value": self.value, "removed": self.removed, "why": self.why}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Found:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(text("kind") or "?", text("name") or "?", text("value"), data.get("removed") is True, text("why"))


@record
class StrayReport:
    """What :func:`sweep` found: counts of what it removed and left, the first few of each, and any error."""

    locks: int = 0  # lock files removed
    refs: int = 0  # refs removed (plain refs corral did not make)
    symrefs: int = 0  # symbolic refs removed
    broken: int = 0  # unreadable loose ref files removed
    left: int = 0  # strays found and left (each with a why)
    items: tuple[Found, ...] = ()  # the first ITEMS_KEPT: what was left first, then what was removed
    task_refs: tuple[str, ...] = ()  # refs at corral's own names that were removed: put them back
    error: str | None = None  # why the sweep could not finish

    @property
    def removed(self) -> int:
        return self.locks + self.refs + self.symrefs + self.broken

    @property
    def clean(self) -> bool:
        return not (self.removed or self.left or self.error)

    def to_json(self) -> dict[str, Any]:
        return {
            "locks": self.locks,
            "refs": self.refs,
            "symrefs": self.symrefs,
            "broken": self.broken,
            "left": self.left,
            "items": [i.to_json() for i in self.items],
            "task_refs": list(self.task_refs),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StrayReport:
        def count(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

        items = data.get("items")
        task_refs = data.get("task_refs")
        error = data.get("error")
        return cls(
            count("locks"),
            count("refs"),
            count("symrefs"),
            count("broken"),
            count("left"),
            tuple(Found.from_json(i) for i in items if isinstance(i, dict)) if isinstance(items, list) else (),
            tuple(r for r in task_refs if isinstance(r, str)) if isinstance(task_refs, list) else (),
            error if isinstance(error, str) else None,
        )


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def summary(report: StrayReport | Mapping[str, Any]) -> str | None:
    """The one line ``show`` gives a turn after which strays were found; None when there were none."""
    r = report if isinstance(report, StrayReport) else StrayReport.from_json(report)
    if r.clean:
        return None
    parts = [
        _plural(r.refs, "ref", "refs") if r.refs else "",
        _plural(r.symrefs, "symbolic ref", "symbolic refs") if r.symrefs else "",
        _plural(r.broken, "unreadable ref file", "unreadable ref files") if r.broken else "",
        _plural(r.locks, "lock file", "lock files") if r.locks else "",
    ]
    said = [p for p in parts if p]
    line = ""
    if said:
        names = [i.name for i in r.items if i.removed][:3]
        more = f", {names[0]}" + (" …" if r.removed > 1 else "") if names else ""
        line = f"corral removed {', '.join(said)} left in the repository's refs (not corral's{more})."
    left = [i for i in r.items if not i.removed]
    if r.left:
        first = f": {left[0].name} ({left[0].why})" if left else ""
        line += f" {_plural(r.left, 'stray was', 'strays were')} left{first}."
    if r.error:
        line += f" The sweep stopped: {r.error}."
    return line.strip()


# -- finding: one walk of the refs directories --------------------------------------------------


@record
class _Entry:
    rel: str  # the path under the git directory, as git names it (refs/heads/corral/x.lock)
    mode: int
    ino: int
    dev: int
    ctime: float


def _in_namespace(name: str) -> bool:
    return name.startswith(BRANCHES) or name.startswith(OWN)


def _walk(common: Path) -> tuple[list[_Entry], list[_Entry], bool]:
    """(lock files, loose ref files under corral's namespaces and special files anywhere among the refs,
    whether the walk was cut short).

    Directories are opened with ``O_NOFOLLOW`` relative to their parent: a symbolic link among
    the refs directories is never followed; nothing found is opened.
    """
    locks: list[_Entry] = []
    loose: list[_Entry] = []
    seen = 0
    try:
        st = os.lstat(common / "packed-refs.lock")
        locks.append(_Entry("packed-refs.lock", st.st_mode, st.st_ino, st.st_dev, st.st_ctime))
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
                    found = _Entry(name, st.st_mode, st.st_ino, st.st_dev, st.st_ctime)
                    if name.endswith(".lock"):
                        locks.append(found)  # a directory named so is reported, never entered
                    elif stat.S_ISDIR(st.st_mode):
                        try:
                            child = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        except OSError:
                            continue
                        stack.append((child, name))
                    elif _in_namespace(name) or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
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


def _unlink_same(common: Path, entry: _Entry) -> str | None:
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


def _hazard(common: Path, entry: _Entry) -> str | None:
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


def _settle_locks(
    common: Path, locks: list[_Entry], turn_ended: float, grace: float, now: Callable[[], float]
) -> tuple[list[Found], int]:
    """Apply the module's rule to each lock: (what was found, how many were removed)."""
    found: list[Found] = []
    removed = 0
    waiting: list[_Entry] = []
    real = os.path.realpath(common)
    candidates: list[_Entry] = []
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


def _remove_lock(common: Path, lock: _Entry, found: list[Found]) -> int:
    why = _unlink_same(common, lock)
    if why == "":
        return 0  # its git finished meanwhile
    found.append(Found("lock", sanitize_field(lock.rel), None, why is None, why))
    return 1 if why is None else 0


# -- refs ------------------------------------------------------------------------------------


def _list(git: Git, repo: Path) -> dict[str, tuple[str, str]]:
    """name → (object, symref target) of every ref git lists under corral's namespaces."""
    out = git.run("for-each-ref", _FORMAT, BRANCHES.rstrip("/"), OWN.rstrip("/"), cwd=repo).stdout
    refs: dict[str, tuple[str, str]] = {}
    for line in out.split("\n"):
        name, _, rest = line.partition("\0")
        oid, _, symref = rest.partition("\0")
        if _in_namespace(name):
            refs[name] = (oid, symref)
    return refs


def is_ours(name: str, task_refs: frozenset[str]) -> bool:
    """Whether ``name`` is a ref corral makes for one of ``task_refs`` (its value and kind aside)."""
    if name.startswith(BRANCHES):
        return name.removeprefix(BRANCHES) in task_refs
    if not name.startswith(OWN):
        return False
    space, _, rest = name.removeprefix(OWN).partition("/")
    if space in ONE_PER_TASK:
        return rest in task_refs
    if space in MANY_PER_TASK:
        ref, sep, tail = rest.partition("/")
        return ref in task_refs and bool(sep and tail)
    return False


def _delete(git: Git, repo: Path, doomed: dict[str, str]) -> tuple[set[str], set[str], dict[str, str], str | None]:
    """Delete ``doomed`` (name → the value listed) in one transaction.

    Returns (deleted, gone meanwhile, refused name → why, error). When git refuses the
    transaction, the refs are listed again: a name gone meanwhile (another sweep, corral's own
    deletion) is dropped, one moved since is left ("moved since it was listed"), one git named
    (its lock in use) is left with git's words, and the rest is tried again.
    """
    refused: dict[str, str] = {}
    gone: set[str] = set()
    todo = dict(doomed)
    for _ in range(RETRIES + 1):
        if not todo:
            return set(), gone, refused, None
        lines = "".join(f"delete {name}\0{oid}\0" for name, oid in todo.items())
        done = git.run(*QUIET, "update-ref", "--no-deref", "-z", "--stdin", cwd=repo, input=lines, check=False)
        if done.returncode == 0:
            return set(todo), gone, refused, None
        said = (done.stderr or done.stdout).strip()
        last = first_error(said, done.returncode)
        now = _list(git, repo)
        changed = False
        for name, oid in list(todo.items()):
            if name not in now:
                gone.add(name)
            elif now[name][0] != oid:
                refused[name] = "moved since it was listed"
            elif f"'{name}'" in said:
                refused[name] = last
            else:
                continue
            del todo[name]
            changed = True
        if not changed:
            return set(), gone, refused, f"git update-ref failed: {last}"
    return set(), gone, refused, "git update-ref kept refusing the deletions"


def sweep(
    git: Git,
    repo: Path | str,
    known_task_refs: Iterable[str] | Callable[[], Iterable[str]],
    *,
    turn_ended: float,
    grace: float = GRACE,
    now: Callable[[], float] = time.time,
) -> StrayReport:
    """Remove the lock files, symbolic refs and refs under corral's namespaces that corral did not make.

    ``repo``: the repository's main checkout (or any of its worktrees). ``known_task_refs``: the
    refs of every task in the store, whatever its status — or a callable returning them, called
    after the refs are listed (see the module's note on a concurrent ``start``). ``turn_ended``:
    when the turn's last agent process was known gone (``time.time()``); the reconciler passes the
    moment it found the turn's processes gone. Call it after that moment, before any other git
    step on the task's refs. Never raises for what it finds: an error is the report's ``error``.
    """
    where = Path(repo)
    common = common_dir(where)
    if common is None:
        try:
            common = Path(git.out("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=where))
        except GitError as exc:
            return StrayReport(error=exc.message[:300])
    items: list[Found] = []
    locks_removed = broken_removed = 0
    task_refs: list[str] = []
    error: str | None = None
    refs_removed = symrefs_removed = 0
    try:
        lock_entries, loose, cut = _walk(common)
        lock_items, locks_removed = _settle_locks(common, lock_entries, turn_ended, grace, now)
        items += lock_items
        if cut:
            error = f"the refs directories hold more than {WALK_LIMIT:,} entries; corral looked at the first"
        early: set[str] = set()  # removed before git looked
        for entry in loose:  # before any git reads the refs: it would block on these, or read through them
            hazard = _hazard(common, entry)
            if hazard is None:
                continue
            gone = _unlink_same(common, entry)
            if gone == "":
                continue
            items.append(Found("broken", sanitize_field(entry.rel), None, gone is None, gone or hazard))
            if gone is None:
                broken_removed += 1
                early.add(entry.rel)
        loose = [e for e in loose if e.rel not in early and (stat.S_ISREG(e.mode) or stat.S_ISLNK(e.mode))]
        listed = _list(git, where)
        ours = frozenset(r for r in (known_task_refs() if callable(known_task_refs) else known_task_refs) if is_ref(r))
        task_refs += [r for r in sorted(early) if is_ours(r, ours)]
        unlisted = [e for e in loose if e.rel not in listed]
        for entry in unlisted:
            gone = _unlink_same(common, entry)
            if gone == "":
                continue
            items.append(Found("broken", sanitize_field(entry.rel), None, gone is None, gone))
            if gone is None:
                broken_removed += 1
                if is_ours(entry.rel, ours):
                    task_refs.append(entry.rel)
        if broken_removed:
            listed = _list(git, where)  # a packed value the unreadable file hid shows through now
        doomed = {name: oid for name, (oid, symref) in listed.items() if symref or not is_ours(name, ours)}
        deleted, vanished, refused, failed = _delete(git, where, doomed)
        error = error or failed
        for name in sorted(set(doomed) - vanished):
            oid, symref = listed[name]
            kind = "symref" if symref else "ref"
            shown = sanitize_field(name)
            if name in deleted:
                if symref:
                    symrefs_removed += 1
                else:
                    refs_removed += 1
                if is_ours(name, ours):
                    task_refs.append(name)
                items.append(Found(kind, shown, sanitize_field(symref) if symref else oid, True))
            else:
                why = refused.get(name, failed or "not removed")
                items.append(Found(kind, shown, sanitize_field(symref) if symref else oid, False, why))
    except (GitError, OSError) as exc:
        error = str(exc)[:300]
    left = [i for i in items if not i.removed]
    done = [i for i in items if i.removed]
    return StrayReport(
        locks=locks_removed,
        refs=refs_removed,
        symrefs=symrefs_removed,
        broken=broken_removed,
        left=len(left),
        items=tuple((left + done)[:ITEMS_KEPT]),
        task_refs=tuple(sanitize_field(r) for r in task_refs),
        error=error,
    )


# -- deleting a task's branch ---------------------------------------------------------------------
