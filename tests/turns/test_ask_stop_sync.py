"""ask is status-neutral, stop leaves feedback pending, sync merges in the CLI."""

from __future__ import annotations

import os
import signal
import time

import pytest

from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.operations import sync as syncing
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.errors import RefusedError
from tests.conftest import git
from tests.turns.conftest import ok


def blocked_task(proj, agent, *more):
    agent.script(ok("first"), *more)
    task = tasks.create(proj, "Something to ask about", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    return task


def wait_answer(proj, started, timeout=30):
    answer = control.wait_answer(proj, started, timeout=timeout)
    assert answer is not None, "no answer"
    return answer


def test_ask_answers_read_only_and_restores_the_status(proj, agent):
    task = blocked_task(proj, agent, ok("Because the API said so."))
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="Why 30 s?")
    answer = wait_answer(proj, started)
    assert answer.content == "Because the API said so."
    call = agent.calls()[1]
    assert call["prompt"] == prompts.ask("Why 30 s?")
    argv = call["argv"]
    assert argv[argv.index("--permission-mode") + 1] == "plan"
    assert "Bash" in argv[argv.index("--disallowedTools") + 1]
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
        history = tx.turns(task.id)
        changes = [(c.from_status, c.to_status) for c in tx.status_changes(task.id)]
    assert after.status is Status.BLOCKED and after.resting_cause is None
    question = next(t for t in history if t.kind == "ask" and t.role is Role.HUMAN)
    assert question.actor is Actor.HUMAN and question.feedback_delivery is FeedbackDelivery.NONE
    assert changes[-2:] == [(Status.BLOCKED, Status.WORKING), (Status.WORKING, Status.BLOCKED)]


def test_ask_consumes_no_pending_feedback(proj, agent):
    task = blocked_task(proj, agent, [{"init": True}, {"sleep": 60}], ok("an answer"))
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="pending feedback")
    time.sleep(0.3)
    assert control.stop(proj, task.ref, actor=Actor.HUMAN).status is Status.BLOCKED
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="What now?")
    assert wait_answer(proj, started).content == "an answer"
    with proj.store.read() as tx:
        pending = tx.pending_feedback(tx.get_task(task.id).session_id)
    assert [t.content for t in pending] == ["pending feedback"]


def test_ask_restores_the_status_when_the_agent_errors(proj, agent):
    task = blocked_task(
        proj,
        agent,
        [{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}],
    )
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="Still there?")
    answer = wait_answer(proj, started)
    assert answer.kind == "error"
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.BLOCKED
    assert after.resting_cause is None  # the failed ask's evidence is on its turn


def test_ask_restores_the_status_when_the_agent_crashes(proj, agent):
    task = blocked_task(proj, agent, [{"init": True}, {"kill": "KILL"}])
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="Crash please")
    answer = wait_answer(proj, started)
    assert answer.kind == "error"
    with proj.store.read() as tx:
        assert tx.get_task(task.id).status is Status.BLOCKED


def test_ask_restores_the_status_when_its_supervisor_dies(proj, agent):
    task = blocked_task(proj, agent, [{"init": True}, {"sleep": 30}])
    started = turns.ask(proj, task.ref, actor=Actor.HUMAN, question="Slow one")
    os.killpg(started.launched.supervisor_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = proto.read_raw(started.launched.protocol_dir / proto.STATUS) or {}
        agent_pid = status.get("agent_pid")
        if isinstance(agent_pid, int) and agent_pid > 0:  # never kill(0): that is our own group
            try:
                os.kill(agent_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        settle(proj)
        with proj.store.read() as tx:
            after = tx.get_task(task.id)
        if after.status is not Status.WORKING:
            break
        time.sleep(0.1)
    assert after.status is Status.BLOCKED
    answer = turns.answer_of(proj, after, started.launched.command_id)
    assert answer is not None and "lost" in answer.content


def test_stop_parks_with_the_actor_and_leaves_the_feedback_pending(proj, agent):
    task = blocked_task(proj, agent, [{"init": True}, {"text": "thinking"}, {"sleep": 60}])
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="go slowly")
    time.sleep(0.5)
    began = time.monotonic()
    stopped = control.stop(proj, task.ref, actor=Actor.HUMAN)
    assert time.monotonic() - began < 10
    assert stopped.status is Status.BLOCKED
    assert stopped.resting_cause.code == "stopped" and stopped.resting_cause.actor is Actor.HUMAN
    with proj.store.read() as tx:
        history = tx.turns(task.id)
        feedback = next(t for t in history if t.kind == "unblock")
    assert feedback.feedback_delivery is FeedbackDelivery.PENDING
    assert history[-1].kind == "stopped" and history[-1].role is Role.AGENT
    pid = agent.calls()[-1]["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert control.wait(proj, task.ref, timeout=1).exit_code == 1  # it rests with a cause


def test_stop_refuses_when_nothing_runs(proj, agent):
    task = blocked_task(proj, agent)
    with pytest.raises(RefusedError):
        control.stop(proj, task.ref, actor=Actor.HUMAN)


def test_sync_merges_upstream_and_keeps_the_status(proj, agent, repo):
    task = blocked_task(proj, agent)
    (repo / "new.txt").write_text("upstream\n")
    git(repo, "add", "new.txt")
    git(repo, "commit", "-q", "-m", "upstream")
    result = syncing.sync(proj, task.ref, actor=Actor.HUMAN)
    assert result.state == "merged" and result.task.status is Status.BLOCKED
    assert git(repo, "merge-base", "--is-ancestor", "main", f"corral/{task.ref}") == ""
    with proj.store.read() as tx:
        last = tx.turns(task.id)[-1]
    assert last.kind == "sync" and last.actor is Actor.HUMAN
    assert syncing.sync(proj, task.ref, actor=Actor.HUMAN).state == "up-to-date"


def test_sync_conflict_is_aborted_and_names_the_files(proj, agent, repo):
    agent.script(
        [
            {"init": True},
            {"write": {"path": "README.md", "content": "agent's\n"}},
            {"commit": "agent edit"},
            {"result": "ok"},
        ]
    )
    task = tasks.create(proj, "Edit the readme", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    control.wait(proj, task.ref, timeout=30)
    (repo / "README.md").write_text("upstream's\n")
    git(repo, "commit", "-q", "-am", "upstream edit")
    before = git(repo, "rev-parse", f"corral/{task.ref}")
    with pytest.raises(syncing.MergeConflict) as caught:
        syncing.sync(proj, task.ref, actor=Actor.HUMAN)
    assert "README.md" in caught.value.message
    assert "unblock" in (caught.value.hint or "")
    assert git(repo, "rev-parse", f"corral/{task.ref}") == before
    with proj.store.read() as tx:
        worktree = tx.get_session(tx.get_task(task.id).session_id).worktree
    assert git(__import__("pathlib").Path(worktree), "status", "--porcelain") == ""


def test_unblock_with_a_conflicting_upstream_runs_merge_and_fix(proj, agent, repo):
    agent.script(
        [
            {"init": True},
            {"write": {"path": "README.md", "content": "agent's\n"}},
            {"commit": "agent edit"},
            {"result": "ok"},
        ],
        [{"init": True}, {"say_prompt": True}, {"result": "I did not resolve it"}],
    )
    task = tasks.create(proj, "Edit the readme", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    control.wait(proj, task.ref, timeout=30)
    (repo / "README.md").write_text("upstream's\n")
    git(repo, "commit", "-q", "-am", "upstream edit")
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="continue")
    result = control.wait(proj, task.ref, timeout=30)
    second = agent.calls()[1]
    outcome = prompts.SyncOutcome("conflict", "main", ("README.md",))
    assert second["prompt"] == prompts.compose(prompts.feedback_block(["continue"]), outcome)
    assert result.task.status is Status.INTERRUPTED
    assert result.task.resting_cause.code == "merge-and-fix-failed"
