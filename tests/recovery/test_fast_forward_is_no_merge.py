"""A fast-forward is not a merge: an agent that moves its branch onto the moved target never
gets its task completed by the merged-branch sweep, and its uncommitted work is never swept away."""

from __future__ import annotations

from pathlib import Path

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.refresh import settle
from tests.conftest import git


def blocked_task(proj, agent, ref: str, steps: list[dict]) -> Path:
    agent.script([{"init": True}, *steps, {"result": "done"}])
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    with proj.store.read() as tx:
        found = tx.task_by_ref(ref)
        session = tx.get_session(found.session_id)
    return Path(session.worktree)


def status_of(proj, ref: str) -> Status:
    with proj.store.read() as tx:
        return tx.task_by_ref(ref).status


def move_main(repo: Path, name: str) -> None:
    (repo / name).write_text("someone else's work\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"main moves: {name}")


def test_a_fast_forward_onto_the_moved_target_with_uncommitted_work_stays_and_keeps_it(proj, agent, repo):
    worktree = blocked_task(proj, agent, "ff-dirty", [])
    move_main(repo, "other.txt")
    git(worktree, "merge", "-q", "--ff-only", "main")  # the agent's branch now points at main's tip
    (worktree / "unsaved.txt").write_text("the agent's uncommitted work\n")
    settle(proj)
    assert status_of(proj, "ff-dirty") is Status.BLOCKED  # not "complete — merged into its target"
    assert (worktree / "unsaved.txt").read_text() == "the agent's uncommitted work\n"  # the worktree stays
    settle(proj)
    assert status_of(proj, "ff-dirty") is Status.BLOCKED


def test_a_clean_fast_forward_is_following_the_target_not_merging_into_it(proj, agent, repo):
    worktree = blocked_task(proj, agent, "ff-clean", [])
    move_main(repo, "other.txt")
    git(worktree, "reset", "-q", "--hard", "main")
    settle(proj)
    assert status_of(proj, "ff-clean") is Status.BLOCKED


def test_work_the_target_took_by_hand_still_completes(proj, agent, repo):
    worktree = blocked_task(
        proj, agent, "taken", [{"write": {"path": "feature.txt", "content": "x\n"}}, {"commit": "feature"}]
    )
    assert (worktree / "feature.txt").exists()
    git(repo, "merge", "-q", "--ff-only", "corral/taken")  # a person fast-forwards main to the task's work
    settle(proj)
    assert status_of(proj, "taken") is Status.COMPLETE
