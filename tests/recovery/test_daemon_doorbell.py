"""A launch rings the home daemon's doorbell: the daemon watches the new supervisor from its start.

The daemon here runs in this process with its tick and its looks at the store an hour apart, so
the only way it learns of a supervisor started after its first tick is the doorbell the launch
rings: the turn's end (its supervisor's exit, seen through a pidfd) is recorded by the daemon
without any tick, and without any reconcile in the test, which never reconciles.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters import doorbell
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.project import Project
from corral.engine.runtime.processes import reap_turn
from tests.conftest import FakeAgent
from tests.recovery.conftest import kill_leftovers

HOUR = 3600.0


@pytest.fixture
def dproj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    proj = Project.open(repo)
    with proj.store.read():  # the project has its database: the daemon serves it
        pass
    yield proj
    with proj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        reap_turn(proj, task_id, grace=0.2)
    kill_leftovers(agent)
    proj.close()


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_a_launch_rings_the_daemon_which_records_the_turn_end_without_a_tick(dproj, agent, monkeypatch):
    from corral.daemon.daemon_service import Daemon

    events: list[dict[str, Any]] = []
    daemon = Daemon(tick=HOUR, on_event=events.append)
    daemon.watch_every = HOUR
    monkeypatch.setattr(daemon, "start_mcp", lambda: None)
    monkeypatch.setattr(daemon, "start_dashboard", lambda: None)
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: any(e.get("event") == "started" for e in events), 30, "the daemon to start")
        wait_for(lambda: daemon.slots, 30, "the daemon's first tick to serve the project")
        agent.script([{"init": True}, {"sleep": 2}, {"result": "done"}])
        task = tasks.create(dproj, "Over before the daemon would look again", actor=Actor.HUMAN)
        started = turns.start(dproj, task.ref, actor=Actor.HUMAN)
        exited = wait_for(
            lambda: [e for e in events if e.get("event") == "supervisor-exited"], 30, "the daemon to see the exit"
        )
        assert exited[0]["pids"] == [started.launched.supervisor_pid]

        def rested() -> bool:  # recorded by the daemon: the test never reconciles
            with dproj.store.read() as tx:
                return tx.get_task(task.id).status is Status.BLOCKED

        wait_for(rested, 30, "the daemon to record the turn's end")
    finally:
        daemon.request_stop()
        runner.join(30)
    assert not runner.is_alive()
    assert not [e for e in events if e.get("event") == "daemon-error"]


def test_ringing_wakes_a_listener_and_nobody_listening_costs_nothing(tmp_path: Path) -> None:
    path = tmp_path / doorbell.NAME
    assert doorbell.ring(path) is False  # never made: no daemon listens
    bell = doorbell.listen(path)
    try:
        assert stat.S_ISFIFO(os.lstat(path).st_mode) and stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        import select

        assert select.select([bell.fd], [], [], 0)[0] == []
        assert doorbell.ring(path) is True
        assert select.select([bell.fd], [], [], 5)[0] == [bell.fd]
        bell.drain()
        assert select.select([bell.fd], [], [], 0)[0] == []  # drained, and not "ended" by the ringer's close
    finally:
        bell.close()
    assert doorbell.ring(path) is False  # the listener went: the open fails at once (ENXIO)


def test_a_file_standing_where_the_bell_goes_is_replaced_and_never_written(tmp_path: Path) -> None:
    path = tmp_path / doorbell.NAME
    path.write_text("not a pipe\n")
    assert doorbell.ring(path) is False
    assert path.read_text() == "not a pipe\n"
    bell = doorbell.listen(path)
    try:
        assert stat.S_ISFIFO(os.lstat(path).st_mode)
    finally:
        bell.close()
