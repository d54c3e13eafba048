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

Which lock files are stale, and what else in the refs directories is removed before any git
reads them, is ``runtime/refs_walk``.

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

What the sweep found is a :class:`~corral.engine.runtime.stray_report.StrayReport`, stored with the
turn (``runtime/stray_report``).

A task's branch itself is deleted by :func:`corral.adapters.branches.delete_task_branch`.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from corral.adapters.branches import first_error
from corral.adapters.git import UNTRUSTED_WORKTREE_ARGS, Git
from corral.adapters.ref_files import common_dir
from corral.domain.refs import is_ref
from corral.domain.sanitize import sanitize_field
from corral.engine.runtime.refs_walk import (
    BRANCHES,
    GRACE,
    OWN,
    WALK_LIMIT,
    hazard_of,
    in_namespace,
    settle_locks,
    unlink_same,
    walk,
)
from corral.engine.runtime.stray_report import Found, StrayReport
from corral.errors import GitError

#: ``refs/corral/<name>/<task ref>``: one ref per task.
ONE_PER_TASK = frozenset({"archive", "verified", "wip", "remote-wip"})
#: ``refs/corral/<name>/<task ref>/…``: any number per task.
MANY_PER_TASK = frozenset({"kept", "stale"})
#: Every git corral runs on refs an agent could have written: no hooks, no fsmonitor.
QUIET = UNTRUSTED_WORKTREE_ARGS  # what git in a task's worktree gets: no hooks, no fsmonitor
#: How many entries a report lists (its counts are whole).
ITEMS_KEPT = 20
#: How many times a refused transaction is tried again without the refs git named.
RETRIES = 3
_FORMAT = "--format=%(refname)%00%(objectname)%00%(symref)"


def _list(git: Git, repo: Path) -> dict[str, tuple[str, str]]:
    """name → (object, symref target) of every ref git lists under corral's namespaces."""
    out = git.run("for-each-ref", _FORMAT, BRANCHES.rstrip("/"), OWN.rstrip("/"), cwd=repo).stdout
    refs: dict[str, tuple[str, str]] = {}
    for line in out.split("\n"):
        name, _, rest = line.partition("\0")
        oid, _, symref = rest.partition("\0")
        if in_namespace(name):
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
        lock_entries, loose, cut = walk(common)
        lock_items, locks_removed = settle_locks(common, lock_entries, turn_ended, grace, now)
        items += lock_items
        if cut:
            error = f"the refs directories hold more than {WALK_LIMIT:,} entries; corral looked at the first"
        early: set[str] = set()  # removed before git looked
        for entry in loose:  # before any git reads the refs: it would block on these, or read through them
            hazard = hazard_of(common, entry)
            if hazard is None:
                continue
            gone = unlink_same(common, entry)
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
            gone = unlink_same(common, entry)
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
