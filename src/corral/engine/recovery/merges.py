"""Merge bookkeeping: an accept's in-flight record, and putting a stranded or aborted accept right.

``accept_in_flight_from`` (:data:`MARKER`, recorded when an accept starts) names the status
to restore when the accept aborts or dies; a merge that landed completes through zombie,
the system-only recovery status.

An accept that brings a checked-out target along records, before it acts, what it is
about to do (:data:`JOURNAL`: the target, its old tip, the new commit, the destination
worktree and the message of the stash it may make). After a kill, recovery reads that
record and finishes the destination update (a two-tree ``read-tree -m -u`` when the
checkout is still at the old tree, then the stash popped), or, when the merge did not
land, puts the stash back so the checkout is exactly what the person had. What cannot be
put back is named on the task (:data:`RESTORE_CONFLICT`: the stash commit and the command
that restores it) until the person has restored it.

Accepts into one target serialize on :func:`target_lock`; recovery of a stranded accept
takes the same lock first, so no accept works on a checkout a dead one left half-updated.

Those locks, the checkout and its stash are the accepting host's own. On the shared store an accept
in flight is therefore recorded as a process (``accept``) named by that host's identity, written with
its marker (:func:`mark_in_flight`): another host never takes it for stranded (its locks there are free,
its target there is not the one that moved), and only the host it runs on recovers it
(docs/workers.md#turns-run-on-your-own-host).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corral.adapters.locks import lock, try_lock
from corral.adapters.process import Completed
from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.record import record
from corral.domain.records import RESTORE_CONFLICT, RestingCause, Session, Task
from corral.domain.status import Status
from corral.domain.violations import shown_paths
from corral.engine import workspace
from corral.engine.project import Project
from corral.engine.queue import owner
from corral.engine.task_locks import task_lock
from corral.errors import CorralError, DestinationRestoreConflict, TaskBusy

MARKER = "accept_in_flight_from"
#: The in-flight record of an accept that brings a checked-out target along (see the module doc).
JOURNAL = "accept_in_flight"
#: A stash or a checkout an accept could not put back, named until the person restores it.
#: How long an accept waits for a dead accept's git to finish in the checkout it shares.
BUSY_WAIT = 10.0
#: The resting cause of a task whose accept found its branch conflicting with the (moved) target.
CONFLICT_CAUSE = "merge-conflict-on-accept"


# -- the per-target lock -------------------------------------------------------------------------


def target_lock_path(project: Project, target: str) -> Path:
    import hashlib  # imported by the few paths that lock a target: every reconcile loads this module

    digest = hashlib.sha256(target.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return project.paths.root / "locks" / f"target-{digest}.lock"


@contextmanager
def target_lock(project: Project, target: str, *, timeout: float) -> Iterator[None]:
    """Exclusive use of ``target``'s merge and its checked-out worktree; TaskBusy after ``timeout``."""
    path = target_lock_path(project, target)
    fd = lock(path, timeout) if timeout > 0 else try_lock(path)
    if fd is None:
        raise TaskBusy(
            f"Another accept into {target} is still running.",
            hint="Wait for it to finish, then try again.",
        )
    try:
        yield
    finally:
        os.close(fd)


# -- the in-flight record ------------------------------------------------------------------------


@record
class InFlight:
    """What an accept is about to do to its target and the target's checkout."""

    target: str
    old: str
    new: str
    destination: str | None
    stash_message: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "old": self.old,
            "new": self.new,
            "destination": self.destination,
            "stash_message": self.stash_message,
        }

    @classmethod
    def from_json(cls, data: Any) -> InFlight | None:
        if not isinstance(data, dict):
            return None
        target, old, new = data.get("target"), data.get("old"), data.get("new")
        if not (isinstance(target, str) and isinstance(old, str) and isinstance(new, str)):
            return None
        dest, message = data.get("destination"), data.get("stash_message")
        return cls(
            target,
            old,
            new,
            dest if isinstance(dest, str) else None,
            message if isinstance(message, str) else None,
        )


def save_in_flight(project: Project, task_id: str, flight: InFlight | None) -> None:
    """Save (or, with None, drop) the accept's in-flight record: written before the step it describes."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        meta = {k: v for k, v in task.metadata.items() if k != JOURNAL}
        if flight is not None:
            meta[JOURNAL] = flight.to_json()
        tx.update_task(task_id, metadata=meta, touch=False)


def without_flight(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in (MARKER, JOURNAL)}


#: The process record of an accept in flight on the shared store (the host that runs it).
ACCEPT = "accept"


def mark_in_flight(project: Project, task_id: str, prior: Status) -> None:
    """An accept starts: the status to restore should it die, and (on the shared store) the host it runs on."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        tx.update_task(task_id, metadata={**task.metadata, MARKER: prior.value}, touch=False)
        me = owner(project)
        if me is not None:
            tx.register_process(task_id, ACCEPT, os.getpid(), owner=me)


def accepting_elsewhere(project: Project, task_id: str) -> bool:
    """Whether the task's accept in flight runs on another host (only that host may recover it)."""
    if not project.placement.other_hosts():
        return False
    with project.store.read() as tx:
        records = [p for p in tx.processes(task_id) if p.kind == ACCEPT]
    me = owner(project)
    return any(p.elsewhere(me) for p in records)


# -- the destination checkout --------------------------------------------------------------------


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


def stash_overlap(project: Project, wt: Path, old: str, new: str, message: str) -> str | None:
    """Stash (against the old tip) local changes in ``wt`` that touch paths the merge changes."""
    git = project.git
    changed = set(git.changed_between(old, new, cwd=wt))
    local = [p for p in git.dirty_paths(wt) if p in changed]
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


def _index_at(project: Project, wt: Path, tree: str, paths: list[str]) -> bool:
    return _git(project, wt, "diff-index", "--cached", "--quiet", tree, "--", *paths).returncode == 0


@record
class Kept:
    """What a destination update could not put back: the stash kept (if any) and the command that restores."""

    message: str
    worktree: str
    stash: str | None
    command: str

    def error(self) -> DestinationRestoreConflict:
        return DestinationRestoreConflict(self.message, hint=f"Run: {self.command}")

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "worktree": self.worktree, "stash": self.stash, "command": self.command}


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


def _pop(project: Project, wt: Path, flight: InFlight, *, landed: bool) -> Kept | None:
    """Put the stash made for ``flight`` back onto ``wt``; a conflict keeps it and names it."""
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
        f"git -C {wt} stash apply --index {sha}",
    )


def settle_destination(project: Project, flight: InFlight, *, landed: bool, recovering: bool = True) -> Kept | None:
    """Bring ``flight``'s destination to the target's tree (landed) or back to what the person had.

    Returns what could not be put back (and the command that does), None when all was.
    ``recovering`` (after a kill): raises CheckoutBusy while a git process the dead accept
    started still works there, or holds its index.
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
            f"git -C {wt} stash apply --index {found[1]}",
        )
    if landed:
        paths = project.git.changed_between(flight.old, flight.new, cwd=wt)
        # The index tells how far the update went: at the new tree (read-tree done, the pop may be
        # pending), at the old one (the ref moved, the checkout not yet), or anything else (hands off).
        if paths and not _index_at(project, wt, flight.new, paths):
            _git(project, wt, "update-index", "-q", "--refresh")  # stat-only differences must not block it
            moved = (
                _index_at(project, wt, flight.old, paths)
                and _git(project, wt, "read-tree", "-m", "-u", flight.old, flight.new).returncode == 0
            )
            if not moved:
                kept = _pop(project, wt, flight, landed=False)  # the checkout goes back to what the person had
                return kept or Kept(
                    f"The merge stands on {flight.target}, but {wt} could not be brought up to date; "
                    "its index and files are as they were before the accept.",
                    str(wt),
                    None,
                    f"git -C {wt} read-tree -m -u {flight.old} {flight.new}",
                )
    return _pop(project, wt, flight, landed=landed)


def note_conflict(metadata: dict[str, Any], kept: Kept, at: str | None) -> dict[str, Any]:
    """``metadata`` with the restore conflict named (what ``show`` and ``--json`` render until cleared)."""
    return {**metadata, RESTORE_CONFLICT: {**kept.to_json(), "code": DestinationRestoreConflict.code, "at": at}}


def clear_resolved(project: Project, tasks: list[Task] | None = None) -> int:
    """Drop the restore-conflict note of tasks whose kept stash the person has applied and dropped.

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
        if stash in listed:
            continue
        with project.store.write() as tx:
            current = tx.get_task(task.id)
            if current is not None and RESTORE_CONFLICT in current.metadata:
                meta = {k: v for k, v in current.metadata.items() if k != RESTORE_CONFLICT}
                tx.update_task(task.id, metadata=meta, touch=False)
                cleared += 1
    return cleared


# -- aborts and stranded accepts ----------------------------------------------------------------


def restore_prior(
    project: Project, task_id: str, actor: Actor, why: str, *, cause: str | None = None, details: Any = None
) -> None:
    """Put an aborted accept's task back to the status it had, and drop the marker and the record.

    ``cause`` (a resting-cause code, with ``details``) says why it rests, e.g. :data:`CONFLICT_CAUSE`.
    """
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        resting = RestingCause(cause, at=tx.now(), actor=actor, details=dict(details or {})) if cause else None
        prior = task.metadata.get(MARKER)
        tx.update_task(task_id, metadata=without_flight(task.metadata), touch=False)
        tx.unregister_process(task_id, ACCEPT)
        if task.status is Status.MERGING:
            if prior == Status.SUBMITTED.value:
                tx.set_status(
                    task_id, Status.SUBMITTED, actor, why, expected_from=Status.MERGING, resting_cause=resting
                )
            else:
                tx.park(task_id, actor, why, expected_from=Status.MERGING, resting_cause=resting)


def _landed(project: Project, task: Task, session: Session | None, target: str, flight: InFlight | None) -> bool:
    if session is None:
        return False
    if flight is not None and project.git.rev_parse(f"refs/heads/{target}", cwd=project.repo) == flight.new:
        return True
    return any(
        t["task"] == task.id and t["session"] == session.id
        for t in project.git.trailers(f"refs/heads/{target}", cwd=project.repo, limit=200)
    )


def recover_stranded(project: Project, task: Task, *, target_held: bool = False) -> str:
    """A task left in merging by an accept that died: completed if the merge landed, else restored.

    The destination checkout is finished or put back first (:func:`settle_destination`);
    what cannot be put back is noted on the task. Returns what was done: "completed",
    "restored" or "left" (a forge-pending merge, or an accept still holding a lock).
    ``target_held``: the caller (an accept into the same target) already holds its lock.
    """
    if MARKER not in task.metadata:
        return "left"  # the merge lives on a forge; a later accept asks it what happened
    if accepting_elsewhere(project, task.id):
        return "left"  # its locks, its checkout and its stash are another host's: that host recovers it
    flight = InFlight.from_json(task.metadata.get(JOURNAL))
    try:
        if flight is None or target_held:
            return _recover(project, task)
        # Never wait: a live accept into this target holds it, and recovers this one itself.
        with target_lock(project, flight.target, timeout=0):
            return _recover(project, task)
    except TaskBusy:
        return "left"


def _recover(project: Project, task: Task) -> str:
    with task_lock(project, task.id, what="stranded-merge sweep", timeout=0):
        with project.store.read() as tx:
            task = tx.get_task(task.id) or task
            session = tx.get_session(task.session_id) if task.session_id else None
            if task.status is not Status.MERGING:
                return "left"
            target = workspace.target_branch(tx, task)
        flight = InFlight.from_json(task.metadata.get(JOURNAL))
        landed = _landed(project, task, session, target, flight)
        try:
            problem = settle_destination(project, flight, landed=landed) if flight is not None else None
        except CheckoutBusy:
            return "left"
        if problem is not None:
            with project.store.write() as tx:
                current = tx.get_task(task.id) or task
                meta = note_conflict(current.metadata, problem, rfc3339(tx.now()))
                tx.update_task(task.id, metadata=meta, touch=False)
                task = tx.get_task(task.id) or current
        if landed and session is not None:
            complete_merged(project, task, session, "the stranded merge had landed")
            return "completed"
        restore_prior(project, task.id, Actor.SYSTEM, "restored after an accept died mid-merge")
        return "restored"


def recover_into(project: Project, target: str, *, besides: str) -> None:
    """With ``target``'s lock held: recover every accept into it that died with its record saved."""
    with project.store.read() as tx:
        merging = [t for t in tx.tasks([Status.MERGING]) if t.id != besides]
    for task in merging:
        flight = InFlight.from_json(task.metadata.get(JOURNAL))
        if flight is None or flight.target != target or accepting_elsewhere(project, task.id):
            continue  # another host's accept is not waited for: the remote's compare-and-swap keeps them apart
        deadline = time.monotonic() + BUSY_WAIT
        while recover_stranded(project, task, target_held=True) == "left":
            with project.store.read() as tx:
                still = tx.get_task(task.id)
            if still is None or still.status is not Status.MERGING:
                break
            if time.monotonic() > deadline:
                raise TaskBusy(
                    f"An accept of {task.ref} into {target} died, and git still works in {flight.destination}.",
                    hint="Wait for that git to finish (or end it), then accept again.",
                )
            time.sleep(0.1)


def complete_merged(project: Project, task: Task, session: Session, why: str) -> str | None:
    """The work is on its target but the status was not updated: outcome accepted → zombie → complete.

    Returns a warning when the worktree could not be removed (it is kept, never lost).
    """
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status in (Status.COMPLETE, Status.ABANDONED):
            return None
        tx.update_task(task.id, metadata=without_flight(current.metadata), touch=False)
        tx.unregister_process(task.id, ACCEPT)
        tx.update_session(session.id, outcome="accepted", ended_at=tx.now())
        tx.set_status(task.id, Status.ZOMBIE, Actor.SYSTEM, why, resting_cause=None)
        tx.set_status(task.id, Status.COMPLETE, Actor.SYSTEM, "merged into its target")
        current = tx.get_task(task.id) or current
    try:
        workspace.save_and_remove(project, current, session, "completion")
    except CorralError as exc:
        return f"{current.ref} is complete, but its worktree was kept: {exc.message}"
    return None
