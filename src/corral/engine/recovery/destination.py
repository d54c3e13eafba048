"""The destination checkout of an accept: its local changes stashed, then finished or put back.

An accept that brings a checked-out target along moves the checkout before the target's ref
(a two-tree ``read-tree -m -u``); where the person's local changes touch paths the merge changes,
it stashes those first (:func:`stash_overlap`), moves the checkout after the ref, and pops the
stash. After a kill, recovery reads the in-flight record (``recovery/in_flight``) and
finishes the update (a two-tree ``read-tree -m -u`` when the checkout is still at the old
tree, then the stash popped), or, when the merge did not land, takes a checkout already
moved back (:func:`_take_back`) and puts the stash back, so the checkout is exactly what
the person had (:func:`settle_destination`). What cannot be put back
is named on the task (``RESTORE_CONFLICT``: the stash commit and the command that restores it,
:func:`note_conflict`) until the person has restored it (:func:`clear_resolved`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from corral.adapters.process import Completed
from corral.domain.records import RESTORE_CONFLICT, Task
from corral.domain.violations import shown_paths
from corral.engine.project import Project
from corral.engine.read.checkout import give_back, kept_branch
from corral.engine.recovery.in_flight import InFlight
from corral.errors import DestinationRestoreConflict


def _git(project: Project, wt: Path, *args: str, check: bool = False) -> Completed:
    return project.git.run("--literal-pathspecs", *args, cwd=wt, check=check)


def find_stash(project: Project, wt: Path, message: str | None) -> tuple[int, str] | None:
    """The position and commit of the stash entry made with ``message`` (refs/stash is shared)."""
    if not message:
        return None
    listed = project.git.run("stash", "list", "--format=%H%x00%gs", cwd=wt, check=False)
    for n, line in enumerate(listed.stdout.splitlines()):
        sha, _, subject = line.partition("\0")
        if subject.endswith(message):
            return n, sha
    return None


_HEX = frozenset("0123456789abcdef")
#: The paths the last merge asked about changes (two commits by their full ids, which name the same
#: objects forever): an accept reads them to stash, then again to bring the checkout along.
_last_changed: tuple[tuple[str, str, str], list[str]] | None = None


def _changed(project: Project, wt: Path, old: str, new: str) -> list[str]:
    """The paths that differ between ``old`` and ``new``, read once per pair of commit ids."""
    global _last_changed
    key = (str(project.repo), old, new)
    if _last_changed is not None and _last_changed[0] == key:
        return list(_last_changed[1])
    paths = project.git.changed_between(old, new, cwd=wt)
    if all(len(c) in (40, 64) and _HEX.issuperset(c) for c in (old, new)):  # a name could move; an id cannot
        _last_changed = (key, list(paths))
    return paths


def stash_overlap(project: Project, wt: Path, old: str, new: str, message: str) -> str | None:
    """Stash (against the old tip) local changes in ``wt`` that touch paths the merge changes."""
    git = project.git
    changed = _changed(project, wt, old, new)
    wanted = set(changed)
    local = [p for p in _local_changes(project, wt, changed) if p in wanted]
    if not local:
        return None
    git.run(
        "--literal-pathspecs",
        *git.identity_args(wt),
        "stash",
        "push",
        "--quiet",  # nothing on stdout: a killed accept's pipe must not kill its git half-way (SIGPIPE)
        "--include-untracked",
        "-m",
        message,
        "--",
        *local,
        cwd=wt,
    )
    found = find_stash(project, wt, message)
    return found[1] if found else None


#: Up to this many paths the merge changes, only they are looked at in the checkout (a status limited
#: to them); more, and the whole checkout is.
PATHS_LOOKED_AT = 5000


def _local_changes(project: Project, wt: Path, paths: list[str]) -> list[str]:
    """The person's uncommitted changes (staged, unstaged, untracked) among ``paths`` in ``wt``: a status of
    those paths alone, not a scan of the whole checkout."""
    if not paths:
        return []
    if len(paths) > PATHS_LOOKED_AT:
        return project.git.dirty_paths(wt)
    out = project.git.run(
        "--literal-pathspecs",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
        "--",
        *paths,
        cwd=wt,
    ).stdout
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def _index_at(project: Project, wt: Path, tree: str, paths: list[str]) -> bool:
    return _git(project, wt, "diff-index", "--cached", "--quiet", tree, "--", *paths).returncode == 0


class Kept(Struct, frozen=True):
    """What a destination update could not put back: the stash kept (if any) and the command that restores."""

    message: str
    worktree: str
    stash: str | None
    command: str

    def error(self) -> DestinationRestoreConflict:
        return DestinationRestoreConflict(self.message, hint=f"Run: {self.command}")

    def to_json(self) -> dict[str, Any]:
        """What was kept, as --json and the store keep it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc


class CheckoutBusy(Exception):
    """A git process still works in the destination (or holds its index): look again later."""


def _read(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace")


def _git_running_in(wt: Path) -> bool:
    """Whether a git process not run by a live corral works in ``wt``: a killed accept's ``stash`` or
    ``read-tree`` (orphaned, it runs on), or the person's own."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    where = str(wt.resolve())
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if not _read(f"/proc/{entry}/comm").strip().startswith("git"):
                continue
            if os.readlink(f"/proc/{entry}/cwd") != where:
                continue
            ppid = _read(f"/proc/{entry}/stat").rsplit(")", 1)[1].split()[1]
            if "corral" not in _read(f"/proc/{ppid}/cmdline"):
                return True
        except (OSError, IndexError):
            continue
    return False


def _busy(project: Project, wt: Path) -> bool:
    if _git_running_in(wt):
        return True
    where = project.git.run("rev-parse", "--path-format=absolute", "--git-path", "index.lock", cwd=wt, check=False)
    return where.returncode == 0 and Path(where.stdout.strip()).exists()


def _stash_paths(project: Project, wt: Path, sha: str, flight: InFlight) -> list[str]:
    """The paths the stash took away: only ones the merge changes (a path-limited stash of those)."""
    changed = set(project.git.changed_between(flight.old, flight.new, cwd=wt))
    # Every name as git stores it (-z): a quoted name would match none of the merge's paths.
    diffed = project.git.run("diff", "--name-only", "--no-renames", "-z", f"{sha}^1", sha, cwd=wt, check=False)
    touched = set(diffed.stdout.split("\0"))
    untracked = project.git.run("ls-tree", "-r", "-z", "--name-only", f"{sha}^3", cwd=wt, check=False)
    if untracked.returncode == 0:
        touched |= set(untracked.stdout.split("\0"))
    return sorted(p for p in touched & changed if p)


def _blob(project: Project, wt: Path, rev: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``rev`` (None when it has no such file)."""
    shown = project.git.run("cat-file", "-e", f"{rev}:{path}", cwd=wt, check=False)
    if shown.returncode != 0:
        return None
    return project.git.run("show", f"{rev}:{path}", cwd=wt, check=False).stdout.encode("utf-8", "surrogateescape")


def _holds(project: Project, wt: Path, sha: str, path: str) -> bool:
    """Whether the worktree's ``path`` already contains the stash's change to it (applying it changes nothing)."""
    file = wt / path
    ours = file.read_bytes() if file.is_file() else None
    theirs = _blob(project, wt, sha, path)
    if theirs is None:  # an untracked file the stash took: in its third parent
        theirs = _blob(project, wt, f"{sha}^3", path)
    if ours == theirs:
        return True
    base = _blob(project, wt, f"{sha}^1", path)
    if ours is None or theirs is None or base is None:
        return False
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data)
            names.append(str(Path(tmp) / name))
        merged = project.git.run("merge-file", "-p", "-q", *names, cwd=wt, check=False)
    return merged.returncode == 0 and merged.stdout.encode("utf-8", "surrogateescape") == ours


def _pop(project: Project, wt: Path, flight: InFlight, *, landed: bool, stashed: bool = True) -> Kept | None:
    """Put the stash made for ``flight`` back onto ``wt``; a conflict keeps it and names it. ``stashed``
    False: the caller made the stash's attempt itself and nothing was stashed (no stash to look for)."""
    if not stashed:
        return None
    found = find_stash(project, wt, flight.stash_message)
    if found is None:
        return None
    n, sha = found
    pop = project.git.run("stash", "pop", "--quiet", "--index", f"stash@{{{n}}}", cwd=wt, check=False)
    if pop.returncode != 0 and "without --index" in pop.stderr:
        # A path-limited stash records the whole index, so staged changes it never took away make
        # --index refuse before touching anything; the worktree merge alone keeps the index as it is.
        pop = project.git.run("stash", "pop", "--quiet", f"stash@{{{n}}}", cwd=wt, check=False)
    if pop.returncode == 0:
        return None
    paths = _stash_paths(project, wt, sha, flight)
    listed = _git(project, wt, "ls-files", "--unmerged", "-z", "--", *paths).stdout if paths else ""
    unmerged = sorted({entry.split("\t", 1)[1] for entry in listed.split("\0") if "\t" in entry})
    if unmerged:
        # The stash keeps the person's version: its paths go back to the tip, no conflict markers left.
        at_tip = {
            p
            for p in _git(project, wt, "ls-tree", "-r", "-z", "--name-only", "HEAD", "--", *paths).stdout.split("\0")
            if p
        }
        if at_tip:
            _git(project, wt, "checkout", "HEAD", "--", *sorted(at_tip))
        for path in sorted(set(paths) - at_tip):
            _git(project, wt, "rm", "-q", "-f", "--ignore-unmatch", "--", path)
    elif paths and all(_holds(project, wt, sha, path) for path in paths):
        # The changes are in place already: a push that never took them away, or a pop that
        # applied them and died before dropping the entry (its git outlived a killed accept).
        project.git.run("stash", "drop", "--quiet", f"stash@{{{n}}}", cwd=wt, check=False)
        return None
    what = "The merge stands, but your" if landed else "Nothing was merged, but your"
    if unmerged:
        why = f" (they overlap the merge in {shown_paths(unmerged, most=10)})."
    else:
        said = (pop.stderr or pop.stdout).strip().splitlines()
        why = f" (git: {said[0][:200]})." if said else "."
    return Kept(
        f"{what} local changes in {wt} conflict with its checkout; they are kept in the stash {sha}{why}",
        str(wt),
        sha,
        give_back(wt, sha),
    )


def settle_destination(
    project: Project, flight: InFlight, *, landed: bool, recovering: bool = True, stashed: bool = True
) -> Kept | None:
    """Bring ``flight``'s destination to the target's tree (landed) or back to what the person had.

    Returns what could not be put back (and the command that does), None when all was.
    ``recovering`` (after a kill): raises CheckoutBusy while a git process the dead accept
    started still works there, or holds its index. ``stashed`` False: the accept itself, not a
    recovery, knows :func:`stash_overlap` stashed nothing, so there is no stash to look for.
    """
    if flight.destination is None:
        return None
    wt = Path(flight.destination)
    if recovering and wt.is_dir() and _busy(project, wt):
        raise CheckoutBusy(str(wt))
    if not wt.is_dir() or project.git.current_branch(wt) != flight.target:
        found = find_stash(project, wt, flight.stash_message) if wt.is_dir() else None
        if found is None:
            return None
        return Kept(
            f"{wt} no longer has {flight.target} checked out; your local changes are kept in the stash {found[1]}.",
            str(wt),
            found[1],
            give_back(wt, found[1]),
        )
    if landed:
        paths = _changed(project, wt, flight.old, flight.new)
        # The index tells how far the update went: at the old tree (the ref moved, the checkout not yet:
        # an accept's own case, asked first), at the new one (read-tree done, the pop may be pending), or
        # anything else (hands off). The paths differ between the two trees: an index at one is not at the other.
        at_old = bool(paths) and _index_at(project, wt, flight.old, paths)
        if at_old or (paths and not _index_at(project, wt, flight.new, paths)):
            moved = at_old and _git(project, wt, "read-tree", "-m", "-u", flight.old, flight.new).returncode == 0
            if at_old and not moved:  # stat-only differences must not block it: the index refreshed, once more
                _git(project, wt, "update-index", "-q", "--refresh")
                moved = _git(project, wt, "read-tree", "-m", "-u", flight.old, flight.new).returncode == 0
            if not moved:
                kept = _pop(project, wt, flight, landed=False)  # the checkout goes back to what the person had
                return kept or Kept(
                    f"The merge stands on {flight.target}, but {wt} could not be brought up to date; "
                    "its index and files are as they were before the accept.",
                    str(wt),
                    None,
                    f"git -C {wt} read-tree -m -u {flight.old} {flight.new}",
                )
    else:
        kept = _take_back(project, wt, flight)
        if kept is not None:
            return kept
    return _pop(project, wt, flight, landed=landed, stashed=stashed or recovering)


def _take_back(project: Project, wt: Path, flight: InFlight) -> Kept | None:
    """A checkout that an accept brought along before its swap (``read-tree -m -u`` old → new, as ``merge
    --squash`` before ``commit``), whose swap did not happen (the target moved, or the accept died before it):
    put back from the new tree to the old one, the person's other local changes kept as they are. Its index at
    the new tree on every path the merge changes tells it was brought along (the two trees differ on each of
    them); anything else is left to the stash's pop. What git refuses to put back (the person changed one of
    those files since) is named, with the command."""
    paths = _changed(project, wt, flight.old, flight.new)
    if not paths or not _index_at(project, wt, flight.new, paths):
        return None
    back = _git(project, wt, "read-tree", "-m", "-u", flight.new, flight.old).returncode == 0
    if not back:  # stat-only differences must not block it: the index refreshed, once more
        _git(project, wt, "update-index", "-q", "--refresh")
        back = _git(project, wt, "read-tree", "-m", "-u", flight.new, flight.old).returncode == 0
    if back:
        return None
    return Kept(
        f"Nothing was merged, but {wt} holds the merge's changes to {flight.target}, brought along before the "
        "target moved, and they could not be taken back: local changes touch them.",
        str(wt),
        None,
        f"git -C {wt} read-tree -m -u {flight.new} {flight.old}",
    )


def note_conflict(metadata: dict[str, Any], kept: Kept, at: str | None) -> dict[str, Any]:
    """``metadata`` with the restore conflict named (what ``show`` and ``--json`` render until cleared)."""
    return {**metadata, RESTORE_CONFLICT: {**kept.to_json(), "code": DestinationRestoreConflict.code, "at": at}}


def clear_resolved(project: Project, tasks: list[Task] | None = None) -> int:
    """Drop the restore-conflict note of tasks whose kept stash the person has taken back (the branch
    :func:`give_back` makes) or applied and dropped.

    ``tasks`` limits the look to those (``show`` of one task); None looks at every task (doctor).
    """
    cleared = 0
    if tasks is None:
        with project.store.read() as tx:
            tasks = tx.tasks()
    noted = [t for t in tasks if isinstance(t.metadata.get(RESTORE_CONFLICT), dict)]
    for task in noted:
        note = task.metadata[RESTORE_CONFLICT]
        stash, wt = note.get("stash"), note.get("worktree")
        if not isinstance(stash, str) or not isinstance(wt, str) or not Path(wt).is_dir():
            continue
        listed = project.git.run("stash", "list", "--format=%H", cwd=wt, check=False).stdout.split()
        taken = _git(project, Path(wt), "rev-parse", "--verify", "-q", f"refs/heads/{kept_branch(stash)}")
        if stash in listed and taken.returncode == 0:
            # Taken back with the command corral gave (give_back): its branch holds them now, so the
            # entry that held them goes, as git's own stash branch drops an entry it names by index.
            _git(project, Path(wt), "stash", "drop", "--quiet", f"stash@{{{listed.index(stash)}}}")
        elif stash in listed:
            continue
        with project.store.write() as tx:
            current = tx.get_task(task.id)
            if current is not None and RESTORE_CONFLICT in current.metadata:
                meta = {k: v for k, v in current.metadata.items() if k != RESTORE_CONFLICT}
                tx.update_task(task.id, metadata=meta, touch=False)
                cleared += 1
    return cleared
