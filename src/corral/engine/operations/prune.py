"""``corral prune`` and the daemon's daily prune: expired diagnostics, stale worktrees.

* **Diagnostics** 90 days old or older are removed (``corral.engine.read.diagnostic_retention.prune``),
  and those of tasks that no longer exist. Failure evidence and resting causes stay in
  the database until the task is deleted; a pruned reference reads "Expired after 90
  days". The daemon does this once a day.
* **Stale worktrees** — a directory under the state's ``worktrees/`` that no live task
  owns (no task has that ref, or the task is complete or abandoned, or no session of
  the task points at it and it is older than an hour, so a ``start`` that is making it
  right now is left alone). Nothing is deleted unsaved: a worktree with uncommitted
  changes, a detached HEAD, or anything that is not a git worktree is kept and reported
  with the reason; only clean worktrees on a branch are removed (the branch stays).
  Only ``corral prune`` removes worktrees; the daemon never does.
* **Never on an unhealthy store.** Evidence is deleted only when the store that says it
  belongs to no task is whole: a database that is missing, empty, replaced under the
  process, damaged or failing (:meth:`Store.health`) refuses the prune with its coded
  error and nothing is removed. A diagnostic whose task directory still exists is never
  taken for a deleted task's (``delete`` removes the directory first).
* **A dry run** (``corral prune --dry-run``) finds the same diagnostics and worktrees by the
  same rules and removes nothing: its result lists what a prune would remove.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from corral.domain.status import TERMINAL
from corral.engine.project import Project
from corral.engine.read import diagnostic_retention
from corral.errors import GitError

#: A worktree without a session younger than this may be one a ``start`` is making now.
ORPHAN_GRACE = timedelta(hours=1)


class PruneResult(Struct):
    diagnostics: diagnostic_retention.PruneReport
    worktrees_removed: list[str] = field(default_factory=list)  # in a dry run: would be removed
    worktrees_kept: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    dry_run: bool = False

    def as_view(self) -> dict[str, Any]:
        """What was pruned as --json gives it: a view (the worktrees' lists nested under ``worktrees``)."""
        return {
            "dry_run": self.dry_run,
            "diagnostics": self.diagnostics.to_json(),
            "worktrees": {"removed": self.worktrees_removed, "kept": self.worktrees_kept},
        }


def require_healthy(project: Project) -> None:
    """Raise the store's first fault (as "nothing was pruned"), so no evidence goes on its word."""
    faults = project.store.health()
    if faults:
        first = faults[0]
        raise type(first)(
            f"Nothing was pruned: {first.message}",
            hint=first.hint,
            code=first.code,
        )


def prune_diagnostics(
    project: Project, now: datetime | None = None, *, dry_run: bool = False
) -> diagnostic_retention.PruneReport:
    require_healthy(project)
    with project.store.read() as tx:
        live = {t.id for t in tx.tasks()}
    # A task directory still on disk is a task the store should know: never its evidence's orphan.
    try:
        live |= {entry.name for entry in os.scandir(project.paths.tasks) if entry.is_dir(follow_symlinks=False)}
    except OSError:
        pass
    if dry_run:
        return _would_prune(project, now or project.clock(), live)
    report = diagnostic_retention.prune(project.paths, now or project.clock(), live)
    if report.removed:
        # What was shipped for reviewers elsewhere keeps the same retention (docs/workers.md#shipped).
        with project.store.write() as tx:
            for removed in report.removed:
                task_id, _sep, _name = removed.partition("/")
                tx.unship(task_id, f"diagnostics/{removed}")
    return report


def _would_prune(project: Project, now: datetime, live: set[str]) -> diagnostic_retention.PruneReport:
    """What ``diagnostic_retention.prune`` would remove, by its rules (its RETENTION), removing nothing."""
    report = diagnostic_retention.PruneReport()
    cutoff = (now - diagnostic_retention.RETENTION).timestamp()
    try:
        task_dirs = sorted(os.scandir(project.paths.diagnostics), key=lambda e: e.name)
    except OSError:
        return report
    for entry in task_dirs:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name not in live:
            report.orphaned.append(entry.name)
            continue
        for item in os.scandir(entry.path):
            if item.name.startswith("."):
                continue  # a half-written temp file: not a diagnostic
            try:
                mtime = item.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if mtime <= cutoff:
                report.removed.append(f"{entry.name}/{item.name}")
            else:
                report.kept += 1
    return report


def prune(
    project: Project, *, now: datetime | None = None, worktrees: bool = True, dry_run: bool = False
) -> PruneResult:
    when = now or project.clock()
    result = PruneResult(prune_diagnostics(project, when, dry_run=dry_run), dry_run=dry_run)
    if worktrees:
        prune_worktrees(project, when, result)
    return result


def _owned_paths(project: Project) -> tuple[set[str], dict[str, bool]]:
    """Worktree paths a live task's session points at, and each ref's liveness (True: a live task)."""
    owned: set[str] = set()
    refs: dict[str, bool] = {}
    with project.store.read() as tx:
        for task in tx.tasks():
            live = task.status not in TERMINAL
            refs[task.ref] = live
            if not live:
                continue
            for session in tx.sessions(task.id):
                if session.worktree:
                    owned.add(os.path.realpath(session.worktree))
    return owned, refs


def prune_worktrees(project: Project, now: datetime, result: PruneResult) -> None:
    root = project.paths.worktrees
    if not root.is_dir():
        return
    require_healthy(project)
    owned, refs = _owned_paths(project)
    git, repo = project.git, project.repo
    for entry in sorted(root.iterdir()):
        path = str(entry)
        if os.path.realpath(entry) in owned:
            continue
        live = refs.get(entry.name)
        if live:
            try:
                age = now.timestamp() - entry.lstat().st_mtime
            except OSError:
                continue
            if age < ORPHAN_GRACE.total_seconds():
                result.worktrees_kept.append({"path": path, "reason": "too new to be stale (a start may be making it)"})
                continue
        why = _why_keep(project, entry)
        if why is not None:
            result.worktrees_kept.append({"path": path, "reason": why})
            continue
        if result.dry_run:
            result.worktrees_removed.append(path)
            continue
        if entry.is_dir() and not any(entry.iterdir()):
            entry.rmdir()
        else:
            git.worktree_remove(entry, cwd=repo)
        if entry.exists():
            result.worktrees_kept.append({"path": path, "reason": "git could not remove it"})
        else:
            result.worktrees_removed.append(path)
    if not result.dry_run:
        git.run("worktree", "prune", cwd=repo, check=False)


def _why_keep(project: Project, entry: Path) -> str | None:
    """Why a stale worktree must stay (it holds something unsaved, or is not corral's), or None."""
    if entry.is_symlink() or not entry.is_dir():
        return "not a directory corral made; move it aside yourself"
    if not any(entry.iterdir()):
        return None  # an empty directory
    if not (entry / ".git").exists():
        return "not a git worktree; move it aside yourself"
    git = project.git
    try:
        if git.dirty_paths(entry):
            return "it has uncommitted changes; commit or discard them, then prune again"
    except GitError:
        return "git cannot read it"
    if git.run("symbolic-ref", "-q", "HEAD", cwd=entry, check=False).returncode != 0:
        return "its HEAD is detached, so its commit may be on no branch"
    return None
