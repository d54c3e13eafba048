"""A start's worktree is made one at a time among corral's processes (engine/workspace.worktree_lock): git reads
every entry of the repository's ``worktrees/`` as it adds one, and dies on an entry another ``worktree add`` has
made and not yet filled, so a few people starting tasks at once failed with "failed to read …/commondir"."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from corral.adapters.locks import lock
from corral.domain.actors import Actor
from corral.engine import workspace
from corral.store import NewTask


def _git_dir(repo: Path) -> Path:
    out = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=repo, capture_output=True, text=True, check=True)
    return (repo / out.stdout.strip()).resolve()


def test_a_start_waits_for_another_corral_process_making_a_worktree(project: Any, repo: Path) -> None:
    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="fix", goal="Fix it"), Actor.HUMAN)
    # Another corral process is making a worktree: it holds the lock, and git has written the new entry's
    # gitdir but not yet its commondir (the moment a simultaneous `git worktree add` dies on).
    held = lock(project.paths.worktrees_lock, 5)
    assert held is not None
    other = _git_dir(repo) / "worktrees" / "other"
    other.mkdir(parents=True)
    (other / "gitdir").write_text(f"{repo.parent / 'other' / '.git'}\n")
    (other / "commondir").write_text("")
    made: list[Any] = []

    def start() -> None:
        try:
            made.append(workspace.prepare(project, task, "main"))
        except Exception as exc:  # the test's assertion below names it
            made.append(exc)

    starting = threading.Thread(target=start)
    starting.start()
    starting.join(2)
    assert made == []  # it waits for the lock (without it, it failed here on the half-made entry)
    # The other process finishes its entry, and lets the lock go.
    (other / "commondir").write_text("../..\n")
    (other / "HEAD").write_text("ref: refs/heads/main\n")
    os.close(held)
    starting.join(60)
    assert len(made) == 1 and isinstance(made[0], workspace.Workspace), made
    assert (made[0].worktree / "README.md").is_file()
