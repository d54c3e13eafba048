"""A merge conflict the agent left and the person resolved by hand is accepted (interrupted → blocked).

The fault is produced for real: the task's agent edits README.md, the target edits it
too, ``unblock`` runs the upstream merge before the work turn, it conflicts, and the
scripted agent answers without resolving it, so the task rests interrupted with the
cause ``merge-and-fix-failed``. The person then resolves it in the worktree with git.
Everything after that goes through the real CLI: ``show`` (whose settle runs the
reconciler), ``accept`` and ``unblock``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.recovery import hand_merged
from tests.conftest import git

AGENT_EDIT = [
    {"init": True},
    {"write": {"path": "README.md", "content": "the agent's readme\n"}},
    {"commit": "agent edit"},
    {"result": "edited"},
]
LEAVES_CONFLICT = [{"init": True}, {"result": "I did not resolve it"}]


def conflicted(proj: Project, agent: Any, repo: Path, ref: str, *more: list[dict[str, Any]]) -> Path:
    """A task interrupted by a merge-and-fix its agent did not finish; returns its worktree."""
    agent.script(AGENT_EDIT, LEAVES_CONFLICT, *more)
    tasks.create(proj, "Edit the readme", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, ref, actor=Actor.HUMAN)
    assert control.wait(proj, ref, timeout=30).task.status is Status.BLOCKED
    (repo / "README.md").write_text("upstream's readme\n")
    git(repo, "commit", "-q", "-am", "upstream edit")
    turns.unblock(proj, ref, actor=Actor.HUMAN, message="continue")
    result = control.wait(proj, ref, timeout=30)
    assert result.task.status is Status.INTERRUPTED
    assert result.task.resting_cause is not None and result.task.resting_cause.code == hand_merged.CAUSE
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
    assert session is not None and session.worktree
    worktree = Path(session.worktree)
    assert git(worktree, "diff", "--name-only", "--diff-filter=U") == "README.md"
    return worktree


def status_of(corral: Any, ref: str) -> dict[str, Any]:
    doc: dict[str, Any] = corral.json("show", ref)
    return doc


def test_a_conflict_resolved_and_committed_by_hand_is_blocked_and_accepted(proj, agent, repo, corral):
    worktree = conflicted(proj, agent, repo, "by-hand")
    # still conflicted: the reconciler leaves it interrupted, and accept is refused
    assert status_of(corral, "by-hand")["task"]["status"] == "interrupted"
    refused = corral("accept", "by-hand")
    assert refused.returncode != 0 and "interrupted" in refused.stderr
    (worktree / "README.md").write_text("both readmes, merged by the person\n")
    git(worktree, "add", "README.md")
    # resolved but not committed: still interrupted, and doctor's answer says what is missing
    assert status_of(corral, "by-hand")["task"]["status"] == "interrupted"
    with proj.store.read() as tx:
        task = tx.task_by_ref("by-hand")
    pending = hand_merged.settle(proj, task)
    assert not pending.moved and pending.why_not is not None and "not committed" in pending.why_not
    git(worktree, "commit", "-q", "--no-edit")

    shown = status_of(corral, "by-hand")
    assert shown["task"]["status"] == "blocked"
    last = shown["status_changes"][-1]
    assert (last["from"], last["to"], last["actor"], last["reason"]) == (
        "interrupted",
        "blocked",
        "system",
        hand_merged.REASON,
    )
    assert shown["resting_cause"] is None  # the failed merge no longer explains why it rests

    accepted = corral("accept", "by-hand", "--json")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert git(repo, "show", "main:README.md") == "both readmes, merged by the person"
    assert status_of(corral, "by-hand")["task"]["status"] == "complete"


def test_after_the_hand_resolution_unblock_runs_the_agent_as_for_any_blocked_task(proj, agent, repo, corral):
    again = [{"init": True}, {"say_prompt": True}, {"result": "went on from the person's merge"}]
    worktree = conflicted(proj, agent, repo, "go-on", again)
    (worktree / "README.md").write_text("resolved\n")
    git(worktree, "commit", "-q", "-am", "resolve the merge by hand")
    assert status_of(corral, "go-on")["task"]["status"] == "blocked"
    corral.ok("unblock", "go-on", "-m", "carry on", "--wait")
    shown = status_of(corral, "go-on")
    assert shown["task"]["status"] == "blocked"
    assert shown["turns"][-1]["content"].endswith("went on from the person's merge")
    assert len(agent.calls()) == 3


def test_an_aborted_merge_or_a_moved_target_keeps_it_interrupted_with_the_reason(proj, agent, repo, corral):
    worktree = conflicted(proj, agent, repo, "aborted")
    git(worktree, "merge", "--abort")
    assert status_of(corral, "aborted")["task"]["status"] == "interrupted"
    with proj.store.read() as tx:
        task = tx.task_by_ref("aborted")
    answer = hand_merged.settle(proj, task)
    assert not answer.moved and answer.why_not is not None and "does not contain main's tip" in answer.why_not

    # merged and committed, but the target moved on meanwhile: the merge must take in its new tip too
    git(worktree, "merge", "-q", "-X", "ours", "--no-edit", "main")
    (repo / "later.txt").write_text("a later commit on main\n")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-q", "-m", "later")
    assert status_of(corral, "aborted")["task"]["status"] == "interrupted"
    git(worktree, "merge", "-q", "--no-edit", "main")
    assert status_of(corral, "aborted")["task"]["status"] == "blocked"


def test_a_task_interrupted_by_anything_else_is_never_taken(proj, corral):
    tasks.create(proj, "Crashed", actor=Actor.HUMAN, ref="crashed")
    with proj.store.read() as tx:
        task = tx.task_by_ref("crashed")
    answer = hand_merged.settle(proj, task)
    assert answer == hand_merged.Settled(False, "crashed is backlog, not interrupted")
    assert hand_merged.sweep(proj) == 0
    assert status_of(corral, "crashed")["task"]["status"] == "backlog"
