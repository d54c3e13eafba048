"""Retry ladders in virtual time, the crash-loop detector and the watchdog, with real agent processes."""

from __future__ import annotations

import time

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status
from corral.engine import workspace
from corral.engine.operations import control, launch, tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.supervisor import Supervisor
from tests.turns.conftest import ok, reopen


class VirtualTime:
    """The supervisor's ladder clock and sleep: every read moves time on by ``step`` seconds."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 1000.0
        self.step = step
        self.sleeps: list[float] = []

    def clock(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now += seconds
        return False


def prepare(proj, goal="Retry me"):
    """A task moved to working with its command written, as `start` does, but not launched."""
    task = tasks.create(proj, goal, actor=Actor.HUMAN)
    with proj.store.read() as tx:
        target = workspace.target_branch(tx, task)
    ws = workspace.prepare(proj, task, target)
    with proj.store.write() as tx:
        session = tx.insert_session(task.id, worktree=str(ws.worktree), branch=ws.branch, base_commit=ws.base_commit)
        turn = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=Actor.HUMAN,
            kind="start",
            content=goal,
            session_id=session.id,
            feedback_delivery=FeedbackDelivery.PENDING,
            command_id=new_id(),
        )
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        task = tx.get_task(task.id)
    command = launch.build_command(
        proj, task, session, turn, kind="start", body=goal, delivered=[turn.id], target=target, sync_before_work=False
    )
    protocol_dir = proj.paths.protocol_dir(task.id)
    launch.clear_protocol(protocol_dir)
    proto.write(protocol_dir, command)
    return task, protocol_dir, command


def run_virtual(proj, vt, goal="Retry me"):
    task, protocol_dir, command = prepare(proj, goal)
    response = Supervisor(protocol_dir, command, sleep=vt.sleep, ladder_clock=vt.clock).run().to_json()
    settle(proj)
    with proj.store.read() as tx:
        return tx.get_task(task.id), response, [t for t in tx.turns(task.id) if t.role is Role.AGENT]


def overloaded():
    return [{"init": True}, {"result": "API Error: 529 overloaded", "is_error": True, "status": 529}, {"exit": 1}]


def test_overload_retries_on_the_transient_ladder_then_completes(proj, agent):
    agent.script(overloaded(), overloaded(), overloaded(), ok("finally"))
    vt = VirtualTime()
    task, _response, (turn,) = run_virtual(proj, vt)
    assert vt.sleeps == [5.0, 10.0, 20.0]
    assert task.status is Status.BLOCKED and task.resting_cause is None
    assert [a.outcome.value for a in turn.attempts] == ["failed", "failed", "failed", "succeeded"]
    assert {a.failure_class for a in turn.attempts[:3]} == {"transient_overload"}
    assert turn.attempts[0].failure.code == "harness-overloaded"
    assert turn.content == "finally"


def test_overload_budget_is_wall_time_then_blocked_as_exhausted(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_BUDGET_OVERLOAD", "100")
    proj = reopen(proj)
    agent.script(default=overloaded())
    vt = VirtualTime()
    task, response, (_turn,) = run_virtual(proj, vt)
    # 5 + 10 + 20 + 40 = 75 s; the next 60 s would pass the 100 s budget.
    assert vt.sleeps == [5.0, 10.0, 20.0, 40.0]
    assert response["status"] == "failed" and response["failure_code"] == "retry-budget-exhausted"
    assert response["failure_attempts"] == 5
    assert task.status is Status.BLOCKED
    assert task.resting_cause.code == "retry-budget-exhausted"
    proj.close()


def test_unreachable_stops_after_twelve_attempts(proj, agent):
    refused = [{"init": True}, {"stderr": "connect ECONNREFUSED 127.0.0.1:9\n"}, {"exit": 1}]
    agent.script(default=refused)
    vt = VirtualTime(step=6.0)  # each attempt "lasts" 6 s; unreachable has no crash-loop detector anyway
    task, response, (turn,) = run_virtual(proj, vt)
    assert len(turn.attempts) == 12
    assert vt.sleeps == [5.0, 10.0, 20.0, 40.0] + [60.0] * 7
    assert response["failure_class"] == "transient_unreachable"
    assert task.status is Status.BLOCKED


def test_unknown_ladder_and_budget_when_attempts_are_slow(proj, agent):
    agent.script(default=[{"init": True}, {"stderr": "something odd\n"}, {"exit": 3}])
    vt = VirtualTime(step=11.0)  # slower than the crash-loop bound
    task, response, (turn,) = run_virtual(proj, vt)
    assert vt.sleeps == [15.0, 30.0, 60.0, 60.0, 60.0]
    assert len(turn.attempts) == 6
    assert response["status"] == "failed" and response["failure_code"] == "retry-budget-exhausted"
    assert task.status is Status.BLOCKED


def test_fast_unknown_failures_are_a_crash_loop_and_interrupt(proj, agent):
    agent.script(default=[{"init": True}, {"stderr": "segfault-ish\n"}, {"exit": 3}])
    vt = VirtualTime(step=1.0)
    task, response, (turn,) = run_virtual(proj, vt)
    assert len(turn.attempts) == 3
    assert response["status"] == "error" and response["error"]["kind"] == "crash_loop"
    assert response["failure_class"] == "unknown"
    assert task.status is Status.INTERRUPTED
    assert task.resting_cause.code == "crash-loop"


def test_fatal_auth_stops_at_once(proj, agent):
    agent.script(
        default=[{"init": True}, {"result": "Not logged in · Please run /login", "is_error": True}, {"exit": 1}]
    )
    vt = VirtualTime()
    task, response, (turn,) = run_virtual(proj, vt)
    assert vt.sleeps == [] and len(turn.attempts) == 1
    assert response["failure_class"] == "fatal_auth"
    assert task.status is Status.BLOCKED and task.resting_cause.code == "harness-not-authenticated"


def test_retry_state_is_projected_into_status_json_while_waiting(proj, agent):
    agent.script(overloaded(), ok())
    _task, protocol_dir, command = prepare(proj)
    seen = {}

    def sleep(seconds):
        seen.update(proto.read_raw(protocol_dir / proto.STATUS) or {})
        return False

    Supervisor(protocol_dir, command, sleep=sleep).run()
    assert seen["phase"] == "retrying"
    assert seen["retry"]["failure_class"] == "transient_overload"
    assert seen["retry"]["next_delay_ms"] == 5000
    assert "529" in seen["retry"]["reason"]


# -- the watchdog (real time, small timeouts) ---------------------------------------------


def watchdog_project(proj, monkeypatch, seconds="1"):
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", seconds)
    return reopen(proj)


@pytest.mark.slow
def test_watchdog_kills_an_agent_that_ignores_sigterm_after_work_and_interrupts(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_TERM_GRACE", "1")  # the person's grace between SIGTERM and SIGKILL (5 s by default)
    proj = watchdog_project(proj, monkeypatch)
    agent.script(
        [
            {"init": True},
            {"write": {"path": "half.txt", "content": "partial"}},
            {"ignore_sigterm": True},
            {"keepalive": 60},
        ]
    )
    task = tasks.create(proj, "Hang after writing", actor=Actor.HUMAN)
    began = time.monotonic()
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=40)
    elapsed = time.monotonic() - began
    assert result.task.status is Status.INTERRUPTED
    assert result.task.resting_cause.code == "watchdog-no-progress"
    assert 2.0 <= elapsed < 30  # SIGTERM was ignored, so SIGKILL came after the 1 s watchdog and the 1 s grace
    command = proto.read_record(proj.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    assert command is not None and command.watchdog.term_grace_seconds == 1.0  # the grace it waited is the person's
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
    assert "keep-alives are not progress" in session.interrupt_reason
    assert "did not relaunch" in session.interrupt_reason
    assert len(agent.calls()) == 1
    pid = agent.calls()[0]["pid"]
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)
    proj.close()


@pytest.mark.slow
def test_watchdog_relaunches_a_zero_work_hang_once(proj, agent, monkeypatch):
    proj = watchdog_project(proj, monkeypatch)
    agent.script(default=[{"init": True}, {"keepalive": 30}])
    task = tasks.create(proj, "Hang with no work", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=60)
    assert len(agent.calls()) == 2  # the first launch and one relaunch
    assert result.task.status is Status.INTERRUPTED
    with proj.store.read() as tx:
        session = tx.get_session(result.task.session_id)
        (turn,) = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    assert "relaunched it 1 time " in session.interrupt_reason
    assert [a.failure.code for a in turn.attempts] == ["watchdog-no-progress"] * 2
    proj.close()


def test_watchdog_then_a_healthy_relaunch_completes_the_turn(proj, agent, monkeypatch):
    proj = watchdog_project(proj, monkeypatch)
    agent.script([{"init": True}, {"keepalive": 30}], ok("recovered"))
    task = tasks.create(proj, "Hang once", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=40)
    assert result.task.status is Status.BLOCKED
    assert len(agent.calls()) == 2
    proj.close()


def test_a_long_stream_keeps_a_bounded_event_window_and_still_reads_the_result(proj, agent):
    from corral.engine.runtime.output import EVENTS_KEPT

    agent.script([{"init": True}, *[{"text": f"line {i}"} for i in range(EVENTS_KEPT * 3)], {"result": "the end"}])
    task, protocol_dir, command = prepare(proj)
    sup = Supervisor(protocol_dir, command)
    response = sup.run().to_json()
    assert response["status"] == "completed" and response["result"] == "the end"
    assert len(sup.work.outcome.attempts[0].events) == EVENTS_KEPT
    log = (proj.paths.turn_dir(task.id, 1) / "output.log").read_text()
    assert log.count('"type": "assistant"') == EVENTS_KEPT * 3  # the verbatim log keeps everything
