"""Auto-resume, the circuit breaker and feedback redelivery: seed 002 §4–§9, end to end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.read.projection import show
from tests.conftest import git
from tests.recovery.conftest import check_invariants
from tests.turns.conftest import ok

CRASH = [{"init": True}, {"kill": "KILL"}]
SLOW_CRASH = [{"init": True}, {"sleep": 1.5}, {"kill": "KILL"}]


@pytest.fixture
def consecutive_proj(monkeypatch, request):  # type: ignore[no-untyped-def]
    """``rproj`` with the same-cause breaker off, set before the project reads its settings.

    These tests crash the same way again and again to test what the breaker of consecutive
    interruptions (``breaker_threshold``) and redelivery do over several crashes; with the
    same-cause breaker on (tests/recovery/test_breaker_same_cause.py) the second would stop them.
    """
    monkeypatch.setenv("CORRAL_BREAKER_SAME_CAUSE", "0")
    return request.getfixturevalue("rproj")


def blocked(proj, agent, *invocations):
    agent.script(ok("first"), *invocations)
    task = tasks.create(proj, "Recover me", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    return task


def upstream_commit(repo: Path, name="upstream.txt") -> None:
    (repo / name).write_text("from main\n")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"upstream {name}")


def worktree(proj, task) -> Path:
    with proj.store.read() as tx:
        return Path(tx.get_session(tx.get_task(task.id).session_id).worktree)


def test_scenario_a_crash_before_any_edit_resumes_clean_with_merge_and_feedback(rproj, agent, repo):
    task = blocked(rproj, agent, SLOW_CRASH, [{"init": True}, {"result": "resumed fine"}])
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="Fix the flaky test")
    time.sleep(0.5)
    upstream_commit(repo, "late.txt")  # lands while the doomed turn runs
    result = control.wait(rproj, task.ref, timeout=30)
    assert result.task.status is Status.BLOCKED
    calls = agent.calls()
    assert len(calls) == 3
    assert calls[2]["prompt"] == prompts.resume_after_crash(False, ["Fix the flaky test"])
    assert (
        calls[2]["argv"][calls[2]["argv"].index("--resume") + 1]
        == calls[1]["argv"][calls[1]["argv"].index("--resume") + 1]
    )
    assert (worktree(rproj, task) / "late.txt").exists()  # the resume merged upstream on the clean path
    with rproj.store.read() as tx:
        history = tx.turns(task.id)
        session = tx.get_session(tx.get_task(task.id).session_id)
    auto = [t for t in history if t.kind == "auto-resume" and t.role is Role.HUMAN]
    assert len(auto) == 1 and auto[0].actor is Actor.SYSTEM and auto[0].role is Role.HUMAN
    assert auto[0].content == "[system] Session interrupted and auto-resumed"
    assert auto[0].feedback_delivery is FeedbackDelivery.NONE
    assert session.auto_resumed and session.consecutive_interruptions == 0
    feedback = next(t for t in history if t.kind == "unblock")
    assert feedback.feedback_delivery is FeedbackDelivery.CONSUMED
    check_invariants(rproj, agent, ["Fix the flaky test"])


def test_scenario_b_crash_mid_edit_resumes_dirty_without_merging(rproj, agent, repo):
    task = blocked(
        rproj,
        agent,
        [{"init": True}, {"write": {"path": "half.py", "content": "def f(:\n"}}, {"sleep": 1.5}, {"kill": "KILL"}],
        ok("cleaned up"),
    )
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="Add f()")
    time.sleep(0.5)
    upstream_commit(repo, "late.txt")
    result = control.wait(rproj, task.ref, timeout=30)
    assert result.task.status is Status.BLOCKED
    third = agent.calls()[2]
    assert third["prompt"] == prompts.resume_after_crash(True, ["Add f()"])
    assert not (worktree(rproj, task) / "late.txt").exists()  # a dirty worktree is never merged into
    assert (worktree(rproj, task) / "half.py").read_text() == "def f(:\n"
    check_invariants(rproj, agent, ["Add f()"])


def test_scenario_c_crash_after_a_commit_keeps_the_commit_and_records_it_next_turn(rproj, agent, repo):
    task = blocked(
        rproj,
        agent,
        [
            {"init": True},
            {"write": {"path": "done.py", "content": "x = 1\n"}},
            {"commit": "the crashed turn's commit"},
            {"kill": "KILL"},
        ],
        ok("verified"),
    )
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="Add x")
    result = control.wait(rproj, task.ref, timeout=30)
    assert result.task.status is Status.BLOCKED
    assert agent.calls()[2]["prompt"] == prompts.resume_after_crash(False, ["Add x"])
    crashed_commit = git(repo, "rev-list", "-n1", "--grep=the crashed turn's commit", f"corral/{task.ref}")
    with rproj.store.read() as tx:
        last = [t for t in tx.turns(task.id) if t.role is Role.AGENT][-1]
    assert crashed_commit in last.details["commits"]
    check_invariants(rproj, agent, ["Add x"])


def test_scenario_d_a_failed_merge_and_fix_is_never_auto_resumed(rproj, agent, repo):
    agent.script(
        [{"init": True}, {"write": {"path": "README.md", "content": "agent\n"}}, {"commit": "edit"}, {"result": "ok"}],
        [{"init": True}, {"result": "I left the conflict"}],
        ok("should not run"),
    )
    task = tasks.create(rproj, "Conflict", actor=Actor.HUMAN)
    turns.start(rproj, task.ref, actor=Actor.HUMAN)
    control.wait(rproj, task.ref, timeout=30)
    (repo / "README.md").write_text("main\n")
    git(repo, "commit", "-q", "-am", "main edit")
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="go on")
    result = control.wait(rproj, task.ref, timeout=30)
    for _ in range(3):
        result = control.wait(rproj, task.ref, timeout=5)
    assert result.task.status is Status.INTERRUPTED
    assert result.task.resting_cause.code == "merge-and-fix-failed"
    assert len(agent.calls()) == 2
    check_invariants(rproj, agent, ["go on"])


def test_breaker_stops_exactly_at_the_third_consecutive_crash(consecutive_proj, agent):
    task = blocked(consecutive_proj, agent, CRASH, CRASH, CRASH, ok("never"))
    turns.unblock(consecutive_proj, task.ref, actor=Actor.HUMAN, message="try")
    result = control.wait(consecutive_proj, task.ref, timeout=30)
    for _ in range(3):  # further reconciles do not resume it again
        result = control.wait(consecutive_proj, task.ref, timeout=5)
    assert result.task.status is Status.INTERRUPTED
    assert len(agent.calls()) == 4  # the first turn, then crash, auto-resume crash, auto-resume crash
    with consecutive_proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
        doc = show(tx, result.task, breaker_threshold=3)
    assert session.consecutive_interruptions == 3
    assert "circuit breaker" in doc["stopped_because"]
    assert doc["next"] == f"Look at what failed (corral logs {task.ref}), then: corral resume {task.ref}"
    # A person resuming resets the counter, and the feedback is still redelivered verbatim.
    turns.resume(consecutive_proj, task.ref, actor=Actor.HUMAN)
    done = control.wait(consecutive_proj, task.ref, timeout=30)
    assert done.task.status is Status.BLOCKED
    assert agent.calls()[4]["prompt"] == prompts.resume_after_crash(False, ["try"])
    check_invariants(consecutive_proj, agent, ["try"])


def test_a_completed_turn_in_between_resets_the_breaker(consecutive_proj, agent):
    task = blocked(consecutive_proj, agent, CRASH, CRASH, ok("recovered"), CRASH, CRASH, CRASH)
    turns.unblock(consecutive_proj, task.ref, actor=Actor.HUMAN, message="one")
    assert control.wait(consecutive_proj, task.ref, timeout=30).task.status is Status.BLOCKED  # crash, crash, ok
    turns.unblock(consecutive_proj, task.ref, actor=Actor.HUMAN, message="two")
    result = control.wait(consecutive_proj, task.ref, timeout=30)
    for _ in range(2):
        result = control.wait(consecutive_proj, task.ref, timeout=5)
    assert result.task.status is Status.INTERRUPTED
    assert len(agent.calls()) == 7  # 1 + (crash, crash, ok) + (crash, crash, crash)
    check_invariants(consecutive_proj, agent, ["one", "two"])


def test_the_resume_turn_carries_no_feedback_so_a_crash_during_it_redelivers_again(consecutive_proj, agent):
    task = blocked(consecutive_proj, agent, CRASH, CRASH, ok("third time lucky"))
    turns.unblock(consecutive_proj, task.ref, actor=Actor.HUMAN, message="keep me")
    assert control.wait(consecutive_proj, task.ref, timeout=30).task.status is Status.BLOCKED
    calls = agent.calls()
    assert calls[2]["prompt"] == calls[3]["prompt"] == prompts.resume_after_crash(False, ["keep me"])


def test_older_pending_feedback_is_counted_on_resume(rproj, agent):
    task = blocked(rproj, agent, [{"init": True}, {"sleep": 60}], CRASH, ok("done"))
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="older")
    time.sleep(0.3)
    control.stop(rproj, task.ref, actor=Actor.HUMAN)
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="newest")
    assert control.wait(rproj, task.ref, timeout=30).task.status is Status.BLOCKED
    calls = agent.calls()
    assert calls[2]["prompt"] == prompts.compose(prompts.feedback_block(["older", "newest"]), None)
    assert calls[3]["prompt"] == prompts.resume_after_crash(False, ["older", "newest"])
    assert "1 older message" in calls[3]["prompt"]
