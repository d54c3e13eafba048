"""One end-to-end scenario per tailored case (seed 004 item 7), each from a real cause.

Each test makes the failure happen for real — a program missing from PATH, a hang past the
watchdog, a SIGKILL, a bad ``response.json`` planted while the supervisor is dead, a merge the
agent leaves conflicted, a worktree that cannot be made, a turn whose supervisor vanished, a
fault injected into corral's own operation — lets corral record it, and reads it back as a
person does: ``corral show`` (the "Stopped because:" and "Next:" lines, the reason on the
failed timeline entry), ``corral show --details`` (the Failure section) and ``--json``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import msgspec
import pytest

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.explain import MAY_HAVE_CHANGED, UNKNOWN_REASON
from corral.domain.status import Status
from corral.engine.operations import control, launch, turns
from corral.engine.operations.auto_resume import resumable
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.errors import HarnessNotFound
from tests.conftest import git
from tests.failures.conftest import (
    kill_supervisor,
    line_after,
    live_supervisor,
    new_task,
    reopen,
    run_start,
    show_json,
    show_text,
    wait_for,
)

#: show's count of interruptions in a row, beside the reason (until the breaker trips)
IN_A_ROW = " (interrupted 1 time in a row)"


def agent_turns(proj, task):
    with proj.store.read() as tx:
        return [t for t in tx.turns(task.id) if t.role is Role.AGENT]


def failed_entry(text: str, exchange: int) -> str:
    """The timeline line of the agent's answer in turn ``exchange`` (with any indented attempt lines after it):
    the timeline numbers exchanges, a message and its answer being one turn."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if f"turn {exchange} · " in line and " · agent" in line:
            block = [line]
            for more in lines[i + 1 :]:
                if more.startswith("    ") and "turn " not in more and "→" not in more:
                    block.append(more)
                else:
                    break
            return "\n".join(block)
    raise AssertionError(f"no turn {exchange} in:\n{text}")


def no_codes_on_everyday_lines(text: str, *codes: str) -> None:
    everyday = line_after(text, "Stopped because:") + line_after(text, "Next:")
    for code in codes:
        assert code not in everyday, (code, everyday)


def the_diagnostic(proj, failure_json):
    ref = failure_json["diagnostic"]
    assert ref, failure_json
    path = proj.paths.diagnostics / ref
    assert failure_json["diagnostic_path"] == str(path) and failure_json["diagnostic_status"] == "kept"
    return json.loads(path.read_text())


# -- a harness that couldn't start ----------------------------------------------------------------


def nothing_launched(proj, agent, task) -> None:
    """The task is as it was before the refused start: backlog, no session, no turn, no agent run."""
    with proj.store.read() as tx:
        kept = tx.get_task(task.id)
        assert kept.status is Status.BACKLOG and kept.session_id is None and kept.resting_cause is None
        assert tx.turns(task.id) == [] and tx.sessions(task.id) == []
    assert agent.calls() == []


def test_a_harness_missing_from_path_is_refused_at_start_before_anything_runs(fproj, agent, corral, monkeypatch):
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", "claude-not-on-this-path")
    proj = reopen(fproj)
    task = new_task(proj)  # create takes it: the program may be installed before the start
    refused = corral("start", task.ref)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert refused.stderr.splitlines()[:2] == [
        "error: Claude Code (claude-not-on-this-path) is not installed or not on PATH.",
        "hint: Install Claude Code: npm install -g @anthropic-ai/claude-code (or set claude_bin).",
    ]
    assert "working" not in refused.stdout
    as_json = corral("start", task.ref, "--json")
    assert as_json.returncode == 1
    error = as_json.json()["error"]
    assert error["code"] == "harness-missing" and "claude-not-on-this-path" in error["message"]
    assert "npm install -g @anthropic-ai/claude-code" in error["hint"]
    with pytest.raises(HarnessNotFound) as caught:  # the engine's start, as every surface calls it
        turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert caught.value.exit_code == 1 and caught.value.code == "harness-missing"
    nothing_launched(proj, agent, task)
    text = show_text(corral, task.ref)
    assert "Stopped because:" not in text and "harness-missing" not in text
    (row,) = corral.ok("list").stdout.splitlines()
    assert row.startswith(task.ref) and "backlog" in row and "couldn't start" not in row
    proj.close()


def test_a_harness_gone_between_the_check_and_the_launch_is_fatal_config_on_the_attempt(
    fproj, agent, corral, monkeypatch
):
    # start's check finds the program; it is uninstalled before the supervisor runs it. The
    # supervisor's own classification of a missing program stands behind the check.
    checked = turns.check_harness

    def check_then_uninstall(project, task):
        checked(project, task)
        agent.bin.unlink()

    monkeypatch.setattr(turns, "check_harness", check_then_uninstall)
    task = new_task(fproj)
    done = run_start(fproj, task)
    assert not agent.bin.exists()
    assert done.status is Status.BLOCKED and done.resting_cause.code == "harness-missing"
    assert agent.calls() == []

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because == "Claude Code couldn't start: its program was not found."  # nothing ran: no "may have changed"
    assert line_after(text, "Next:").startswith("Install it")
    assert f"corral unblock {task.ref}" in line_after(text, "Next:")
    assert "turn 1 · error · agent — Claude Code couldn't start: its program was not found." in text
    no_codes_on_everyday_lines(text, "harness-missing", "fatal_config", "errno")
    (row,) = corral.ok("list").stdout.splitlines()
    assert row.startswith(task.ref) and "— Claude Code couldn't start" in row  # list: a short reason

    details = show_text(corral, task.ref, "--details")
    assert "code              harness-missing" in details
    assert "category          fatal_config" in details
    assert "possible effects  none" in details
    assert "native code       errno 2 (ENOENT)" in details
    assert "diagnostics" in line_after(details.split("Failure (turn 1")[1], "  diagnostic")

    doc = show_json(corral, task.ref)
    cause = doc["resting_cause"]
    assert cause["code"] == "harness-missing"
    evidence = cause["evidence"]
    assert evidence["native"] == {"exit_code": None, "errno": 2, "signal": None}
    assert evidence["details"]["executable"] == str(agent.bin)
    (turn,) = [t for t in doc["turns"] if t["role"] == "agent"]
    assert turn["failure"]["code"] == "harness-missing" and turn["reason"] == because
    (attempt,) = turn["attempts"]
    assert attempt["failure"]["native"]["errno"] == 2 and attempt["summary"] is None
    diag = the_diagnostic(fproj, turn["failure"])
    assert diag["cause"]["code"] == "harness-missing" and diag["attempts"][0]["native"] == {"errno": 2}


def test_a_harness_corral_does_not_know_is_refused_at_create_edit_and_start(fproj, agent, corral):
    created = corral("create", "Add a greeting", "--harness", "no-such-harness")
    assert created.returncode == 2, (created.stdout, created.stderr)  # a usage error: the name is wrong
    assert created.stderr.splitlines()[:2] == [
        "error: 'no-such-harness' is not a harness corral knows.",
        "hint: Use one of: claude, pi, codex, command.",
    ]
    with fproj.store.read() as tx:
        assert tx.tasks() == []
    task = new_task(fproj)
    edited = corral("edit", task.ref, "--harness", "no-such-harness", "--json")
    assert edited.returncode == 2 and edited.json()["error"]["code"] == "usage"
    # A task recorded with a harness this corral does not know (written by a newer corral, say).
    with fproj.store.write() as tx:
        tx.update_task(task.id, harness="no-such-harness")
    started = corral("start", task.ref, "--json")
    assert started.returncode == 2, started.stdout
    error = started.json()["error"]
    assert "'no-such-harness' is not a harness corral knows" in error["message"]
    assert error["hint"] == "Use one of: claude, pi, codex, command."
    nothing_launched(fproj, agent, task)


def test_a_command_naming_a_harness_the_supervisor_does_not_know_is_a_refusal_recorded_on_the_attempt(
    fproj, agent, corral, monkeypatch
):
    # The supervisor reads the harness from command.json; one it does not know (a command written
    # by another corral version) is refused there too, as the turn's one failed attempt.
    built = launch.build_command

    def from_another_version(*args, **kw):
        return msgspec.structs.replace(built(*args, **kw), harness="no-such-harness")

    monkeypatch.setattr(launch, "build_command", from_another_version)
    task = new_task(fproj)
    done = run_start(fproj, task)
    assert done.status is Status.BLOCKED and done.resting_cause.code == "harness-unknown"
    assert agent.calls() == []
    (turn,) = agent_turns(fproj, task)
    (attempt,) = turn.attempts
    assert attempt.failure.code == "harness-unknown" and attempt.failure.possible_effects.value == "none"
    text = show_text(corral, task.ref)
    assert (
        line_after(text, "Stopped because:") == "The task's harness is not one corral knows, so no agent could start."
    )
    assert f"corral edit {task.ref} --harness" in line_after(text, "Next:")


# -- a harness that timed out (the watchdog) --------------------------------------------------------


def test_a_harness_that_hangs_past_its_timeout_is_stopped_by_the_watchdog(fproj, agent, corral, monkeypatch):
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "1")
    proj = reopen(fproj)
    agent.script(
        [{"init": True}, {"write": {"path": "half.txt", "content": "half"}}, {"stderr": "still thinking\n"},
         {"keepalive": 60}]
    )  # fmt: skip
    task = new_task(proj)
    done = run_start(proj, task)
    assert done.status is Status.INTERRUPTED and done.resting_cause.code == "watchdog-no-progress"

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because == f"Claude Code made no progress for 1 s, so the watchdog stopped it. {MAY_HAVE_CHANGED}{IN_A_ROW}"
    assert line_after(text, "Next:") == f"Look at its output (corral logs {task.ref}), then: corral resume {task.ref}"
    assert f"— {because.removesuffix(IN_A_ROW)}" in failed_entry(text, 1)

    details = show_text(corral, task.ref, "--details")
    assert "code              watchdog-no-progress" in details
    assert "possible effects  partial" in details  # it wrote half.txt
    assert "signal 15 (SIGTERM)" in details

    doc = show_json(corral, task.ref)
    evidence = doc["resting_cause"]["evidence"]
    assert evidence["details"]["timeout_seconds"] == 1  # the bound
    assert evidence["native"]["signal"] == 15
    diag = the_diagnostic(proj, evidence)
    assert "still thinking" in diag["output"]["stderr_tail"]  # the output tail
    assert diag["retry"]["watchdog_timeout_seconds"] == 1
    proj.close()


# -- a harness that was killed -------------------------------------------------------------------------


def test_an_agent_killed_by_sigkill(fproj, agent, corral):
    agent.script(
        [{"init": True}, {"text": "editing"}, {"write": {"path": "a.txt", "content": "x"}}, {"stderr": "boom\n"},
         {"kill": "KILL"}]
    )  # fmt: skip
    task = new_task(fproj)
    done = run_start(fproj, task)
    assert done.status is Status.INTERRUPTED and done.resting_cause.code == "turn-crashed"

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because == (
        f"Claude Code stopped unexpectedly (OOM killed or SIGKILL (exit code 137)). {MAY_HAVE_CHANGED}{IN_A_ROW}"
    )
    assert line_after(text, "Next:") == f"corral resume {task.ref} — or look first: corral logs {task.ref}"
    assert f"turn 1 · error · agent — {because.removesuffix(IN_A_ROW)}" in text

    details = show_text(corral, task.ref, "--details")
    assert "native code       exit code 137, signal 9 (SIGKILL)" in details

    doc = show_json(corral, task.ref)
    assert doc["resting_cause"]["evidence"]["native"] == {"exit_code": 137, "errno": None, "signal": 9}
    assert doc["session"]["interrupt"]["exit_code"] == 137 and "boom" in doc["session"]["interrupt"]["logs"]
    diag = the_diagnostic(fproj, doc["resting_cause"]["evidence"])
    assert {"kind": "assistant_text", "text": "editing"} in diag["output"]["partial_output"]
    assert "boom" in diag["output"]["stderr_tail"]


# -- a receipt that is missing, invalid or too large ---------------------------------------------------


def plant(path: Path, how: str) -> None:
    if how == "symlink":
        target = path.parent / "elsewhere.json"
        target.write_text(json.dumps({"status": "completed"}))
        path.symlink_to(target)
    elif how == "too-large":
        with path.open("wb") as fh:
            fh.truncate(proto.MAX_BYTES + 1)
    elif how == "invalid-utf8":
        path.write_bytes(b'{"status": "completed", "result": "\xff\xfe"}')
    elif how == "blank":
        path.write_text("  \n\n")
    else:
        raise AssertionError(how)


UNKNOWN_RESULT = "so its result is unknown."
RECEIPT_CASES = {
    "symlink": ("receipt-invalid", f"The turn's receipt was invalid (it was a symbolic link), {UNKNOWN_RESULT}"),
    "too-large": (
        "receipt-too-large",
        f"The turn's receipt was too large to read, {UNKNOWN_RESULT}",
    ),
    "invalid-utf8": ("receipt-invalid", f"The turn's receipt was invalid (it was not valid UTF-8), {UNKNOWN_RESULT}"),
    "blank": ("receipt-invalid", f"The turn's receipt was invalid (it was blank), {UNKNOWN_RESULT}"),
}


@pytest.mark.parametrize("how", list(RECEIPT_CASES))
def test_a_receipt_that_cannot_be_used(fproj, agent, corral, how):
    agent.script([{"init": True}, {"text": "working slowly"}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    kill_supervisor(fproj, task)
    response = fproj.paths.protocol_dir(task.id) / proto.RESPONSE
    plant(response, how)
    settle(fproj)

    code, line = RECEIPT_CASES[how]
    with fproj.store.read() as tx:
        rested = tx.get_task(task.id)
    assert rested.status is Status.INTERRUPTED and rested.resting_cause.code == code
    assert not response.exists() and not response.is_symlink()  # filed away with its turn, not deleted
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:") == f"{line} {MAY_HAVE_CHANGED}{IN_A_ROW}"
    assert line_after(text, "Next:") == f"Look at its output (corral logs {task.ref}), then: corral resume {task.ref}"
    assert f"turn 1 · error · agent — {line}" in text
    no_codes_on_everyday_lines(text, code, "receipt_problem", "response.json")

    doc = show_json(corral, task.ref)
    evidence = doc["resting_cause"]["evidence"]
    assert evidence["code"] == code and evidence["phase"] == "response"
    assert evidence["details"]["receipt"] == "response.json" and evidence["details"]["problem"] == how
    diag = the_diagnostic(fproj, evidence)
    assert diag["receipt"]["problem"] == how
    assert diag["receipt"]["size"] is not None
    assert "\xff" not in json.dumps(diag)  # the receipt's content never enters


def test_a_receipt_that_went_missing_after_the_supervisor_finished(fproj, agent, corral):
    agent.script([{"init": True}, {"result": "done"}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    protocol_dir = fproj.paths.protocol_dir(task.id)
    response = protocol_dir / proto.RESPONSE

    def finished():
        status = proto.read_raw(protocol_dir / proto.STATUS) or {}
        return status.get("phase") == "done" and response.exists()

    wait_for(finished, 20, "the supervisor to finish")
    response.unlink()  # the receipt vanished before any reconciler read it
    time.sleep(0.2)
    settle(fproj)
    with fproj.store.read() as tx:
        rested = tx.get_task(task.id)
    assert rested.status is Status.INTERRUPTED and rested.resting_cause.code == "receipt-missing"
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:").startswith("The turn's receipt is missing")


# -- a turn lost after a crash -------------------------------------------------------------------------


def test_a_turn_lost_when_its_supervisor_dies_names_the_unknown_half(fproj, agent, corral):
    agent.script([{"init": True}, {"text": "step one done"}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    log = fproj.paths.turn_dir(task.id, 1) / "output.log"
    wait_for(lambda: log.exists() and "step one done" in log.read_text(), 20, "the agent's first step")
    kill_supervisor(fproj, task)
    settle(fproj)
    with fproj.store.read() as tx:
        rested = tx.get_task(task.id)
    assert rested.status is Status.INTERRUPTED and rested.resting_cause.code == "turn-lost"

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because.startswith(
        "The turn was lost: corral's supervisor ended without a receipt while the agent was working"
    )
    assert "whether the agent finished" in because and "is unknown" in because
    assert because.endswith(MAY_HAVE_CHANGED + IN_A_ROW)
    assert line_after(text, "Next:") == f"corral resume {task.ref} (pending feedback is delivered again)"
    assert (
        # The loss is the answer to the turn it ended: one exchange, the number its incident says.
        f"turn 1 · error · agent — {because.removesuffix(IN_A_ROW)}" in text
    )  # the lost turn is on the timeline with its reason

    doc = show_json(corral, task.ref)
    evidence = doc["resting_cause"]["evidence"]
    assert evidence["code"] == "turn-lost" and evidence["phase"] == "work"
    diag = the_diagnostic(fproj, evidence)
    observed = diag["last_observation"]
    assert observed["phase"] == "work" and observed["heartbeat_at"] and isinstance(observed["agent_pid"], int)
    assert {"kind": "assistant_text", "text": "step one done"} in diag["output"]["partial_output"]
    # The lost turn does not claim its command: a completed receipt arriving later is still recorded.
    (lost,) = agent_turns(fproj, task)
    assert lost.command_id is None and lost.details["lost_command"]


# -- an exhausted retry budget, and "Attempt 1 of 3 failed: … · retrying" -------------------------------


def test_retried_attempts_read_attempt_n_of_m_retrying(fproj, agent, corral):
    from tests.turns.conftest import ok
    from tests.turns.test_retry_and_watchdog import VirtualTime, overloaded, run_virtual

    agent.script(overloaded(), overloaded(), ok("finally"))
    task, _response, (_turn,) = run_virtual(fproj, VirtualTime(), goal="Retry me")
    assert task.status is Status.BLOCKED and task.resting_cause is None
    text = show_text(corral, task.ref)
    entry = failed_entry(text, 1)
    assert "Attempt 1 of 3 failed: Claude Code was overloaded or rate-limited. · retrying" in entry
    assert "Attempt 2 of 3 failed: Claude Code was overloaded or rate-limited. · retrying" in entry
    assert "Stopped because:" not in text  # it rests without a cause
    doc = show_json(corral, task.ref)
    summaries = [a["summary"] for a in doc["turns"][-1]["attempts"]]
    assert summaries[2] is None and summaries[0].startswith("Attempt 1 of 3 failed")
    # the retry evidence lives in the diagnostic
    ref = doc["turns"][-1]["attempts"][0]["failure"]["diagnostic"]
    diag = json.loads((fproj.paths.diagnostics / ref).read_text())
    assert diag["kind"] == "retried-attempts" and [a["outcome"] for a in diag["attempts"]] == [
        "failed",
        "failed",
        "succeeded",
    ]


def test_an_exhausted_retry_budget(fproj, agent, corral, monkeypatch):
    from tests.turns.test_retry_and_watchdog import VirtualTime, overloaded, run_virtual

    monkeypatch.setenv("CORRAL_BUDGET_OVERLOAD", "20")
    proj = reopen(fproj)
    agent.script(default=overloaded())
    task, _response, (_turn,) = run_virtual(proj, VirtualTime(), goal="Keep failing")
    assert task.status is Status.BLOCKED and task.resting_cause.code == "retry-budget-exhausted"
    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because.startswith("Claude Code kept failing and corral's retry budget ran out (API Error: 529")
    assert line_after(text, "Next:") == f"When the service is healthy again: corral unblock {task.ref} -m 'continue'"
    entry = failed_entry(text, 1)
    assert "Attempt 1 of 3 failed: Claude Code was overloaded or rate-limited. · retrying" in entry
    assert entry.rstrip().endswith("Attempt 3 of 3 failed: Claude Code was overloaded or rate-limited.")
    proj.close()


# -- a stop decided by a gate ---------------------------------------------------------------------------


def test_a_stop_by_a_person(fproj, agent, corral):
    agent.script([{"init": True}, {"text": "long job"}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    live_supervisor(fproj, task)
    control.stop(fproj, task.ref, actor=Actor.HUMAN)
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:") == "The turn was stopped by you."
    assert line_after(text, "Next:").startswith(f"corral unblock {task.ref}")


def test_the_circuit_breaker(fproj, agent, corral, monkeypatch):
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "1")
    # Identical crashes would trip the same-cause breaker at the second (its own test is
    # tests/recovery/test_breaker_same_cause.py); this one is the breaker of consecutive interruptions.
    monkeypatch.setenv("CORRAL_BREAKER_SAME_CAUSE", "0")
    proj = reopen(fproj)
    crash = [{"init": True}, {"kill": "KILL"}]
    agent.script(crash, crash, crash, default=crash)
    task = new_task(proj)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        result = control.wait(proj, task.ref, timeout=5)
        with proj.store.read() as tx:
            session = tx.get_session(result.task.session_id)
        if result.task.status is Status.INTERRUPTED and session.consecutive_interruptions >= 3:
            break
    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert "the circuit breaker" in because and "3 times in a row" in because
    assert line_after(text, "Next:") == f"Look at what failed (corral logs {task.ref}), then: corral resume {task.ref}"
    proj.close()


# -- a merge conflict the agent could not resolve --------------------------------------------------------


def test_a_failed_merge_and_fix(fproj, agent, corral, repo):
    agent.script(
        [{"init": True}, {"write": {"path": "README.md", "content": "agent's\n"}}, {"commit": "agent edit"},
         {"result": "ok"}],
        [{"init": True}, {"result": "I did not resolve it"}],
    )  # fmt: skip
    task = new_task(fproj, "Edit the readme")
    run_start(fproj, task)
    (repo / "README.md").write_text("upstream's\n")
    git(repo, "commit", "-q", "-am", "upstream edit")
    turns.unblock(fproj, task.ref, actor=Actor.HUMAN, message="continue")
    done = control.wait(fproj, task.ref, timeout=30).task
    assert done.status is Status.INTERRUPTED and done.resting_cause.code == "merge-and-fix-failed"
    assert not resumable(fproj, task.id)  # never auto-resumed

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because == (
        f"Merging the target into the task's branch conflicted, and the agent could not resolve it. {MAY_HAVE_CHANGED}"
        f"{IN_A_ROW}"
    )
    assert (
        line_after(text, "Next:")
        == f"Resolve it in the worktree, or: corral unblock {task.ref} -m 'resolve the merge conflict'"
    )
    assert f"— {because.removesuffix(IN_A_ROW)}" in text
    doc = show_json(corral, task.ref)
    evidence = doc["resting_cause"]["evidence"]
    assert evidence["phase"] == "merge_and_fix" and "README.md" in evidence["details"]["reason"]


# -- a prepare failure ------------------------------------------------------------------------------------


def test_a_worktree_that_cannot_be_created(fproj, agent, corral, repo):
    task = new_task(fproj)
    blocker = fproj.paths.worktree(task.ref)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the worktree goes")
    result = corral("start", task.ref)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.BACKLOG and after.resting_cause.code == "prepare-failed"

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert because.startswith("corral could not prepare the task's branch or worktree: Something already exists at")
    assert MAY_HAVE_CHANGED not in because
    assert line_after(text, "Next:") == f"Fix that, then: corral start {task.ref}"
    doc = show_json(corral, task.ref)
    assert doc["resting_cause"]["evidence"]["code"] == "prepare-failed"
    assert doc["resting_cause"]["evidence"]["possible_effects"] == "none"
    assert agent.calls() == []


# -- an internal fault (an execution fault) ----------------------------------------------------------------


def test_an_exception_inside_an_operation_after_working_rests_the_task_with_internal_fault(
    fproj, agent, corral, monkeypatch
):
    def broken(*_a, **_k):
        raise RuntimeError("injected fault while building the command")

    monkeypatch.setattr(launch, "build_command", broken)
    task = new_task(fproj)
    with pytest.raises(launch.LaunchFailed):
        turns.start(fproj, task.ref, actor=Actor.HUMAN)
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
        changes = tx.status_changes(task.id)
    # Not left working with no owner: interrupted with the cause, and never auto-resumed.
    assert after.status is Status.INTERRUPTED and after.resting_cause.code == "internal-fault"
    assert [c.to_status for c in changes][-2:] == [Status.WORKING, Status.INTERRUPTED]
    assert not resumable(fproj, task.id)
    assert agent.calls() == []

    text = show_text(corral, task.ref)
    because = line_after(text, "Stopped because:")
    assert (
        because == "corral hit an internal fault while running the task "
        "(RuntimeError: injected fault while building the command)."
    )
    assert "report it" in line_after(text, "Next:")
    doc = show_json(corral, task.ref)
    diag = the_diagnostic(fproj, doc["resting_cause"]["evidence"])
    assert "RuntimeError: injected fault" in diag["stack"] and "build_command" not in diag.get("prompt", "")


def test_a_receipt_that_breaks_corral_while_recording_is_an_internal_fault_not_a_stuck_task(
    fproj, agent, corral, monkeypatch
):
    agent.script([{"init": True}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    kill_supervisor(fproj, task)
    command = proto.read_raw(fproj.paths.protocol_dir(task.id) / proto.COMMAND)
    proto.write_json(
        fproj.paths.protocol_dir(task.id) / proto.RESPONSE,
        {"command_id": command["command_id"], "status": "completed", "kind": "start",
         "attempts": [{"number": 1, "outcome": "succeeded", "started_at": "2025-01-01T00:00:00Z"}]},
    )  # fmt: skip
    from corral.engine.recovery import receipts

    real = receipts._details
    calls: list[int] = []

    def breaks_once(*args, **kwargs):  # corral's own code fails on this receipt (once: the fault is recorded)
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("injected: a receipt field corral mishandles")
        return real(*args, **kwargs)

    monkeypatch.setattr(receipts, "_details", breaks_once)
    settle(fproj)
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.INTERRUPTED and after.resting_cause.code == "internal-fault"
    text = show_text(corral, task.ref)
    assert "corral could not record the turn's receipt" in line_after(text, "Stopped because:")
    settle(fproj)  # and the next pass is quiet


def test_a_receipt_of_the_wrong_shape_is_refused_with_its_cause_and_the_agent_reaped(fproj, agent, corral):
    """Valid JSON whose fields have the wrong types never leaves the task working: the typed
    protocol refuses it as the receipt's own problem, and the turn's agent is stopped."""
    agent.script([{"init": True}, {"sleep": 60}])
    task = new_task(fproj)
    turns.start(fproj, task.ref, actor=Actor.HUMAN)
    sup, agent_pid = live_supervisor(fproj, task)
    os.kill(sup, signal.SIGKILL)  # the supervisor dies; its agent lives on, orphaned
    wait_for(lambda: not pid_alive(sup), 10, "the supervisor to die")
    command = proto.read_raw(fproj.paths.protocol_dir(task.id) / proto.COMMAND)
    proto.write_json(
        fproj.paths.protocol_dir(task.id) / proto.RESPONSE,
        {"command_id": command["command_id"], "status": "completed", "kind": "start",
         "attempts": [{"number": "one", "outcome": "succeeded", "started_at": 12345}]},
    )  # fmt: skip
    settle(fproj)
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.INTERRUPTED and after.resting_cause.code == "receipt-invalid"
    assert after.resting_cause.evidence.details["problem"] == "wrong-shape"
    deadline = time.monotonic() + 10
    while pid_alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(agent_pid)
    assert "wrong shape" in line_after(show_text(corral, task.ref), "Stopped because:")


# -- an old task with no evidence ----------------------------------------------------------------------------


def test_an_unknown_code_reads_unknown_reasons(fproj, corral):
    from corral.domain.records import FailureEvidence, RestingCause

    task = new_task(fproj)
    with fproj.store.write() as tx:
        tx.insert_session(task.id, worktree=None, branch=task.branch, base_commit=None)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        tx.add_turn(
            task.id, role=Role.AGENT, kind="error", content="?", failure=FailureEvidence("future", "x-new-code")
        )
        tx.set_status(
            task.id, Status.INTERRUPTED, Actor.SYSTEM, "?", resting_cause=RestingCause("x-new-code", tx.now())
        )
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:") == UNKNOWN_REASON
    assert f"— {UNKNOWN_REASON}" in text
    assert os.environ.get("CORRAL_HOME")


def test_a_fault_inside_resume_also_rests_the_task_and_is_never_auto_resumed(fproj, agent, corral, monkeypatch):
    agent.script([{"init": True}, {"kill": "KILL"}])
    task = new_task(fproj)
    assert run_start(fproj, task).status is Status.INTERRUPTED

    def broken(*_a, **_k):
        raise OSError("injected: the worktree could not be read")

    # The resume reads the worktree's HEAD (to trust the crashed turn's receipt on clean or dirty): from its files.
    from corral.adapters import tip_files

    monkeypatch.setattr(tip_files, "head_commit", broken)
    with pytest.raises(launch.LaunchFailed):
        turns.resume(fproj, task.ref, actor=Actor.HUMAN)
    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.INTERRUPTED and after.resting_cause.code == "internal-fault"
    assert not resumable(fproj, task.id)
    text = show_text(corral, task.ref)
    assert "internal fault" in line_after(text, "Stopped because:")
    assert "OSError: injected" in line_after(text, "Stopped because:")


def test_a_diagnostic_that_cannot_be_written_never_keeps_the_failure_from_being_recorded(fproj, agent, corral):
    fproj.paths.root.mkdir(parents=True, exist_ok=True)
    fproj.paths.diagnostics.write_text("a file where the diagnostics directory goes")
    agent.script([{"init": True}, {"stderr": "boom\n"}, {"kill": "KILL"}])
    task = new_task(fproj)
    done = run_start(fproj, task)
    assert done.status is Status.INTERRUPTED and done.resting_cause.code == "turn-crashed"
    assert done.resting_cause.evidence.diagnostic is None
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:").startswith("Claude Code stopped unexpectedly")
    assert "diagnostic        -" in show_text(corral, task.ref, "--details")


def test_a_harness_that_exits_without_finishing_again_and_again(fproj, agent, corral):
    from tests.turns.test_retry_and_watchdog import VirtualTime, run_virtual

    agent.script(default=[{"init": True}, {"stderr": "fatal: lost the connection to the editor\n"}, {"exit": 3}])
    task, _response, (_turn,) = run_virtual(fproj, VirtualTime(step=1.0), goal="Exit early")
    assert task.status is Status.INTERRUPTED and task.resting_cause.code == "crash-loop"
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:").startswith(
        "Claude Code failed fast again and again (a crash loop): 3 attempts in a row each failed within 10 s"
    )
    entry = failed_entry(text, 1)
    assert (
        "Attempt 1 of 3 failed: Claude Code exited without finishing its turn: "
        "fatal: lost the connection to the editor · retrying"
    ) in entry
