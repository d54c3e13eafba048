"""One daemon per CORRAL_HOME: it serves every project kept there, from any directory.

Two projects under one daemon each get a killed supervisor reconciled; ``daemon start`` works
outside any repository; a second start answers with the running one and two concurrent ``ensure_running`` start
one daemon; a per-project daemon of an older corral is stopped (SIGTERM) and replaced; a project
whose repository is removed stops being served while the other still is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.locks import is_locked
from corral.adapters.process import pid_alive
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine import daemons
from corral.engine.operations import tasks, turns
from corral.engine.project import Project
from corral.engine.runtime.processes import reap_turn
from tests.conftest import CLI, FakeAgent, git
from tests.recovery.conftest import check_invariants, kill_leftovers
from tests.recovery.test_daemon import (
    DAEMON_ENV,
    LONG,
    current,
    live_pids,
    log_text,
    running_daemon,
    start_daemon,
    wait_for,
)
from tests.turns.conftest import ok


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text(f"# {path.name}\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", f"initial {path.name}")
    return path


def opened(repo: Path) -> Project:
    proj = Project.open(repo)
    with proj.store.read():  # its database: a project a command has run in
        pass
    return proj


@pytest.fixture
def two(agent: FakeAgent, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Project]]:
    """Two projects under the test's CORRAL_HOME, auto-resume OFF in this process (the daemon gets it on)."""
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    projects = [opened(repo), opened(make_repo(tmp_path / "second"))]
    assert projects[0].paths.root != projects[1].paths.root
    yield projects
    state = daemons.state()
    if state.running and state.pid:
        daemons.stop_running()
    for proj in projects:
        if proj.paths.db.exists():
            with proj.store.read() as tx:
                ids = [t.id for t in tx.tasks()]
            for task_id in ids:
                reap_turn(proj, task_id, grace=0.2)
        proj.close()
    kill_leftovers(agent)


def gone(pid: int) -> bool:
    return not pid_alive(pid)


def rests(proj: Project, task_id: str) -> bool:
    return bool(current(proj, task_id).status is Status.BLOCKED)


def interrupted(proj: Project, task_id: str) -> Any:
    with proj.store.read() as tx:
        return next((c for c in tx.status_changes(task_id) if c.to_status is Status.INTERRUPTED), None)


def test_one_daemon_serves_two_projects_and_reconciles_a_killed_supervisor_in_each(two, agent, corral):
    agent.script(LONG, LONG, default=ok("resumed by the home daemon"))
    pid = start_daemon(corral)
    assert set(running_daemon().projects) == {str(p.repo) for p in two}
    started = []
    for n, proj in enumerate(two):
        task = tasks.create(proj, f"Supervisor dies in project {n}", actor=Actor.HUMAN)
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        started.append((proj, task, *live_pids(proj, task.id, agent)))
    time.sleep(1.2)  # the daemon watches both supervisors (its watch list is refreshed every second)
    for proj, task, sup, _agent_pid in started:
        os.kill(sup, signal.SIGKILL)
        killed_at = time.time()
        change = wait_for(partial(interrupted, proj, task.id), 10, f"the daemon to reconcile {proj.repo}", proj=proj)
        assert change.actor is Actor.SYSTEM and change.reason == "the supervisor ended without a receipt"
        assert change.at.timestamp() - killed_at < 5.0
    for proj, task, _sup, orphan in started:
        wait_for(partial(gone, orphan), 10, "the orphaned agent to be stopped")
        wait_for(partial(rests, proj, task.id), 30, "the resumed turn", 0.1, proj)
        check_invariants(proj, agent, [])
    assert running_daemon().pid == pid  # one daemon all along
    exits = [line for line in log_text().splitlines() if " supervisor-exited " in line]
    for proj in two:  # each death seen through its pidfd, and said of its own project
        assert any(f"'project': '{proj.repo}'" in line for line in exits), exits


def test_daemon_start_status_and_stop_work_outside_any_repository(two, tmp_path):
    nowhere = tmp_path / "not-a-repository"
    nowhere.mkdir()
    cli = CLI(nowhere)
    doc = cli.json("daemon", "start", env=DAEMON_ENV)["daemon"]
    assert doc["running"] is True and set(doc["projects"]) == {str(p.repo) for p in two}
    # It runs in the home's own directory, holding no repository (nor the caller's directory) open.
    assert os.readlink(f"/proc/{doc['pid']}/cwd") == str(daemons.daemon_dir())
    status = cli("daemon", "status")
    assert status.returncode == 0, status.stderr
    assert "serving 2 projects:" in status.stdout and all(f"  {p.repo}" in status.stdout for p in two)
    # A second start, from anywhere, answers with the running one and leaves it alone.
    again = CLI(two[1].repo)("daemon", "start", "--json")
    assert again.returncode == 0 and again.json()["started"] is False and again.json()["daemon"]["pid"] == doc["pid"]
    assert running_daemon().pid == doc["pid"]
    assert cli.json("daemon", "stop")["was_running"] is True
    assert cli("daemon", "status").returncode == 1
    wait_for(partial(gone, doc["pid"]), 10, "the daemon to exit")


def test_the_mcp_endpoint_is_served_or_its_absence_said(two, corral):
    start_daemon(corral)
    state = running_daemon()
    if state.mcp_url is None:
        assert "mcp-unavailable" in log_text()
    else:
        assert state.mcp_url.startswith(("http://127.0.0.1:", "http://[::1]:", "http://localhost:"))
    assert corral.json("daemon", "status")["daemon"]["mcp_url"] == state.mcp_url


def test_two_concurrent_starts_make_one_daemon(two, tmp_path):
    """Two ``ensure_running`` at once (two launches that both found no daemon): one starts it, the other joins;
    and two ``corral daemon start`` at once: one starts it, the other answers with it."""
    script = "from corral.engine import daemons; print(daemons.ensure_running().pid, flush=True)"
    env = {**os.environ, **DAEMON_ENV}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    pids = {int(p.communicate(timeout=30)[0].strip()) for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(pids) == 1 and running_daemon().pid in pids
    assert log_text().count(" INFO started ") == 1
    daemons.stop_running()

    cli = CLI(tmp_path)
    starts = [
        subprocess.Popen(
            [sys.executable, "-m", "corral", "daemon", "start", "--json"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    answers = [json.loads(p.communicate(timeout=30)[0]) for p in starts]
    assert [p.returncode for p in starts] == [0, 0]
    assert sorted(a["started"] for a in answers) == [False, True]
    assert len({a["daemon"]["pid"] for a in answers}) == 1
    assert log_text().count(" INFO started ") == 2  # the first daemon, and this one: never two at once
    assert cli("daemon", "status").returncode == 0


OLD_DAEMON = textwrap.dedent(
    """
    import fcntl, json, os, signal, sys, time
    from datetime import UTC, datetime
    lock, state, marker = sys.argv[1:4]
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    def written():
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    started = written()
    def term(*_):
        open(marker, "w").write("SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    while True:
        with open(state + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "started_at": started, "last_tick": written()}, f)
        os.replace(state + ".tmp", state)
        time.sleep(0.2)
    """
)


def test_a_per_project_daemon_of_an_older_corral_is_stopped_and_replaced(two, agent, corral, tmp_path):
    """Before one daemon per home, each project had its own: an flock on the state directory's
    ``daemon.lock`` and its pid and start in ``daemon.json``. The home daemon stops it with
    SIGTERM (proven by that start time) and serves the project itself."""
    proj = two[0]
    marker = tmp_path / "old-daemon.signal"
    old = subprocess.Popen(
        [sys.executable, "-c", OLD_DAEMON, str(proj.paths.daemon_lock), str(proj.paths.daemon_state), str(marker)],
        start_new_session=True,
    )
    try:
        wait_for(lambda: proj.paths.daemon_state.exists() and is_locked(proj.paths.daemon_lock), 10, "the old daemon")
        start_daemon(corral)
        assert old.wait(timeout=10) == 0 and marker.read_text() == "SIGTERM"  # stopped cleanly, not killed
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
    assert set(running_daemon().projects) == {str(p.repo) for p in two}
    assert is_locked(proj.paths.daemon_lock)  # held now by the home daemon, which serves the project
    log = log_text()
    assert f"old-daemon-replaced {{'project': '{proj.repo}', 'pid': {old.pid}}}" in log
    # It serves it: a supervisor killed there is reconciled.
    agent.script(LONG, default=ok("resumed after the replacement"))
    task = tasks.create(proj, "Under the replacing daemon", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    sup, _agent_pid = live_pids(proj, task.id, agent)
    time.sleep(1.2)
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: interrupted(proj, task.id), 10, "the home daemon to reconcile the old daemon's project", proj=proj)
    daemons.stop_running()
    assert not is_locked(proj.paths.daemon_lock)  # a clean stop lets go of every project


def test_a_removed_repository_stops_being_served_and_the_other_project_still_is(two, agent, corral):
    import shutil

    first, second = two
    pid = start_daemon(corral)
    second.close()
    shutil.rmtree(second.repo)
    wait_for(lambda: running_daemon().projects == (str(first.repo),), 10, "the removed project to be dropped")
    assert f"the repository {second.repo} is gone" in log_text()
    assert not is_locked(second.paths.daemon_lock)  # let go: `corral project archive` may put it aside
    time.sleep(1.0)  # more ticks: said once, not on every tick
    assert log_text().count(f"no longer serving {second.repo}") == 1
    assert log_text().count(f"not serving {second.repo}") == 0

    agent.script(LONG, default=ok("the other project is still served"))
    task = tasks.create(first, "Still served", actor=Actor.HUMAN)
    turns.start(first, task.ref, actor=Actor.HUMAN)
    sup, _ = live_pids(first, task.id, agent)
    time.sleep(1.2)
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: interrupted(first, task.id), 10, "the other project's crash to be reconciled", proj=first)
    wait_for(lambda: current(first, task.id).status is Status.BLOCKED, 30, "the resumed turn", 0.1, first)
    assert running_daemon().pid == pid


def test_a_clean_stop_takes_back_the_wait_markers_it_wrote_in_every_project(two):
    """The daemon's MCP ``wait`` marks its caller as waiting, with the daemon's pid; a clean stop
    clears them in every project it served (a SIGKILLed one's are disbelieved by their pid)."""
    import threading

    from corral.daemon.daemon_service import Daemon
    from corral.engine.runtime import wait_markers

    callers = [tasks.create(proj, f"Waits in project {n}", actor=Actor.HUMAN) for n, proj in enumerate(two)]
    open_waits = []
    for proj, caller in zip(two, callers, strict=True):
        proj.paths.protocol_dir(caller.id).mkdir(parents=True, exist_ok=True)  # as a started task has
        wait = wait_markers.track_wait(proj, caller.id, ["some-subtask"], 1)
        wait.__enter__()  # a wait in flight, written by this process: the daemon here runs in-process
        open_waits.append(wait)
        assert [w.target for w in wait_markers.active_waits(proj.paths.protocol_dir(caller.id))] == ["some-subtask"]
    daemon = Daemon(tick=0.05)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        wait_for(lambda: len(daemon.slots) == 2, 20, "the daemon to serve both projects")
    finally:
        daemon.request_stop()
        runner.join(30)
    assert not runner.is_alive()
    for proj, caller in zip(two, callers, strict=True):
        assert wait_markers.active_waits(proj.paths.protocol_dir(caller.id)) == []
    for wait in open_waits:
        wait.__exit__(None, None, None)


def test_daemon_run_json_streams_events_naming_their_project_from_any_directory(two, tmp_path):
    import json

    nowhere = tmp_path / "elsewhere"
    nowhere.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "daemon", "run", "--json", "--tick", "0.2"],
        cwd=nowhere,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: set(daemons.state().projects) == {str(p.repo) for p in two}, 20, "the foreground daemon")
        refused = CLI(nowhere)("daemon", "run", "--json")  # a second one, in the foreground too
        assert refused.returncode == 3 and refused.json()["error"]["code"] == "daemon-running"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["event"] == "started" and events[-1]["event"] == "stopped"
    serving = {e["project"] for e in events if e["event"] == "serving"}
    assert serving == {str(p.repo) for p in two}
    assert all(isinstance(e["at"], str) for e in events)


def test_a_daemon_that_holds_its_lock_before_it_writes_its_state_is_waited_for(tmp_path: Path) -> None:
    """A daemon takes its lock at its start and writes its state file a moment later: a launch that looks in
    between (another one's start, under load) waits for the state to name it, and never answers "running,
    pid unknown"."""
    import threading

    from corral.adapters.locks import lock
    from corral.engine.private_state import make_private_dir

    home = tmp_path / "corral-home"
    make_private_dir(daemons.daemon_dir(home))
    held = lock(daemons.lock_file(home), 1.0)  # a daemon mid-start: its lock held, its state not written yet
    assert held is not None

    def writes_its_state() -> None:
        time.sleep(0.3)
        doc = {"pid": os.getpid(), "started_at": "2026-01-01T00:00:00Z", "last_tick": None}
        daemons.state_file(home).write_text(json.dumps(doc))

    writer = threading.Thread(target=writes_its_state)
    writer.start()
    try:
        found = daemons.ensure_running(home, timeout=10)
        assert found.running and found.pid == os.getpid()
        found, started = daemons.start_detached(home, timeout=10)
        assert found.pid == os.getpid() and started is False
    finally:
        writer.join()
        os.close(held)
