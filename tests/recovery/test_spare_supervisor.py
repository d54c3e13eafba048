"""A spare supervisor (engine/operations/spares.py): started ahead for the next auto-resume, identified from its start.

It carries the command tag of the one command it may run; the resume that takes it records its turn under that
id, so the process registered for the turn carries the turn's own tag, as a spawned supervisor does. A spare no
turn takes exits when let go, and one that dies when handed its command leaves a turn the reconciler recovers.
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.adapters.pid_identity import environ_has, proc_info
from corral.domain.actors import Actor, Role
from corral.domain.agent_tools import TOKEN_ENV
from corral.domain.status import Status
from corral.engine.operations import control, spares, tasks, turns
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn, tag
from tests.recovery.conftest import check_invariants, kill_leftovers
from tests.turns.conftest import ok

SLOW_CRASH = [{"init": True}, {"sleep": 1.0}, {"kill": "KILL"}]


@pytest.fixture
def keeper(tmp_path: Path, rproj, agent) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """This process keeps spares (as the daemon does) for the test; every one is let go after it."""
    log = tmp_path / "spare.log"
    spares.enable(log)
    try:
        yield log
    finally:
        spares.disable()
        with rproj.store.read() as tx:
            ids = [t.id for t in tx.tasks()]
        for task_id in ids:
            reap_turn(rproj, task_id, grace=0.2)
        kill_leftovers(agent)


def ended(pid: int, timeout: float = 30) -> bool:
    """Whether ``pid`` exits within ``timeout`` (a pidfd: no guessing how long a nap)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def resumed_turn(project, task_id: str):  # type: ignore[no-untyped-def]
    with project.store.read() as tx:
        return next(t for t in reversed(tx.turns(task_id)) if t.kind == "auto-resume" and t.role is Role.HUMAN)


def test_the_auto_resume_runs_on_the_spare_under_the_id_it_was_started_with(rproj, agent, keeper, monkeypatch):
    pid = spares.replenish()
    assert pid is not None
    (carried,) = [c for c in [spares.take()] if c]  # what it carries: the id the next resume takes
    assert environ_has(pid, tag(carried))  # its tag, fixed at its start, in /proc/<pid>/environ
    spares.release(carried)  # let go: it exits, and its id is never used
    assert ended(pid)

    monkeypatch.setenv(TOKEN_ENV, "a token of the daemon's own environment")  # never the resumed agent's
    spare = spares.replenish()
    monkeypatch.delenv(TOKEN_ENV)
    assert spare is not None
    start = proc_info(spare)
    assert start is not None
    taken: list[str | None] = []
    take = spares.take
    monkeypatch.setattr(spares, "take", lambda: taken.append(take()) or taken[-1])
    agent.script(ok("first"), SLOW_CRASH, [{"init": True}, {"result": "resumed on the spare"}])
    task = tasks.create(rproj, "Crash, then resume on the spare", actor=Actor.HUMAN)
    turns.start(rproj, task.ref, actor=Actor.HUMAN)
    assert control.wait(rproj, task.ref, timeout=30).task.status is Status.BLOCKED
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="again, please")
    result = control.wait(rproj, task.ref, timeout=60)  # the crash, reconciled here: auto-resumed on the spare
    assert result.task.status is Status.BLOCKED
    assert agent.calls()[-1]["prompt"].startswith("You are being resumed")
    assert agent.calls()[-1]["env"].get(TOKEN_ENV) != "a token of the daemon's own environment"
    turn = resumed_turn(rproj, task.id)
    assert taken == [turn.command_id]  # the resume took the spare, and recorded its turn under the id it carries
    status = proto.read_record(rproj.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    assert status is not None and status.command_id == turn.command_id
    assert status.pid == spare and status.pid_start == start.start  # the supervisor that wrote it: the spare
    with rproj.store.read() as tx:
        answer = tx.turn_by_command(turn.command_id, Role.AGENT)
    assert answer is not None and answer.kind != "error"  # its receipt became the turn's answer
    check_invariants(rproj, agent, ["again, please"])


def test_a_spare_no_resume_takes_exits_when_its_keeper_lets_it_go(keeper):
    pid = spares.replenish()
    assert pid is not None and spares.replenish() is None  # one is kept, not one per call
    spares.disable()
    assert ended(pid)
    assert spares.take() is None  # none is kept any more, nor started
    assert spares.replenish() is None


def test_a_spare_that_dies_as_it_is_handed_its_command_leaves_a_turn_the_reconciler_rests(
    rproj, agent, keeper, monkeypatch
):
    monkeypatch.setenv("CORRAL_CRASH_AT", "supervisor.spare-handed")
    spare = spares.replenish()  # started with the crash point: it dies on reading its command
    monkeypatch.delenv("CORRAL_CRASH_AT")
    assert spare is not None
    agent.script(ok("first"), SLOW_CRASH, [{"init": True}, {"result": "resumed at last"}])
    task = tasks.create(rproj, "Crash, then lose the spare", actor=Actor.HUMAN)
    turns.start(rproj, task.ref, actor=Actor.HUMAN)
    assert control.wait(rproj, task.ref, timeout=30).task.status is Status.BLOCKED
    turns.unblock(rproj, task.ref, actor=Actor.HUMAN, message="once more")
    # The crash is reconciled and auto-resumed onto the spare, which dies before it writes a status: the task
    # never stays working with no supervisor.
    result = control.wait(rproj, task.ref, timeout=60)
    assert ended(spare, 0)
    assert result.task.status is Status.INTERRUPTED  # the launch's fault, recorded once: not resumed again
    cause = result.task.resting_cause
    assert cause is not None and cause.code == "internal-fault" and cause.evidence is not None
    assert cause.evidence.phase == "launch"
    with rproj.store.read() as tx:
        lost = [t for t in tx.turns(task.id) if t.kind == "auto-resume" and t.role is Role.HUMAN]
    assert len(lost) == 1
    turns.resume(rproj, task.ref, actor=Actor.HUMAN)  # a person resumes it: a supervisor is spawned, the turn runs
    assert control.wait(rproj, task.ref, timeout=60).task.status is Status.BLOCKED
    check_invariants(rproj, agent, ["once more"])


def test_a_daemon_keeps_a_spare_only_once_it_watches_a_running_turn(rproj, agent, monkeypatch):
    """No turn runs, no spare: a daemon started for a dashboard or corral's tools, or left idle, spends neither a
    supervisor's start nor its memory. Once it watches a running turn (which could crash into a resume) it keeps
    one, and it lets it go when it stops."""
    import threading
    import time

    from corral.daemon.daemon_service import Daemon

    events: list[dict[str, object]] = []
    daemon = Daemon(tick=0.05, on_event=events.append)
    daemon.watch_every = 0.05
    daemon.spare_after = 0.05
    monkeypatch.setattr(daemon, "start_mcp", lambda: None)
    monkeypatch.setattr(daemon, "start_dashboard", lambda: None)
    looks: list[float] = []
    tick_once = daemon.tick_once
    monkeypatch.setattr(daemon, "tick_once", lambda: looks.append(time.monotonic()) or tick_once())
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()

    def kinds(kind: str) -> list[dict[str, object]]:
        return [e for e in list(events) if e.get("event") == kind]

    try:
        deadline = time.monotonic() + 10
        while len(looks) < 6:
            assert time.monotonic() < deadline, events
            time.sleep(0.02)
        assert kinds("spare-supervisor") == []  # idle for many looks, each past a spare's delay: none started
        agent.script([{"init": True}, {"text": "working"}, {"sleep": 30}, {"result": "never"}])
        task = tasks.create(rproj, "A running turn", actor=Actor.HUMAN)
        turns.start(rproj, task.ref, actor=Actor.HUMAN)
        deadline = time.monotonic() + 20
        while not kinds("spare-supervisor"):
            assert time.monotonic() < deadline, events
            time.sleep(0.02)
        (started,) = kinds("spare-supervisor")
        pid = started["pid"]
        assert isinstance(pid, int) and spares.kept()
    finally:
        daemon.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert ended(pid) and not spares.kept()  # the stopping daemon let it go, and it exited
    reap_turn(rproj, task.id, grace=0.2)
    kill_leftovers(agent)
