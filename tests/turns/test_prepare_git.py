"""A start's workspace (``workspace.prepare``) asks git only to make the worktree where the repository's files are
plain: the target's commit, the task branch's absence and an orphan's tip are read from the files
(``adapters/tip_files``); where they are not plain (a packed target, a branch already there), git is asked, and the
answers are the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.adapters.git import Git
from corral.domain.actors import Actor
from corral.engine import workspace
from corral.engine.project import Project
from corral.errors import PrepareFailed
from corral.store import NewTask
from tests.conftest import git
from tests.support.counting_runner import CountingRunner


def _prepare(repo: Path, ref: str) -> tuple[workspace.Workspace, list[str]]:
    runner = CountingRunner()
    project = Project.open(repo, git=Git(runner))
    try:
        with project.store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal=f"Task {ref}", target_branch="main"), Actor.HUMAN)
        runner.argvs.clear()
        made = workspace.prepare(project, task, "main")
    finally:
        project.close()
    return made, runner.subcommands()


def test_a_start_in_a_plain_repository_runs_one_git_process_the_worktree_add(repo: Path) -> None:
    made, ran = _prepare(repo, "plain")
    assert ran == ["worktree"]
    assert made.base_commit == git(repo, "rev-parse", "main")
    assert git(made.worktree, "rev-parse", "--abbrev-ref", "HEAD") == "corral/plain"
    assert git(repo, "rev-parse", "corral/plain") == made.base_commit


def test_a_packed_target_is_asked_of_git_with_the_same_base(repo: Path) -> None:
    git(repo, "gc", "-q")  # main's commit packed, its ref in packed-refs
    made, ran = _prepare(repo, "packed")
    assert "rev-parse" in ran and ran[-1] == "worktree"
    assert made.base_commit == git(repo, "rev-parse", "main")


def test_a_branch_already_there_with_work_of_its_own_is_refused_as_before(repo: Path) -> None:
    git(repo, "switch", "-q", "-c", "corral/taken")
    git(repo, "commit", "-q", "--allow-empty", "-m", "someone's work")
    git(repo, "switch", "-q", "main")
    kept = git(repo, "rev-parse", "corral/taken")
    with pytest.raises(PrepareFailed, match="already exists"):
        _prepare(repo, "taken")
    assert git(repo, "rev-parse", "corral/taken") == kept  # nothing of it touched


def test_an_untouched_leftover_branch_of_a_start_that_died_is_reclaimed_as_before(repo: Path) -> None:
    git(repo, "branch", "corral/left", "main")  # a start that died after the branch, before its record
    made, ran = _prepare(repo, "left")
    assert ran[-1] == "worktree" and made.base_commit == git(repo, "rev-parse", "main")
