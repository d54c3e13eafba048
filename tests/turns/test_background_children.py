"""A background child does not hold a turn hostage, and what the agent left running is reaped.

The agent is a real shell script run by the ``command`` harness: it starts ``sleep 300 &``
(holding its stdout open), or a ``setsid`` grandchild (a session of its own), and exits 0.
The turn must end as a success within seconds, not at the watchdog, with the leftovers gone
and named.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import TurnRequest
from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.delays import Delays
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.runtime.attempts import AttemptRunner
from corral.engine.runtime.heartbeat import StatusReporter
from corral.engine.runtime.stopping import StopFlag

#: Each script writes its leftover's pid to $PIDFILE.
SCRIPTS = {
    "background-child": 'echo "working"\nsleep 300 &\necho $! > "$PIDFILE"\necho "done"\nexit 0\n',
    "setsid-grandchild": (
        'echo "working"\nsetsid sh -c \'echo $$ > "$PIDFILE"; exec sleep 300\' &\n'
        'while [ ! -s "$PIDFILE" ]; do sleep 0.05; done\necho "done"\nexit 0\n'
    ),
    "setsid-grandchild-detached-output": (
        'echo "working"\nsetsid sh -c \'echo $$ > "$PIDFILE"; exec sleep 300\' >/dev/null 2>&1 </dev/null &\n'
        'while [ ! -s "$PIDFILE" ]; do sleep 0.05; done\necho "done"\nexit 0\n'
    ),
}


@pytest.fixture
def pidfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "leftover.pid"
    monkeypatch.setenv("PIDFILE", str(path))
    return path


def script(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.sh"
    path.write_text(SCRIPTS[name])
    return path


def leftover(pidfile: Path) -> int:
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the script never started its child"
        time.sleep(0.05)
    return int(pidfile.read_text())


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_turn_ends_when_the_agent_exits_and_its_leftovers_are_reaped(name, repo, tmp_path, pidfile, monkeypatch):
    from corral.engine.project import Project

    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"sh {script(tmp_path, name)}")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "600")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    # The output the child holds open is read until quiet 0.2 s (drain_quiet, the person's; 2 s by default).
    monkeypatch.setenv("CORRAL_DRAIN_QUIET", "0.2")
    proj = Project.open(repo)
    try:
        task = tasks.create(proj, "Leaves a child behind", actor=Actor.HUMAN)
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        child = leftover(pidfile)
        result = control.wait(proj, task.ref, timeout=30)  # the watchdog is 600 s: only the exit ends it
        assert not result.timed_out, "the background child held the turn"
        assert result.task.status is Status.BLOCKED and result.task.resting_cause is None
        with proj.store.read() as tx:
            answer = [t for t in tx.turns(task.id) if t.role is Role.AGENT][-1]
        assert answer.kind != "error" and "done" in answer.content
        assert gone(child), f"the agent's leftover {child} survived the turn"
    finally:
        proj.close()


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_an_attempt_names_what_it_reaped(name, tmp_path, pidfile):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    protocol = tmp_path / "protocol"
    protocol.mkdir()
    harness = make_harness("command", {"command": f"sh {script(tmp_path, name)}"})
    command_id = f"cmd-reap-{name}"  # its own identity: the parallel case must not reap this one's leftovers
    status = StatusReporter(protocol, command_id, "start")
    runner = AttemptRunner(
        harness,
        worktree=worktree,
        log_dir=logs,
        command_id=command_id,
        secrets=[],
        status=status,
        stop=StopFlag(protocol),
        term_grace=1.0,
        delays=Delays(drain_quiet=0.2),  # the output the child holds open, read until quiet 0.2 s (2 s by default)
    )
    run = runner.run(1, lambda: harness.work(TurnRequest(prompt="go", cwd=str(worktree))), 600)
    child = leftover(pidfile)
    assert run.exit_code == 0 and not run.watchdog
    assert [r.pid for r in run.reaped] == [child]
    assert "sleep 300" in run.reaped[0].command
    assert runner.reaped == run.reaped
    assert not pid_alive(child)
    assert b"done" in (logs / "output.log").read_bytes()


def test_what_was_reaped_crosses_the_receipt_bounded(tmp_path):
    from corral.engine.runtime import protocol as proto

    many = tuple(proto.Reaped(1000 + i, f"sleep {i}") for i in range(proto.REAPED_KEPT + 10))
    receipt = proto.Receipt(
        command_id="c", task_id="t", kind="start", status=proto.ReceiptStatus.COMPLETED, reaped=many
    )
    proto.write(tmp_path, receipt)
    back = proto.read_record(tmp_path / proto.RESPONSE, proto.Receipt)
    assert back is not None and back.reaped == many[: proto.REAPED_KEPT]
    plain = proto.Receipt(command_id="c", task_id="t", kind="start", status=proto.ReceiptStatus.COMPLETED)
    assert "reaped" not in plain.to_json()
    doc = {**plain.to_json(), "protocol_version": proto.PROTOCOL_VERSION, "reaped": [{"pid": "x"}]}
    (tmp_path / proto.RESPONSE).write_text(json.dumps(doc))
    found = proto.read(tmp_path / proto.RESPONSE, proto.Receipt)
    assert isinstance(found, proto.Unreadable) and found.problem is proto.Problem.WRONG_SHAPE
