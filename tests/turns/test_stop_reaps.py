"""``corral stop`` parks the task and leaves none of the stopped command's processes alive."""

from __future__ import annotations

import json
import os
import signal
import time

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.runtime import protocol as proto
from tests.turns.conftest import reopen


def running_status(proj, task_id: str) -> proto.SupervisorStatus:
    path = proj.paths.protocol_dir(task_id) / proto.STATUS
    deadline = time.monotonic() + 20
    while True:
        status = proto.read_record(path, proto.SupervisorStatus)
        if status is not None and status.agent_pid is not None:
            return status
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)


def test_stop_reaps_the_agent_of_a_supervisor_that_does_not_answer(proj, agent, monkeypatch):
    """A supervisor that cannot act on the stop (frozen): stop parks the task after its wait, and
    then the supervisor and its agent are gone too, not left working in the worktree."""
    monkeypatch.setenv("CORRAL_STOP_WAIT", "1")  # the person's setting, read when the project opens
    proj = reopen(proj)
    agent.script([{"init": True}, {"sleep": 120}])
    task = tasks.create(proj, "Stop a frozen turn", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    status = running_status(proj, task.id)
    os.kill(status.pid, signal.SIGSTOP)
    try:
        stopped = control.stop(proj, task.ref, actor=Actor.HUMAN)
    finally:
        if pid_alive(status.pid):
            os.kill(status.pid, signal.SIGCONT)
    assert stopped.status is Status.BLOCKED
    assert not pid_alive(status.agent_pid), "stop parked the task but its agent runs on"
    assert not pid_alive(status.pid)
    proj.close()


def test_stop_reaps_the_agent_when_the_receipt_has_wrong_field_types(proj, agent):
    """The receipt is valid JSON of the wrong shape and its supervisor is dead: the typed protocol
    rejects it, and after the stop no agent process of that command lives."""
    agent.script([{"init": True}, {"sleep": 120}])
    task = tasks.create(proj, "Stop past a bad receipt", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    status = running_status(proj, task.id)
    os.kill(status.pid, signal.SIGKILL)
    while pid_alive(status.pid):
        time.sleep(0.02)
    bad = {"protocol_version": 2, "command_id": status.command_id, "status": "completed", "attempts": "one"}
    (proj.paths.protocol_dir(task.id) / proto.RESPONSE).write_text(json.dumps(bad))
    stopped = control.stop(proj, task.ref, actor=Actor.HUMAN)
    assert stopped.status is not Status.WORKING
    assert not pid_alive(status.agent_pid), "the agent outlived the stop"
