"""corral never signals a process it does not own: a pid recorded in ``status.json`` or the store
that another process holds now survives every launch, reap, stop and sweep.

A pid cannot be made to wrap on demand, so each test writes the protocol file a dead supervisor
would have left, naming a live decoy (a ``sleep`` in a session of its own, so a signal to its
group would reach it) as the supervisor and the agent, with the dead process's start time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from corral.adapters.pid_identity import Identity, start_ticks, stop_identified
from corral.adapters.process import pid_alive
from corral.domain.actors import Actor
from corral.domain.clock import rfc3339
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.recovery.reconcile import sweep_terminal
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn, signal_daemon, supervisor_alive, supervisor_lost
from tests.turns.conftest import ok


@pytest.fixture
def decoy() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def plant(proj: Any, task_id: str, pid: int, *, command_id: str = "dead-command", with_start: bool = True) -> None:
    """The status.json of a supervisor that died, its pid (and agent pid) held by ``pid`` now."""
    start = start_ticks(pid)
    assert start is not None
    record = proto.SupervisorStatus(
        command_id=command_id,
        pid=pid,
        pid_start=start - 7 if with_start else None,  # the dead supervisor started earlier
        agent_pid=pid,
        agent_start=start - 5 if with_start else None,
        phase="work",
        heartbeat_mono=time.monotonic(),
        heartbeat_at=rfc3339(proj.clock()),
    )
    directory = proj.paths.protocol_dir(task_id)
    directory.mkdir(parents=True, exist_ok=True)
    proto.write(directory, record)


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(pid):
        assert time.monotonic() < deadline, f"{pid} did not die"
        time.sleep(0.02)


def survives(decoy: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.1)  # a SIGTERM sent would have landed by now
    return decoy.poll() is None and pid_alive(decoy.pid)


@pytest.mark.parametrize("with_start", [True, False], ids=["start-time", "older-file-tag-only"])
def test_reap_turn_leaves_a_process_that_took_the_pid(proj, decoy, with_start):
    task = tasks.create(proj, "Decoy under reap", actor=Actor.HUMAN)
    plant(proj, task.id, decoy.pid, with_start=with_start)
    assert reap_turn(proj, task.id, grace=0.2) == []
    assert survives(decoy)
    status = proto.read_record(proj.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    assert status is not None
    if with_start:
        assert supervisor_lost(status) == f"its pid {decoy.pid} now names another process"
        assert not supervisor_alive(status)


def test_the_identity_check_does_stop_the_process_it_names(decoy):
    """The control: what the other tests rely on the check to refuse, it grants to the real process."""
    assert not stop_identified(Identity(decoy.pid, start=(start_ticks(decoy.pid) or 0) + 1), 0.2)
    assert not stop_identified(Identity(decoy.pid), 0.2)  # nothing proved: never signalled
    assert survives(decoy)
    assert stop_identified(Identity(decoy.pid, start=start_ticks(decoy.pid)), 0.2)
    assert decoy.wait(timeout=5) == -signal.SIGTERM


def test_start_and_unblock_launch_without_signalling_the_decoy(proj, agent, decoy):
    agent.script(ok("first"), ok("second"))
    task = tasks.create(proj, "Decoy under launch", actor=Actor.HUMAN)
    plant(proj, task.id, decoy.pid)
    turns.start(proj, task.ref, actor=Actor.HUMAN)  # reaps "the previous command" first
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    assert survives(decoy)
    with proj.store.read() as tx:
        running = tx.current_command(task.id)
    plant(proj, task.id, decoy.pid, command_id=running.command_id if running else "dead-command")
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="carry on")
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    assert survives(decoy)
    assert len(agent.calls()) == 2


def test_stop_and_the_reconciler_leave_the_decoy(proj, agent, decoy):
    """The supervisor and the agent really die; their pids are "reused" by the decoy."""
    agent.script([{"init": True}, {"sleep": 60}])
    task = tasks.create(proj, "Decoy under stop", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    protocol_dir = proj.paths.protocol_dir(task.id)
    deadline = time.monotonic() + 20
    while not (proto.read_raw(protocol_dir / proto.STATUS) or {}).get("agent_pid"):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    assert status is not None and status.agent_pid is not None
    kill9(status.pid)  # a crash: no receipt
    kill9(status.agent_pid)
    plant(proj, task.id, decoy.pid, command_id=status.command_id)
    assert control.request_stop(proj, task, Actor.HUMAN) is False  # no live supervisor of its own to ask
    assert survives(decoy)
    stopped = control.stop(proj, task.ref, actor=Actor.HUMAN)
    assert stopped.status is not Status.WORKING
    assert survives(decoy)
    settle(proj)
    assert survives(decoy)


def test_the_reconciler_finds_a_reused_pid_lost_and_leaves_it(proj, agent, decoy):
    agent.script([{"init": True}, {"sleep": 60}])
    task = tasks.create(proj, "Decoy under reconcile", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    protocol_dir = proj.paths.protocol_dir(task.id)
    deadline = time.monotonic() + 20
    while not (proto.read_raw(protocol_dir / proto.STATUS) or {}).get("agent_pid"):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    assert status is not None and status.agent_pid is not None
    agent_pid = status.agent_pid
    kill9(status.pid)  # the supervisor crashes, leaving its agent
    plant(proj, task.id, decoy.pid, command_id=status.command_id)
    settle(proj)
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after is not None and after.status is Status.INTERRUPTED
    assert after.resting_cause is not None and after.resting_cause.evidence is not None
    assert "now names another process" in after.resting_cause.evidence.details["reason"]
    assert survives(decoy)
    assert not pid_alive(agent_pid)  # the real agent carried the command's tag: it was reaped


def test_the_terminal_sweep_leaves_a_registered_pid_another_process_holds(proj, decoy):
    from corral.engine.project import Project

    task = tasks.create(proj, "Decoy under the terminal sweep", actor=Actor.HUMAN)
    tasks.abandon(proj, task.ref, reason="done with it", actor=Actor.HUMAN, how="close")
    plant(proj, task.id, decoy.pid)
    earlier = Project.open(proj.repo, clock=lambda: time_ago(60))
    try:
        with earlier.store.write() as tx:
            # Registered a minute before the decoy started, for a command the decoy is not tagged with.
            tx.register_process(task.id, "supervisor", decoy.pid, "dead-command")
            tx.register_process(task.id, "pair", decoy.pid)
    finally:
        earlier.close()
    sweep_terminal(proj)
    assert survives(decoy)
    with proj.store.read() as tx:
        assert tx.processes(task.id) == []


def test_the_daemon_stop_signals_only_a_daemon_started_before_its_state_was_written(decoy):
    before = rfc3339(time_ago(60))
    assert signal_daemon(decoy.pid, before, signal.SIGTERM) is False
    assert signal_daemon(decoy.pid, None, signal.SIGTERM) is False
    assert survives(decoy)
    assert signal_daemon(decoy.pid, rfc3339(time_ago(-5)), signal.SIGTERM) is True
    assert decoy.wait(timeout=5) == -signal.SIGTERM


def time_ago(seconds: float) -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC) - timedelta(seconds=seconds)


def test_a_status_file_of_an_older_supervisor_still_reads(tmp_path):
    doc = {"protocol_version": 2, "command_id": "c", "pid": 123, "phase": "work", "heartbeat_at": None}
    (tmp_path / proto.STATUS).write_text(json.dumps(doc))
    status = proto.read_record(tmp_path / proto.STATUS, proto.SupervisorStatus)
    assert status is not None and status.pid_start is None and status.heartbeat_mono is None
