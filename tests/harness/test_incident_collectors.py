"""Recorded real logs of Claude Code, Codex and Pi replayed through each adapter's incident facts.

The Codex and Pi logs were recorded for the adapter tests (tests/fixtures/codex, tests/fixtures/pi).
The Claude Code logs (tests/fixtures/claude) were recorded with the pinned CLI (2.1.332) against
the scripted model server (tests/support/model_server.py), at the CLI's own retry settings:

- ``bash_retry_recovered``: the same Bash command fails twice (exit 1) and passes on the third run;
- ``bash_thrice_failed``: the same Bash command fails three times, then ``true`` exits 0 and the
  assistant says the tests pass;
- ``api_retry_recovered``: a 529, the CLI's own ``api_retry``, then an answer;
- ``killed_mid_tool``: SIGKILLed while a Bash call ran (its ``tool_use`` has no result).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from corral.adapters.harness import make_harness
from corral.domain.incidents import Category, FailureState, Incident, Label, reduce
from corral.engine.runtime.attempts import AttemptRun
from corral.engine.runtime.journal import Journal
from corral.engine.runtime.journal_scan import Cursors, scan
from corral.engine.runtime.observer import TurnObserver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def replay(harness: str, name: str) -> FailureState:
    log = FIXTURES / harness / f"{name}.jsonl"
    return reduce(FailureState(), scan(log, make_harness(harness, {}), "/wt", Cursors(None), final=True))


def only(state: FailureState) -> Incident:
    (incident,) = state.incidents.values()
    return incident


# -- Claude Code ---------------------------------------------------------------------------------------


def test_claude_a_bash_command_failing_twice_then_passing_on_an_exact_retry_is_recovered():
    state = replay("claude", "bash_retry_recovered")
    incident = only(state)
    assert (incident.label, incident.failures, incident.category) == (Label.RECOVERED, 2, "tool")
    assert incident.summary == "Bash failed: Exit code 1 run 2 FAILED"
    assert incident.closed_by == "recovered:toolu_000000000000000000000007"
    assert state.needs_action == []


def test_claude_the_same_bash_command_failing_three_times_requires_action_whatever_follows():
    # ``true`` exiting 0 afterwards and the assistant saying the tests pass clear nothing.
    state = replay("claude", "bash_thrice_failed")
    incident = only(state)
    assert (incident.label, incident.failures) == (Label.ACTION_REQUIRED, 3)
    assert incident.summary == "Bash failed: Exit code 1 FAILED tests/test_x.py::test_y"
    assert incident.evidence is not None and incident.evidence.startswith("bash_thrice_failed.jsonl#byte=")
    offset = int(incident.evidence.rsplit("=", 1)[1])
    line = (FIXTURES / "claude" / "bash_thrice_failed.jsonl").read_bytes()[offset:].split(b"\n", 1)[0]
    assert b'"is_error":true' in line and b'"tool_result"' in line  # the evidence points at the last failure
    assert state.needs_action == [incident]


def test_claude_a_model_call_the_cli_retried_is_recovered_by_its_next_answer():
    incident = only(replay("claude", "api_retry_recovered"))
    assert (incident.label, incident.category) == (Label.RECOVERED, Category.MODEL.value)
    assert incident.summary == "Claude Code's model call failed: HTTP 529 overloaded"  # not the CLI's own plan


def test_claude_a_kill_mid_tool_is_recorded_from_what_corral_saw_not_from_the_log(tmp_path):
    # The log holds a tool_use with no result: no failure in it. The kill is the supervisor's
    # observation, an exit by a signal corral did not send: it needs someone.
    assert replay("claude", "killed_mid_tool").incidents == {}
    log_dir = tmp_path / "turns" / "1"
    log_dir.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude" / "killed_mid_tool.jsonl", log_dir / "output.log")
    observer = TurnObserver(tmp_path / "session", log_dir, make_harness("claude", {}), "/wt", 1, [])
    observer.attempt(AttemptRun(number=1, started_at=datetime.now(UTC), signal=9))
    observer.scan(final=True)
    incident = only(Journal(tmp_path / "session").read())
    assert (incident.label, incident.category) == (Label.ACTION_REQUIRED, Category.EXIT.value)
    assert incident.summary == "the agent was killed by signal 9 (last: attempt 1 of turn 1)"
    assert incident.id == "exit:signal-9"  # one incident per cause, counted, whatever the attempt


def test_the_observer_masks_the_turns_secrets_and_points_evidence_at_the_turns_log(tmp_path):
    log_dir = tmp_path / "turns" / "4"
    log_dir.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude" / "bash_thrice_failed.jsonl", log_dir / "output.log")
    observer = TurnObserver(tmp_path / "session", log_dir, make_harness("claude", {}), "/wt", 4, ["test_x.py"])
    observer.scan(final=True)
    incident = only(Journal(tmp_path / "session").read())
    assert "test_x.py" not in incident.summary
    assert incident.evidence is not None and incident.evidence.startswith("turns/4/output.log#byte=")
    assert "test_x.py" not in (tmp_path / "session" / "failures.jsonl").read_text()


def test_claude_a_session_whose_watchdog_ended_an_attempt_requires_action(tmp_path):
    log_dir = tmp_path / "turns" / "2"
    log_dir.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude" / "bash_retry_recovered.jsonl", log_dir / "output.log")
    observer = TurnObserver(tmp_path / "session", log_dir, make_harness("claude", {}), "/wt", 2, [])
    observer.attempt(AttemptRun(number=1, started_at=datetime.now(UTC), signal=9, watchdog=True, we_signalled=True))
    state = Journal(tmp_path / "session").read()
    assert sorted((i.category, i.label.value) for i in state.incidents.values()) == [
        (Category.SUPERVISION.value, Label.ACTION_REQUIRED.value),
        ("tool", Label.RECOVERED.value),
    ]
    (watchdog,) = state.needs_action
    assert watchdog.summary == "the no-progress watchdog killed the agent (last: attempt 1 of turn 2)"
    observer.attempt(AttemptRun(number=2, started_at=datetime.now(UTC), signal=9, watchdog=True, we_signalled=True))
    (again,) = Journal(tmp_path / "session").read().needs_action
    assert (again.id, again.failures) == ("supervision:watchdog", 2)  # a second kill counts, no new row
    assert again.summary == "the no-progress watchdog killed the agent (last: attempt 2 of turn 2)"


# -- Codex --------------------------------------------------------------------------------------------


def test_codex_a_failed_command_is_an_unclassified_tool_error_an_agent_message_does_not_clear():
    incident = only(replay("codex", "command_error"))
    assert (incident.label, incident.category) == (Label.UNCLASSIFIED, "tool")
    assert incident.summary == "shell failed: exit 3: oops"


def test_codex_a_reconnect_followed_by_an_answer_is_a_recovered_model_call():
    incident = only(replay("codex", "reconnect_recovered"))
    assert (incident.label, incident.category) == (Label.RECOVERED, Category.MODEL.value)
    assert incident.summary.startswith("Reconnecting... 1/2")


@pytest.mark.parametrize("name", ["error_401", "error_429", "error_500", "error_503", "error_quota", "response_failed"])
def test_codex_a_failed_turn_is_a_model_failure_that_requires_action(name):
    state = replay("codex", name)
    incident = only(state)
    assert (incident.label, incident.category) == (Label.ACTION_REQUIRED, Category.MODEL.value)
    assert state.needs_action == [incident]
    # Codex tells one failed call twice (``error``, then ``turn.failed``): one failure, not ×2.
    assert incident.failures == 1


def test_codex_a_turn_failed_with_no_error_before_it_is_still_a_model_failure(tmp_path):
    lines = [
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "turn.failed", "error": {"message": "unexpected status 500"}},
    ]
    log = tmp_path / "output.log"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = reduce(FailureState(), scan(log, make_harness("codex", {}), "/wt", Cursors(None), final=True))
    incident = only(state)
    assert (incident.label, incident.summary, incident.failures) == (Label.ACTION_REQUIRED, "unexpected status 500", 1)


@pytest.mark.parametrize("name", ["exec_command_turn", "resume_first", "resume_second"])
def test_codex_a_clean_turn_has_no_incidents(name):
    assert replay("codex", name).incidents == {}


def test_codex_a_reconnect_in_each_of_two_turns_of_a_session_leaves_nothing_needing_action(tmp_path):
    # One session's journal and cursors across two turns, each with its own output.log. Codex's
    # first lines have the same length in every run, so both reconnects are at the same byte.
    session = tmp_path / "session"
    codex = make_harness("codex", {})
    journal = Journal(session)
    for sequence in (1, 2):
        log = tmp_path / "turns" / str(sequence) / "output.log"
        log.parent.mkdir(parents=True)
        shutil.copy(FIXTURES / "codex" / "reconnect_recovered.jsonl", log)
        cursors = Cursors(session)
        journal.append(scan(log, codex, "/wt", cursors, final=True, evidence_of=f"turns/{sequence}/output.log"))
        cursors.save()
    state = Journal(session).read()
    assert [i.label.value for i in state.incidents.values()] == [Label.RECOVERED.value] * 2
    assert state.needs_action == []


# -- Pi -----------------------------------------------------------------------------------------------


def test_pi_a_bash_tool_error_is_an_unclassified_tool_error():
    incident = only(replay("pi", "bash_tool_error"))
    assert (incident.label, incident.category) == (Label.UNCLASSIFIED, "tool")
    assert incident.summary == "bash failed: oops Command exited with code 3"


@pytest.mark.parametrize("name", ["error_401", "error_500", "error_529"])
def test_pi_a_model_error_its_retries_did_not_clear_requires_action(name):
    state = replay("pi", name)
    incident = only(state)
    assert (incident.label, incident.category) == (Label.ACTION_REQUIRED, Category.MODEL.value)
    assert incident.summary.startswith(name.removeprefix("error_") + " ")
    # one failure per failed model call (its message_end); auto_retry_end's finalError restates the last
    failed_calls = sum(
        1
        for line in (FIXTURES / "pi" / f"{name}.jsonl").read_text().splitlines()
        if (event := json.loads(line)).get("type") == "message_end" and event["message"].get("stopReason") == "error"
    )
    assert incident.failures == failed_calls


@pytest.mark.parametrize("name", ["bash_tool_turn", "resumed_turn"])
def test_pi_a_clean_turn_has_no_incidents(name):
    assert replay("pi", name).incidents == {}


def test_every_harness_log_replayed_twice_through_one_cursor_adds_nothing_the_second_time():
    for harness, names in {"claude": ["bash_thrice_failed"], "codex": ["error_500"], "pi": ["error_529"]}.items():
        for name in names:
            cursors = Cursors(None)
            log = FIXTURES / harness / f"{name}.jsonl"
            assert scan(log, make_harness(harness, {}), "/wt", cursors, final=True)
            assert scan(log, make_harness(harness, {}), "/wt", cursors, final=True) == []
