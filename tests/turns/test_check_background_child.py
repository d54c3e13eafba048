"""The post-turn check's background child never holds the turn: the turn ends when the check's
shell does, with its output kept, and what the check left running is ended."""

from __future__ import annotations

import time

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from tests.turns.conftest import ok, reopen


def test_a_check_that_leaves_a_child_holding_its_output_ends_with_the_shell(proj, agent, monkeypatch, tmp_path):
    pidfile = tmp_path / "child.pid"
    # The child keeps the check's stdout open for 300 s; the check itself is done at once.
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", f"echo checked; (sleep 300 & echo $! > {pidfile}); exit 0")
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK_TIMEOUT", "120")
    proj = reopen(proj)
    agent.script(ok())
    task = tasks.create(proj, "Check with a child", actor=Actor.HUMAN)
    began = time.monotonic()
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=60)
    assert result.task.status is Status.BLOCKED
    assert time.monotonic() - began < 30  # not the check's 120 s limit
    with proj.store.read() as tx:
        (agent_turn,) = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    check = agent_turn.details["check"]
    assert check["exit_code"] == 0 and not check["timed_out"] and "checked" in check["tail"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)
    proj.close()
