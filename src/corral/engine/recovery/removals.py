"""An accepted task's worktree and branch removed once its result is recorded: crash-safe, and off accept's time.

Removing a worktree is deleting every file in it (most of a large repository's accept, when it
was done in line). So accept, once the task is ``complete``, takes the worktree out of the way
with one rename (into ``worktrees/.removing/``, on the same filesystem), has git forget it (its
administrative directory renamed there too, as ``worktree prune`` would delete it), then archives
the branch's tip and deletes the branch by compare-and-swap in one ref transaction; the files
themselves are deleted by a detached ``rm -rf`` that outlives the command. Before any of it, what
is to be removed is written down (``removals/<task>.json``): a removal that died anywhere is
finished by the reconciler (:func:`sweep`), every step again from the start, each one a no-op once
done; a renamed worktree whose ``rm`` died is deleted again.

The worktree was found clean under the task's lock by accept's pre-flight (its one status scan),
and nothing of corral's runs in it while the task is merging: nothing in it is work to save.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Literal

from corral import crashpoints
from corral.adapters.branches import delete_task_branch
from corral.adapters.files import write_atomic
from corral.adapters.git import UNTRUSTED_WORKTREE_ARGS as QUIET
from corral.adapters.process import spawn_detached
from corral.adapters.ref_files import common_dir, read_packed
from corral.domain import gittext
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.errors import GitError

#: The directory (beside the worktrees) a removed worktree is renamed into until its files are deleted.
TRASH = ".removing"
#: What the name of a removed worktree's administrative directory begins with in the trash.
ADMIN = ".admin-"
#: A renamed worktree older than this with files left is deleted again (its ``rm`` died with the machine).
TRASH_AGAIN_SECONDS = 60.0


def _notes(project: Project) -> Path:
    return project.paths.root / "removals"


def _note_file(project: Project, task_id: str) -> Path:
    return _notes(project) / f"{task_id}.json"


def trash_dir(project: Project) -> Path:
    return project.paths.worktrees / TRASH


def record(project: Project, task: Task, worktree: str | None, branch: str, tip: str | None) -> None:
    """Write down what accept is about to remove, durably, before the task is recorded complete."""
    note = {"task": task.id, "ref": task.ref, "goal": task.goal, "worktree": worktree, "branch": branch, "tip": tip}
    write_atomic(_note_file(project, task.id), json.dumps(note).encode() + b"\n")
    crashpoints.hit("removal.recorded")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("task", "ref", "branch")):
        return None
    return doc


_FULL_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def _archived(project: Project, ref: str) -> str | None:
    """The commit corral's archive ``ref`` holds, read from the repository's files as git reads them (its loose
    file, else its line in ``packed-refs``; neither: none); git is asked where the files are not the whole story
    (no common directory found, reftable, a loose file holding anything but an object name)."""
    found = ref_in_files(project, ref)
    return project.git.rev_parse(ref, cwd=project.repo) if found is False else found


def ref_in_files(project: Project, ref: str) -> str | Literal[False] | None:
    """The object name ``ref`` holds, read from the repository's files as git reads them: its loose file, else
    its line in ``packed-refs``, else None (no such ref). False where the files are not the whole story (no
    common directory found, reftable, a loose file holding anything but an object name): the caller asks git."""
    common = common_dir(Path(project.repo))
    if common is None or (common / "reftable").exists():
        return False
    try:
        text = (common / ref).read_bytes().strip().decode("ascii").lower()
    except FileNotFoundError:
        return read_packed(common, ()).get(ref)
    except (OSError, UnicodeDecodeError):
        return False
    return text if _FULL_SHA.fullmatch(text) else False


def finish(project: Project, task_id: str) -> bool:
    """Carry out the written-down removal of ``task_id`` (every step is a no-op once done); False when
    none is written down. Raises a git failure (the note stays, for the reconciler)."""
    path = _note_file(project, task_id)
    note = _read(path)
    if note is None:
        if path.exists():  # unreadable: nothing can be done from it, and it must not stay forever
            path.unlink(missing_ok=True)
        return False
    git, repo = project.git, project.repo
    branch, tip = note["branch"], note.get("tip") if isinstance(note.get("tip"), str) else None
    worktree = Path(note["worktree"]) if isinstance(note.get("worktree"), str) else None
    moved: list[Path] = []
    if worktree is not None:
        trash = trash_dir(project)
        if worktree.is_dir() or worktree.is_symlink():
            trash.mkdir(parents=True, exist_ok=True)
            moved.append(trash / f"{worktree.name}.{time.time_ns()}")
            os.rename(worktree, moved[0])
        else:  # moved by a removal that died (with its administrative directory): their files are deleted below
            import glob  # only a removal finished again needs it

            for name in (worktree.name, f"{ADMIN}{worktree.name}"):
                moved += [Path(p) for p in glob.glob(f"{glob.escape(str(trash / name))}.*")]
    crashpoints.hit("removal.moved")
    if worktree is None or not _forget(project, worktree, moved):
        git.run("worktree", "prune", cwd=repo, check=False)  # git forgets the worktree that is gone
    crashpoints.hit("removal.pruned")
    if tip is not None:
        try:
            _retire(project, note, branch, tip)
        except GitError as exc:
            if exc.code == "branch-moved":  # kept with its new commit, for the person: nothing more to do
                path.unlink(missing_ok=True)
            raise
    crashpoints.hit("removal.retired")
    path.unlink(missing_ok=True)
    if moved:
        _delete(project, *moved)
    return True


def _forget(project: Project, worktree: Path, moved: list[Path]) -> bool:
    """git made to forget ``worktree``, now gone, as ``git worktree prune`` does: the administrative directory
    whose ``gitdir`` names that worktree's ``.git`` (corral's record of where it was, never the worktree's own
    files) renamed into the trash, to be deleted with it (added to ``moved``). False where git is to be asked
    instead: not plainly laid out, no such directory (already forgotten, or named another way), the worktree
    still there, locked (prune keeps those), or not renamed (the repository on another filesystem than
    corral's state)."""
    common = common_dir(Path(project.repo))
    if common is None or common.name != ".git" or os.path.lexists(worktree):
        return False
    wanted = str(worktree / ".git")
    try:
        entries = list(os.scandir(common / "worktrees"))
    except OSError:
        return False
    for entry in entries:
        admin = Path(entry.path)
        try:
            if (admin / "gitdir").read_text(errors="surrogateescape").strip() != wanted:
                continue
        except OSError:
            continue
        if (admin / "locked").exists():
            return False
        trash = trash_dir(project)
        trash.mkdir(parents=True, exist_ok=True)
        to = trash / f"{ADMIN}{worktree.name}.{time.time_ns()}"  # found again by a removal run again
        try:
            os.rename(admin, to)
        except OSError:  # the repository and corral's state on two filesystems (EXDEV), or refused: git is asked
            return False
        moved.append(to)
        return True
    return False


def _retire(project: Project, note: dict[str, Any], branch: str, tip: str) -> None:
    """The branch's tip archived (``refs/corral/archive/<ref>``, whose reflog keeps every tip it held), the
    branch deleted by compare-and-swap against that tip (a commit made after it is never lost) and the
    verified mark dropped: one ``update-ref`` transaction, all or nothing, hooks off as for any deletion of a
    task's branch. When git refuses it (the branch gone or moved, a lock in the way), each step is taken
    alone, so that what is wrong is said as :func:`delete_task_branch` says it."""
    git, repo = project.git, project.repo
    archive, verified = f"refs/corral/archive/{note['ref']}", f"refs/corral/verified/{note['ref']}"
    said = f"corral: {branch} archived before accept: {note.get('goal', '')}"
    archived = _archived(project, archive) == tip
    steps = ([] if archived else [f"update {archive}", tip, ""]) + [f"delete refs/heads/{branch}", tip]
    steps += [f"delete {verified}", ""]
    done = git.run(
        *QUIET,
        "update-ref",
        "--no-deref",
        "--create-reflog",
        "-m",
        gittext.reflog(said),
        "--stdin",
        "-z",
        cwd=repo,
        input="\0".join(steps) + "\0",
        check=False,
    )
    if done.returncode == 0:
        return
    if not archived:
        git.update_ref(archive, tip, cwd=repo, message=said, create_reflog=True)
    delete_task_branch(git, repo, branch, expected=tip)
    git.delete_ref(verified, cwd=repo)


def _delete(project: Project, *moved: Path) -> None:
    """Delete renamed worktrees' files (a worktree and its administrative directory) in one process of its own,
    which outlives this command."""
    argv = ["rm", "-rf", "--", *(str(each) for each in moved)]
    spawn_detached(argv, log=trash_dir(project) / "rm.log", cwd=str(trash_dir(project)))


def sweep(project: Project) -> int:
    """Finish the removals that died (their task complete); drop the notes of accepts that did not complete;
    delete again a renamed worktree whose ``rm`` died. Returns how many removals were finished."""
    finished = 0
    notes = _notes(project)
    try:
        pending = [p for p in notes.iterdir() if p.suffix == ".json"]
    except FileNotFoundError:
        pending = []
    for path in pending:
        with project.store.read() as tx:
            task = tx.get_task(path.stem)
        if task is None or task.status not in (Status.COMPLETE, Status.MERGING):
            path.unlink(missing_ok=True)  # the accept did not complete: the task keeps its worktree
        elif task.status is Status.COMPLETE and finish(project, task.id):
            finished += 1
    _sweep_trash(project)
    return finished


def _sweep_trash(project: Project) -> None:
    trash = trash_dir(project)
    try:
        entries = [e for e in os.scandir(trash) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    now = time.time()
    for entry in entries:
        try:
            settled = now - entry.stat(follow_symlinks=False).st_ctime > TRASH_AGAIN_SECONDS
        except OSError:
            continue
        if settled:
            _delete(project, Path(entry.path))
