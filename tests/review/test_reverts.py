"""A revert of a protected file (engine/operations/turns.revert_files) stays inside the task's worktree.

The reverts a turn applies come from the store, on a shared one from another host's plan, and the
worktree from the branch the remote holds: neither may lead a checkout or a removal anywhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.engine.operations.turns import revert_files
from corral.errors import UnsafeName
from corral.store import NewTask
from tests.conftest import git


def _session(project: Any, worktree: Path) -> Any:
    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="fix", goal="Fix it"), Actor.HUMAN)
        base = git(worktree, "rev-parse", "HEAD").strip()
        return tx.insert_session(task.id, worktree=str(worktree), branch="corral/fix", base_commit=base)


@pytest.fixture
def worktree(repo: Path) -> Path:
    """The project's own checkout stands in for the task's worktree: a file at the turn's base."""
    (repo / "kept.txt").write_text("as it was\n")
    git(repo, "add", "kept.txt")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "corral/fix")  # on the task's branch, as a task's worktree is
    return repo


def test_a_revert_restores_and_removes_inside_the_worktree(project: Any, worktree: Path) -> None:
    session = _session(project, worktree)
    (worktree / "kept.txt").write_text("the agent's\n")
    (worktree / ":(glob)*").write_text("a name that looks like pathspec magic\n")
    (worktree / "new.txt").write_text("made by the agent\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "agent")
    revert_files(project, session, [("kept.txt", None), (":(glob)*", None)])
    assert (worktree / "kept.txt").read_text() == "as it was\n"
    assert not (worktree / ":(glob)*").exists() and (worktree / "new.txt").exists()  # only the file named


def test_a_revert_through_a_symlink_or_out_of_the_worktree_or_from_an_option_is_refused(
    project: Any, worktree: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "authorized_keys").write_text("mine\n")
    (worktree / "h").symlink_to(victim)  # what a pushed branch can hold
    git(worktree, "add", "h")
    git(worktree, "commit", "-q", "-m", "a link")
    session = _session(project, worktree)
    for path, source in (
        ("h/.ssh/authorized_keys", None),
        (f"../{victim.name}/.ssh/authorized_keys", None),
        (str(victim / ".ssh" / "authorized_keys"), None),
        ("kept.txt", "--output=" + str(victim / "out")),
        ("kept.txt", "no-such-commit"),
    ):
        with pytest.raises(UnsafeName):
            revert_files(project, session, [(path, source)])
    assert (victim / ".ssh" / "authorized_keys").read_text() == "mine\n" and not (victim / "out").exists()
