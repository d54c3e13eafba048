"""Bounded time to rest (issue 29): an agent that fails at once, or hangs, comes to rest for a person in
a bounded number of attempts, and every count a person reads is the one the supervisor used.

Each test drives the ``command`` harness (a real process) through real turns with short delays set
the way a person sets them (the environment), and asserts on the supervisor's own records: the
receipt's attempts, the status changes in order, the resting cause.
"""

from __future__ import annotations

import sys
import time

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.explain import SAME_CAUSE_BREAKER
from corral.domain.failures import (
    WATCHDOG_RELAUNCHES,
    Budgets,
    FailureClass,
    Retry,
    Stop,
    attempts_bound,
    decide,
    decide_watchdog_retry,
)
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.operations.auto_resume import maybe_auto_resume
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.supervisor import Supervisor
from tests.turns.conftest import reopen
from tests.turns.test_retry_and_watchdog import prepare


def test_fast_unknown_failures_retry_after_one_and_two_seconds_and_the_third_is_a_crash_loop() -> None:
    assert decide(FailureClass.UNKNOWN, 1, 0.0, recent_durations=[0.2]) == Retry(1.0)
    assert decide(FailureClass.UNKNOWN, 2, 1.2, recent_durations=[0.2, 0.2]) == Retry(2.0)
    assert decide(FailureClass.UNKNOWN, 3, 3.4, recent_durations=[0.2] * 3) == Stop("crash-loop")
    # a slow one takes the unknown ladder, and a fast run counts only from the last slow attempt
    assert decide(FailureClass.UNKNOWN, 1, 0.0, recent_durations=[30.0]) == Retry(15.0)
    assert decide(FailureClass.UNKNOWN, 2, 45.0, recent_durations=[30.0, 0.2]) == Retry(1.0)
    # transient classes keep their ladder however fast they fail
    assert decide(FailureClass.TRANSIENT_OVERLOAD, 3, 0.0, recent_durations=[0.1] * 3) == Retry(20.0)


def test_the_bound_a_person_reads_is_the_one_the_policy_applies() -> None:
    budgets = Budgets()
    assert attempts_bound("unknown", [0.2], budgets) == 3  # the crash-loop detector stops the third
    assert attempts_bound("unknown", [30.0], budgets) == budgets.unknown_attempts
    assert attempts_bound("unknown", [30.0, 0.2], budgets) == 4  # two fast ones still to come after it
    assert attempts_bound("transient_unreachable", [0.1], budgets) == budgets.unreachable_attempts
    assert attempts_bound("transient_overload", [0.1], budgets) is None  # bounded by time
    # a relaunch after a zero-work watchdog kill happens once in a turn
    assert WATCHDOG_RELAUNCHES == 1
    assert decide_watchdog_retry(False, 0) and not decide_watchdog_retry(False, 1)
    assert not decide_watchdog_retry(True, 0)


def test_status_json_says_the_attempts_and_waits_the_supervisor_uses(proj, agent) -> None:
    """ "attempt n of m" while a fast failure is retried: m is the crash-loop detector's, as the wait is."""
    agent.script(default=[{"init": True}, {"stderr": "segfault-ish\n"}, {"exit": 3}])
    _task, protocol_dir, command = prepare(proj)
    seen: list[dict[str, object]] = []

    def sleep(seconds: float) -> bool:
        seen.append((proto.read_raw(protocol_dir / proto.STATUS) or {})["retry"])
        return False

    response = Supervisor(protocol_dir, command, sleep=sleep).run().to_json()
    assert [(r["attempt"], r["attempts"], r["next_delay_ms"]) for r in seen] == [(1, 3, 1000), (2, 3, 2000)]
    assert response["error"]["kind"] == "crash_loop" and response["failure_attempts"] == 3
    proj.close()


def command_project(proj, monkeypatch, command: str, **settings: str):  # type: ignore[no-untyped-def]
    """The ``command`` harness with short waits (the fast steps are never longer than the unknown ladder's
    first), a quick heartbeat, auto-resume on."""
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", command)
    monkeypatch.setenv("CORRAL_RETRY_DELAY_UNKNOWN", "0.01")
    monkeypatch.setenv("CORRAL_HEARTBEAT_INTERVAL", "0.1")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "1")  # the suite turns it off; here it is what is tested
    for name, value in settings.items():
        monkeypatch.setenv(f"CORRAL_{name.upper()}", value)
    return reopen(proj)


def at_rest(proj, ref: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    """Reconcile (which auto-resumes) until the task is not working and nothing would resume it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        settle(proj)
        with proj.store.read() as tx:
            task = tx.get_task(ref)
        if task.status is not Status.WORKING and not maybe_auto_resume(proj, task.id):
            return task
        time.sleep(0.1)
    raise AssertionError(f"{ref} was not at rest within {timeout} s")


def agent_turns(proj, task_id: str):  # type: ignore[no-untyped-def]
    with proj.store.read() as tx:
        return [t for t in tx.turns(task_id) if t.role is Role.AGENT], tx.status_changes(task_id)


def test_an_agent_that_exits_1_at_once_is_a_crash_loop_resumed_once_then_stopped_by_the_same_cause(
    proj, monkeypatch
) -> None:
    proj = command_project(proj, monkeypatch, "sh -c 'echo broken >&2; exit 1'")
    task = tasks.create(proj, "Fail at once", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    rested = at_rest(proj, task.id)
    assert rested.status is Status.INTERRUPTED
    assert rested.resting_cause.code == "crash-loop"
    assert rested.resting_cause.details[SAME_CAUSE_BREAKER] == {"run": 2, "code": "crash-loop", "exit_code": 1}
    agent, changes = agent_turns(proj, task.id)
    # two turns (the start, one auto-resume), each ended by the crash-loop detector at its third fast failure
    assert len(agent) == 2
    for turn in agent:
        assert [a.failure_class for a in turn.attempts] == ["unknown"] * 3
        assert [a.number for a in turn.attempts] == [1, 2, 3]
    assert [(c.to_status, c.actor) for c in changes] == [
        (Status.BACKLOG, Actor.HUMAN),
        (Status.WORKING, Actor.HUMAN),
        (Status.INTERRUPTED, Actor.SYSTEM),
        (Status.WORKING, Actor.SYSTEM),
        (Status.INTERRUPTED, Actor.SYSTEM),
    ]
    with proj.store.read() as tx:
        session = tx.get_session(rested.session_id)
    assert session.consecutive_interruptions == 2
    proj.close()


@pytest.mark.slow
def test_a_hung_agent_is_relaunched_once_then_rests_without_auto_resume(proj, monkeypatch) -> None:
    proj = command_project(
        proj, monkeypatch, f"{sys.executable} -c 'import time; time.sleep(600)'", watchdog_timeout="1", term_grace="0.2"
    )
    task = tasks.create(proj, "Hang", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    rested = at_rest(proj, task.id)
    assert rested.status is Status.INTERRUPTED
    assert rested.resting_cause.code == "watchdog-no-progress"
    assert rested.resting_cause.evidence.details["relaunches"] == 1
    agent, changes = agent_turns(proj, task.id)
    assert len(agent) == 1  # never auto-resumed
    assert [a.failure.code for a in agent[0].attempts] == ["watchdog-no-progress"] * 2
    assert [c.to_status for c in changes] == [Status.BACKLOG, Status.WORKING, Status.INTERRUPTED]
    with proj.store.read() as tx:
        session = tx.get_session(rested.session_id)
    assert "relaunched it 1 time " in session.interrupt_reason
    proj.close()
