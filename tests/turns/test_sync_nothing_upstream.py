"""The merge before a turn when upstream has nothing new: up to date, whatever the worktree holds."""

from __future__ import annotations

from corral.domain import prompts
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from tests.conftest import git

DIRTY_FIRST = [
    {"init": True},
    {"write": {"path": "notes.txt", "content": "not committed\n"}},
    {"result": "left a change uncommitted"},
]
SAY = [{"init": True}, {"say_prompt": True}, {"result": "second"}]


def blocked_with_a_dirty_worktree(proj, agent):
    agent.script(DIRTY_FIRST, SAY)
    task = tasks.create(proj, "Leave a change behind", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    return task


def test_a_dirty_worktree_with_nothing_upstream_is_told_nothing_about_a_merge(proj, agent):
    task = blocked_with_a_dirty_worktree(proj, agent)
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="carry on")
    control.wait(proj, task.ref, timeout=30)
    second = agent.calls()[1]
    # main has nothing the branch lacks: no "commit or discard them first" for a merge that has nothing to bring.
    assert second["prompt"] == prompts.compose(prompts.feedback_block(["carry on"]), None)


def test_a_dirty_worktree_with_new_upstream_work_still_skips_the_merge_and_says_why(proj, agent, repo):
    task = blocked_with_a_dirty_worktree(proj, agent)
    (repo / "upstream.txt").write_text("new on main\n")
    git(repo, "add", "upstream.txt")
    git(repo, "commit", "-q", "-m", "upstream change")
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="carry on")
    control.wait(proj, task.ref, timeout=30)
    second = agent.calls()[1]
    outcome = prompts.SyncOutcome("skipped-dirty", "main")
    assert second["prompt"] == prompts.compose(prompts.feedback_block(["carry on"]), outcome)
