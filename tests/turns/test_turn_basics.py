"""Turns through the real supervisor with the fake agent: argv, prompts, receipts, feedback."""

from __future__ import annotations

import json
import subprocess

import pytest

from corral.adapters.harness.base import ARGV_PROMPT_LIMIT
from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery
from corral.domain.sanitize import sanitize_prose
from corral.domain.status import Status
from corral.engine.config import harness_settings
from corral.engine.operations import control, tasks, turns
from corral.engine.read.projection import show
from corral.errors import HarnessNotFound
from tests.conftest import git
from tests.turns.conftest import ok


def new_task(proj, goal="Add a greeting", **kw):
    return tasks.create(proj, goal, actor=Actor.HUMAN, **kw)


def run_start(proj, ref, **kw):
    turns.start(proj, ref, actor=Actor.HUMAN, **kw)
    result = control.wait(proj, ref, timeout=30)
    assert not result.timed_out
    return result


def test_start_delivers_the_first_turn_prompt_and_claude_argv(proj, agent):
    agent.script(ok("All done."))
    task = new_task(proj, prompt="Use greet.py.")
    result = run_start(proj, task.ref, message="Start with the docstring.")
    assert result.task.status is Status.BLOCKED
    assert result.exit_code == 0
    (call,) = agent.calls()
    argv = call["argv"]
    expected_prompt = prompts.first_turn("Add a greeting", "Use greet.py.", "Start with the docstring.")
    assert argv[:2] == ["-p", expected_prompt]
    assert call["prompt"] == expected_prompt
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert "--verbose" in argv
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert "Bash" in argv[argv.index("--allowedTools") + 1].split()
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
        system = prompts.system_text(session.worktree, "corral/" + task.ref)
        assert argv[argv.index("--append-system-prompt") + 1] == system
        assert call["cwd"] == session.worktree
        all_turns = tx.turns(task.id)
    assert [(t.role, t.kind) for t in all_turns] == [(Role.HUMAN, "start"), (Role.AGENT, "start")]
    assert all_turns[0].actor is Actor.HUMAN and all_turns[1].actor is None
    assert all_turns[0].feedback_delivery is FeedbackDelivery.CONSUMED
    assert all_turns[1].content == "All done."


def test_worktree_and_branch_are_made_from_the_target(proj, agent, repo):
    agent.script([{"init": True}, {"write": {"path": "a.txt", "content": "x"}}, {"commit": "add a"}, {"result": "ok"}])
    task = new_task(proj)
    run_start(proj, task.ref)
    base = git(repo, "rev-parse", "main")
    with proj.store.read() as tx:
        session = tx.get_session(tx.get_task(task.id).session_id)
        (agent_turn,) = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    assert session.base_commit == base
    assert session.branch == f"corral/{task.ref}"
    assert git(repo, "rev-parse", f"corral/{task.ref}~1") == base
    assert len(agent_turn.details["commits"]) == 1
    assert agent_turn.details["commits"][0] == git(repo, "rev-parse", f"corral/{task.ref}")
    assert session.git_start_sha == agent_turn.details["commits"][0]


def test_second_turn_resumes_the_session_and_delivers_feedback_with_nul_escaped(proj, agent):
    agent.script(ok("first"), ok("second"))
    task = new_task(proj)
    run_start(proj, task.ref)
    feedback = "Please fix\x00 this \x1b[31m now"
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message=feedback)
    result = control.wait(proj, task.ref, timeout=30)
    assert result.task.status is Status.BLOCKED
    first, second = agent.calls()
    sid = first["argv"]  # the fake agent makes up a session id and reports it in init
    del sid
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
        stored = next(t for t in tx.turns(task.id) if t.kind == "unblock" and t.role is Role.HUMAN)
    assert second["argv"][second["argv"].index("--resume") + 1] == session.harness_session_id
    escaped = sanitize_prose(feedback)
    assert "\\u0000" in escaped and "\x00" not in escaped
    assert stored.content == escaped
    # Upstream had nothing new, so the prompt is the feedback alone, exactly as the prompt module builds it.
    assert second["prompt"] == prompts.compose(prompts.feedback_block([escaped]), None)
    assert stored.feedback_delivery is FeedbackDelivery.CONSUMED


def test_unblock_merges_upstream_first_and_says_so(proj, agent, repo):
    agent.script(ok("first"), [{"init": True}, {"say_prompt": True}, {"result": "second"}])
    task = new_task(proj)
    run_start(proj, task.ref)
    (repo / "upstream.txt").write_text("new on main\n")
    git(repo, "add", "upstream.txt")
    git(repo, "commit", "-q", "-m", "upstream change")
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="carry on")
    control.wait(proj, task.ref, timeout=30)
    second = agent.calls()[1]
    outcome = prompts.SyncOutcome("merged", "main")
    assert second["prompt"] == prompts.compose(prompts.feedback_block(["carry on"]), outcome)
    with proj.store.read() as tx:
        worktree = tx.get_session(tx.get_task(task.id).session_id).worktree
    assert (tmp := (__import__("pathlib").Path(worktree) / "upstream.txt")).read_text() == "new on main\n", tmp


def test_a_prompt_over_96_kib_reaches_the_agent_whole_on_stdin(proj, agent):
    agent.script(ok())
    big = "x" * (ARGV_PROMPT_LIMIT + 1000)
    task = new_task(proj, prompt=big)
    run_start(proj, task.ref)
    (call,) = agent.calls()
    expected = prompts.first_turn("Add a greeting", big)
    assert call["stdin"] == expected
    assert expected not in call["argv"]
    assert call["argv"][0] == "-p" and call["argv"][1].startswith("--")


def test_feedback_is_consumed_only_by_a_turn_that_delivered_it_and_completed(proj, agent):
    agent.script(ok("first"), [{"init": True}, {"kill": "KILL"}], ok("after resume"))
    task = new_task(proj)
    run_start(proj, task.ref)
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="do the thing")
    crashed = control.wait(proj, task.ref, timeout=30)
    assert crashed.task.status is Status.INTERRUPTED
    with proj.store.read() as tx:
        unblock_turn = next(t for t in tx.turns(task.id) if t.kind == "unblock")
    assert unblock_turn.feedback_delivery is FeedbackDelivery.PENDING
    turns.resume(proj, task.ref, actor=Actor.HUMAN)
    done = control.wait(proj, task.ref, timeout=30)
    assert done.task.status is Status.BLOCKED
    third = agent.calls()[2]
    assert third["prompt"] == prompts.resume_after_crash(False, ["do the thing"])
    with proj.store.read() as tx:
        unblock_turn = tx.get_turn(unblock_turn.id)
    assert unblock_turn.feedback_delivery is FeedbackDelivery.CONSUMED


def test_agent_killed_by_sigkill_under_a_living_supervisor_is_interrupted_with_diagnostics(proj, agent):
    agent.script([{"init": True}, {"text": "about to die"}, {"stderr": "boom\n"}, {"kill": "KILL"}])
    task = new_task(proj)
    result = run_start(proj, task.ref)
    assert result.task.status is Status.INTERRUPTED
    assert result.exit_code == 1
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
        error = next(t for t in tx.turns(task.id) if t.role is Role.AGENT)
    assert session.interrupt_exit_code == 137
    assert session.interrupt_reason == "OOM killed or SIGKILL (exit code 137)"
    assert "boom" in (session.interrupt_logs or "")
    assert session.consecutive_interruptions == 1
    assert result.task.resting_cause.code == "turn-crashed"
    assert error.kind == "error" and error.failure.signal == 9
    assert len(agent.calls()) == 1  # a crash is not retried inside the turn


def test_output_log_is_verbatim_and_private(proj, agent):
    lines = [{"init": True}, {"stdout": "not json at all\n"}, {"text": "héllo"}, {"result": "r"}]
    agent.script(lines)
    task = new_task(proj)
    run_start(proj, task.ref)
    log = proj.paths.turn_dir(task.id, 1) / "output.log"
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    raw = log.read_bytes().decode()
    assert "not json at all\n" in raw
    parsed = [json.loads(line) for line in raw.splitlines() if line.startswith("{")]
    assert parsed[0]["type"] == "system" and parsed[-1]["type"] == "result"


def test_harness_missing_from_path_is_refused_before_anything_is_recorded(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", "/nonexistent/claude")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    task = new_task(proj)
    with pytest.raises(HarnessNotFound) as caught:
        turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert caught.value.code == "harness-missing" and caught.value.exit_code == 1
    assert "/nonexistent/claude" in caught.value.message and "npm install" in (caught.value.hint or "")
    with proj.store.read() as tx:
        kept = tx.get_task(task.id)
        assert kept.status is Status.BACKLOG and kept.session_id is None
        assert tx.turns(task.id) == []
    assert agent.calls() == []
    proj.close()


def test_harness_gone_after_starts_check_is_fatal_config_and_blocks(proj, agent, monkeypatch):
    # The program is there when start checks and gone when the supervisor runs it (an uninstall
    # meanwhile): the supervisor classifies the missing program itself.
    checked = turns.check_harness

    def check_then_uninstall(project, task):
        checked(project, task)
        agent.bin.unlink()

    monkeypatch.setattr(turns, "check_harness", check_then_uninstall)
    task = new_task(proj)
    result = run_start(proj, task.ref)
    assert result.task.status is Status.BLOCKED
    assert result.exit_code == 1
    cause = result.task.resting_cause
    assert cause.code == "harness-missing"
    with proj.store.read() as tx:
        (agent_turn,) = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    (attempt,) = agent_turn.attempts
    assert attempt.failure_class == "fatal_config"
    assert attempt.failure.errno == 2
    assert "npm install" in agent_turn.content
    assert agent.calls() == []


def test_invalid_api_key_is_fatal_auth_blocked_without_relaunch(proj, agent):
    agent.script([{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}])
    task = new_task(proj)
    result = run_start(proj, task.ref)
    assert result.task.status is Status.BLOCKED
    assert result.task.resting_cause.code == "harness-not-authenticated"
    assert len(agent.calls()) == 1


def test_post_turn_check_output_is_kept_with_the_turn(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", "echo checking; echo token=sk-abcdefghijklmnopqrstuvwx; exit 3")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    agent.script(ok())
    task = new_task(proj)
    run_start(proj, task.ref)
    with proj.store.read() as tx:
        (agent_turn,) = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    check = agent_turn.details["check"]
    assert check["exit_code"] == 3
    assert "checking" in check["tail"]
    assert "sk-abcdefghijklmnopqrstuvwx" not in check["tail"] and "[redacted]" in check["tail"]
    proj.close()


def test_start_that_cannot_make_its_worktree_leaves_backlog_with_the_reason(proj, agent, repo):
    task = new_task(proj)
    blocker = proj.paths.worktree(task.ref)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the worktree goes")
    import pytest

    from corral.engine.workspace import PrepareFailed

    with pytest.raises(PrepareFailed):
        turns.start(proj, task.ref, actor=Actor.HUMAN)
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
        doc = show(tx, after)
    assert after.status is Status.BACKLOG and after.session_id is None
    assert after.resting_cause.code == "prepare-failed"
    assert doc["stopped_because"]
    branches = subprocess.run(["git", "branch", "--list", "corral/*"], cwd=repo, capture_output=True, text=True)
    assert branches.stdout.strip() == ""
    assert agent.calls() == []


def test_harness_settings_come_from_config(proj):
    assert harness_settings(proj.config)["claude_bin"].endswith("/claude")
