"""A supervisor whose pid is alive but whose heartbeat is stale is lost, not working for ever.

The supervisor is really frozen (SIGSTOP): it can no longer beat, so its last beat in
``status.json`` only ages. The test ages it past the bound by rewriting that beat (what the
frozen process would otherwise leave behind after the bound's seconds), then reconciles.
"""

from __future__ import annotations

import os
import signal
import time

from msgspec.structs import replace

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor
from corral.domain.delays import Delays
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import supervisor_alive


def running_status(proj, task_id: str) -> proto.SupervisorStatus:
    path = proj.paths.protocol_dir(task_id) / proto.STATUS
    deadline = time.monotonic() + 20
    while True:
        status = proto.read_record(path, proto.SupervisorStatus)
        if status is not None and status.agent_pid is not None:
            return status
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)


def test_a_frozen_supervisor_is_lost_and_stopped_with_its_agent(proj, agent):
    agent.script([{"init": True}, {"sleep": 120}])
    task = tasks.create(proj, "Frozen supervisor", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    status = running_status(proj, task.id)
    assert status.pid_start is not None and status.heartbeat_mono is not None
    os.kill(status.pid, signal.SIGSTOP)
    try:
        settle(proj)  # frozen, but its last beat is fresh: still working
        with proj.store.read() as tx:
            assert tx.get_task(task.id).status is Status.WORKING
        frozen = proto.read_record(proj.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
        assert frozen is not None
        aged = replace(frozen, heartbeat_mono=time.monotonic() - Delays().stale_heartbeat - 5)
        assert not supervisor_alive(aged) and pid_alive(status.pid)
        proto.write(proj.paths.protocol_dir(task.id), aged)
        settle(proj)
    finally:
        if pid_alive(status.pid):
            os.kill(status.pid, signal.SIGCONT)
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.INTERRUPTED
    evidence = after.resting_cause.evidence
    assert evidence.code == "turn-lost"
    assert "heartbeat is stale" in evidence.details["reason"]
    assert not pid_alive(status.pid), "the frozen supervisor was left behind"
    assert not pid_alive(status.agent_pid), "its agent works on"


def test_the_stale_bound_is_ten_heartbeats_of_the_persons_settings(proj, agent, monkeypatch):
    """With ``heartbeat_interval`` set short in the person's settings the supervisor beats that often,
    and the reconciler, reading the same settings, takes ten missed beats for a frozen supervisor:
    the frozen one really ages past the bound, nothing rewritten."""
    from tests.turns.conftest import reopen

    monkeypatch.setenv("CORRAL_HEARTBEAT_INTERVAL", "0.2")
    proj = reopen(proj)
    agent.script([{"init": True}, {"sleep": 120}])
    task = tasks.create(proj, "Frozen with short beats", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    status = running_status(proj, task.id)
    path = proj.paths.protocol_dir(task.id) / proto.STATUS
    command = proto.read_record(proj.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    assert command is not None and command.delays.heartbeat_interval == 0.2
    beats = set()
    deadline = time.monotonic() + 10
    while len(beats) < 3:  # the supervisor beats every 0.2 s: three beats come in well under a second
        found = proto.read_record(path, proto.SupervisorStatus)
        if found is not None and found.heartbeat_mono is not None:
            beats.add(found.heartbeat_mono)
        assert time.monotonic() < deadline, "the supervisor did not beat at its short interval"
        time.sleep(0.05)
    os.kill(status.pid, signal.SIGSTOP)
    try:
        frozen = proto.read_record(path, proto.SupervisorStatus)
        assert frozen is not None and frozen.heartbeat_mono is not None
        while time.monotonic() - frozen.heartbeat_mono <= Delays(heartbeat_interval=0.2).stale_heartbeat + 0.2:
            time.sleep(0.1)
        assert supervisor_alive(frozen), "the default bound (20 s) still takes it for alive"
        settle(proj)
    finally:
        if pid_alive(status.pid):
            os.kill(status.pid, signal.SIGCONT)
    with proj.store.read() as tx:
        after = tx.get_task(task.id)
    assert after.status is Status.INTERRUPTED
    assert after.resting_cause.evidence.code == "turn-lost"
    assert "heartbeat is stale" in after.resting_cause.evidence.details["reason"]
    assert "the bound is 2 s" in after.resting_cause.evidence.details["reason"]
    assert not pid_alive(status.pid) and not pid_alive(status.agent_pid)
    proj.close()
