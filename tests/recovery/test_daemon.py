"""The daemon, as a real background process: one per CORRAL_HOME, stale state replaced,
supervisor deaths reconciled within about a second, auto-resume with nobody typing a command,
a reconcile that raises survived, and a log that rotates. (Several projects under one daemon,
and the per-project daemons of older corrals replaced: test_home_daemon.py.)

While the daemon runs, these tests read the store directly (``Project.store.read()``) and
never call anything that reconciles, so whatever recovery happens is the daemon's doing.
The test process opens its project with auto-resume off; the daemon runs with it on.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.engine import daemons
from corral.engine.operations import tasks, turns
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from tests.conftest import CLI, FakeAgent
from tests.recovery.conftest import check_invariants, kill_leftovers
from tests.turns.conftest import ok

LONG = [{"init": True}, {"text": "working"}, {"sleep": 30}, {"result": "never"}]
DAEMON_ENV = {"CORRAL_AUTO_RESUME": "1"}


# -- helpers -----------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.02, proj: Project | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    detail = ""
    if proj is not None:
        with proj.store.read() as tx:
            for task in tx.tasks():
                detail += f"\n{task.ref}: {task.status.value} {task.resting_cause}"
                detail += "".join(
                    f"\n  {c.from_status} -> {c.to_status} {c.reason}" for c in tx.status_changes(task.id)
                )
        detail += f"\n--- daemon.log (tail) ---\n{log_text(proj)[-3000:]}"
        out = daemons.out_file()
        if out.exists():
            detail += f"\n--- daemon.out (tail) ---\n{out.read_text(errors='replace')[-1500:]}"
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{detail}")


def status_json(proj: Project, task_id: str) -> dict[str, Any]:
    return proto.read_raw(proj.paths.protocol_dir(task_id) / proto.STATUS) or {}


def current(proj: Project, task_id: str) -> Any:
    with proj.store.read() as tx:
        return tx.get_task(task_id)


def agent_turns(proj: Project, task_id: str) -> list[Any]:
    with proj.store.read() as tx:
        return [t for t in tx.turns(task_id) if t.role is Role.AGENT]


def live_pids(proj: Project, task_id: str, agent: FakeAgent) -> tuple[int, int]:
    """The running turn's supervisor and agent pids, once both are alive and the agent has
    taken its scenario (so killing it does not leave that scenario to the next invocation)."""

    def both() -> tuple[int, int] | None:
        status = status_json(proj, task_id)
        sup, pid = status.get("pid"), status.get("agent_pid")
        if not (isinstance(sup, int) and isinstance(pid, int) and pid_alive(sup) and pid_alive(pid)):
            return None
        calls = [c["pid"] for c in agent.calls()]
        counter = agent.record / "fake-agent.count"
        taken = int(counter.read_text() or 0) if counter.exists() else 0
        if pid in calls and taken > calls.index(pid):
            return sup, pid
        return None

    return wait_for(both, 20, "the supervisor and its agent to run")


def daemon_log(proj: Project | None = None) -> Path:
    """The home daemon's log (one for every project: ``proj`` is only for the callers' symmetry)."""
    return daemons.log_file()


def log_text(proj: Project | None = None) -> str:
    path = daemon_log(proj)
    return path.read_text(errors="replace") if path.exists() else ""


def running_daemon(proj: Project | None = None) -> daemons.DaemonState:
    state = daemons.state()
    assert state.running and state.pid, "the daemon is not running"
    return state


@pytest.fixture
def dproj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """The test's own view of the project: auto-resume OFF here (the daemon gets it on)."""
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    proj = Project.open(repo)
    assert proj.config["auto_resume"] is False
    with proj.store.read():  # a project has its database once a command has run there: the daemon serves it
        pass
    yield proj
    # Whatever a test left: the daemon (only the one this home's lock names), turns, agents.
    state = daemons.state()
    if state.running and state.pid:
        daemons.stop_running()
    with proj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        try:
            reap_turn(proj, task_id, grace=0.2)
        except OverflowError:  # a status.json a test made impossible on purpose
            pass
    kill_leftovers(agent)
    proj.close()


def start_daemon(corral: CLI) -> int:
    doc = corral.json("daemon", "start", env=DAEMON_ENV)
    pid = doc["daemon"]["pid"]
    assert doc["daemon"]["running"] is True and isinstance(pid, int)
    return pid


def ended_whole(pid: int) -> bool:
    """Whether every thread of ``pid`` has ended (reaped, or a zombie with no thread left but its first)."""
    if not pid_alive(pid):
        try:
            return len(os.listdir(f"/proc/{pid}/task")) <= 1
        except OSError:
            return True
    return False


# -- start / status / refuse / stop --------------------------------------------------------------


def test_start_status_answers_a_second_start_and_stops(dproj, corral):
    pid = start_daemon(corral)
    assert pid_alive(pid)

    status = corral("daemon", "status", "--json")
    assert status.returncode == 0, status.stderr
    doc = status.json()["daemon"]
    assert doc["running"] is True and doc["pid"] == pid
    assert doc["projects"] == [str(dproj.repo)]  # the repository it was started from is served
    human = corral("daemon", "status")
    assert human.returncode == 0 and f"running (pid {pid}" in human.stdout
    assert "serving 1 project:" in human.stdout and f"  {dproj.repo}" in human.stdout
    assert "MCP endpoint:" in human.stdout

    again = corral("daemon", "start", "--json", env=DAEMON_ENV)
    assert again.returncode == 0, again.stderr  # one running is the answer: its pid
    assert again.json()["started"] is False and again.json()["daemon"]["pid"] == pid
    assert running_daemon(dproj).pid == pid  # the second start left the running one alone

    stopped = corral.json("daemon", "stop")
    assert stopped["was_running"] is True and stopped["daemon"]["running"] is False
    wait_for(lambda: not pid_alive(pid), 10, "the daemon to exit")
    after = corral("daemon", "status", "--json")
    assert after.returncode == 1 and after.json()["daemon"]["running"] is False
    assert after.json()["daemon"]["projects"] == [] and after.json()["daemon"]["mcp_url"] is None
    assert "stopped" in log_text(dproj)
    again = corral.json("daemon", "stop")
    assert again["was_running"] is False


def test_a_sigkilled_daemon_leaves_stale_files_that_do_not_block_a_new_one(dproj, corral):
    old = start_daemon(corral)
    os.kill(old, signal.SIGKILL)
    # Every thread of it ended: its main thread may read as ended (a zombie) while its server threads still
    # hold its open files, the lock among them, for a moment.
    wait_for(lambda: ended_whole(old), 10, "the killed daemon to die")
    # It had no chance to tidy up: its state file and lock file are still there, naming it.
    state_file = daemons.state_file()
    assert json.loads(state_file.read_text())["pid"] == old
    assert daemons.lock_file().exists()

    status = corral("daemon", "status", "--json")
    assert status.returncode == 1, status.stdout
    assert status.json()["daemon"] == {**status.json()["daemon"], "running": False, "pid": None}
    assert corral("daemon", "status").stdout.strip() == "not running"

    new = start_daemon(corral)  # the flock died with the process: nothing stale blocks it
    assert new != old
    assert json.loads(state_file.read_text())["pid"] == new
    assert corral("daemon", "status", "--json").json()["daemon"]["pid"] == new
    corral.ok("daemon", "stop")


# -- auto-resume with nobody typing a command --------------------------------------------------


def test_the_daemon_reconciles_a_crash_within_a_second_and_auto_resumes_it(dproj, agent, corral):
    agent.script(LONG, ok("resumed by the daemon"))
    daemon_pid = start_daemon(corral)
    task = tasks.create(dproj, "Crash under the daemon", actor=Actor.HUMAN)
    turns.start(dproj, task.ref, actor=Actor.HUMAN)  # launches; reconciles nothing
    sup, agent_pid = live_pids(dproj, task.id, agent)
    # Wait until the daemon watches this supervisor (it refreshes its watch list at least every second).
    time.sleep(1.2)

    pidfd = os.pidfd_open(sup)
    killed_at = time.time()
    os.kill(agent_pid, signal.SIGKILL)
    readable, _, _ = select.select([pidfd], [], [], 15)
    os.close(pidfd)
    assert readable, "the supervisor did not end the crashed turn"
    exited_at = time.time()

    def interrupted_change() -> Any:
        with dproj.store.read() as tx:
            return next((c for c in tx.status_changes(task.id) if c.to_status is Status.INTERRUPTED), None)

    change = wait_for(interrupted_change, 10, "the daemon to record the crash")
    seen_at = time.time()
    latency = change.at.timestamp() - exited_at
    print(
        f"\nsupervisor exit -> interrupted recorded: {latency * 1000:.0f} ms "
        f"(agent kill -> supervisor exit {(exited_at - killed_at) * 1000:.0f} ms; seen {seen_at - exited_at:.2f} s)"
    )
    assert change.actor is Actor.SYSTEM
    assert latency < 5.0, f"the supervisor's death took {latency:.2f} s to reconcile"

    def finished() -> bool:
        t = current(dproj, task.id)
        return t.status is Status.BLOCKED and len(agent_turns(dproj, task.id)) == 2

    wait_for(finished, 30, "the auto-resumed turn to finish", poll=0.1)
    assert running_daemon(dproj).pid == daemon_pid
    with dproj.store.read() as tx:
        kinds = [(t.role, t.kind, t.actor) for t in tx.turns(task.id)]
        changes = [(c.from_status, c.to_status, c.actor) for c in tx.status_changes(task.id)]
        session = tx.get_session(tx.get_task(task.id).session_id)
    assert kinds == [
        (Role.HUMAN, "start", Actor.HUMAN),
        (Role.AGENT, "error", None),
        (Role.HUMAN, "auto-resume", Actor.SYSTEM),
        (Role.AGENT, "auto-resume", None),
    ]
    assert changes[-3:] == [
        (Status.WORKING, Status.INTERRUPTED, Actor.SYSTEM),
        (Status.INTERRUPTED, Status.WORKING, Actor.SYSTEM),
        (Status.WORKING, Status.BLOCKED, Actor.SYSTEM),
    ]
    assert session.auto_resumed and session.consecutive_interruptions == 0
    assert agent_turns(dproj, task.id)[-1].content == "resumed by the daemon"
    log = log_text(dproj)
    assert "supervisor-exited" in log and "reconcile-error" not in log
    check_invariants(dproj, agent, [])


def test_a_sigkilled_supervisor_is_seen_at_once_its_agent_stopped_and_the_turn_resumed(dproj, agent, corral):
    agent.script(LONG, ok("after the supervisor died"))
    start_daemon(corral)
    task = tasks.create(dproj, "Supervisor dies under the daemon", actor=Actor.HUMAN)
    turns.start(dproj, task.ref, actor=Actor.HUMAN)
    sup, orphan = live_pids(dproj, task.id, agent)
    time.sleep(1.2)
    os.kill(sup, signal.SIGKILL)
    killed_at = time.time()

    def lost() -> Any:
        with dproj.store.read() as tx:
            return next((c for c in tx.status_changes(task.id) if c.to_status is Status.INTERRUPTED), None)

    change = wait_for(lost, 10, "the daemon to mark the turn lost")
    latency = change.at.timestamp() - killed_at
    print(f"\nsupervisor SIGKILL -> interrupted recorded: {latency * 1000:.0f} ms")
    assert latency < 5.0
    assert change.reason == "the supervisor ended without a receipt"
    wait_for(lambda: not pid_alive(orphan), 10, "the orphaned agent to be stopped")
    wait_for(lambda: current(dproj, task.id).status is Status.BLOCKED, 30, "the resumed turn to finish", poll=0.1)
    assert agent_turns(dproj, task.id)[-1].content == "after the supervisor died"
    check_invariants(dproj, agent, [])


def test_a_daemon_started_after_a_crash_recovers_it_before_it_loads_the_mcp_endpoint(dproj, agent, monkeypatch):
    """Loading the MCP SDK takes a second or two of CPU; a daemon (re)started while a turn lies
    crashed records that turn in its first tick, before the endpoint starts loading."""
    from corral.daemon.daemon_service import Daemon

    agent.script(LONG)
    task = tasks.create(dproj, "Crashed while no daemon ran", actor=Actor.HUMAN)
    turns.start(dproj, task.ref, actor=Actor.HUMAN)
    sup, agent_pid = live_pids(dproj, task.id, agent)
    os.kill(sup, signal.SIGKILL)
    os.kill(agent_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(sup) and not pid_alive(agent_pid), 10, "the turn's processes to die")
    assert current(dproj, task.id).status is Status.WORKING  # nobody has reconciled it yet

    daemon = Daemon(tick=60)
    seen: list[Status] = []

    def start_mcp() -> None:
        seen.append(current(dproj, task.id).status)
        daemon.request_stop()

    monkeypatch.setattr(daemon, "start_mcp", start_mcp)
    monkeypatch.setattr(daemon, "start_dashboard", lambda: None)
    daemon.run()
    assert seen == [Status.INTERRUPTED]  # auto-resume is off in this process: the crash stays recorded
    with dproj.store.read() as tx:
        change = tx.status_changes(task.id)[-1]
    assert change.actor is Actor.SYSTEM and change.reason == "the supervisor ended without a receipt"


# -- a reconcile that raises ---------------------------------------------------------------------


def ticks(proj: Project | None = None) -> str | None:
    return daemons.state().last_tick


@pytest.mark.slow
def test_the_daemon_survives_a_reconcile_that_raises_logs_it_and_keeps_ticking(dproj, agent, corral, monkeypatch):
    """The database is unusable for a while (another process holds its write lock past the busy
    timeout): the reconcile that has to record a crash raises. The daemon logs it, keeps ticking
    and records the crash once the database is usable again."""
    agent.script(LONG, ok("after the lock"))
    monkeypatch.setenv("CORRAL_STORE_BUSY_TIMEOUT", "1")  # the daemon's writes wait 1 s for the lock, not 10
    pid = start_daemon(corral)
    task = tasks.create(dproj, "Locked store", actor=Actor.HUMAN)
    turns.start(dproj, task.ref, actor=Actor.HUMAN)
    _sup, agent_pid = live_pids(dproj, task.id, agent)
    time.sleep(1.2)
    holder = sqlite3.connect(dproj.paths.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # every writer waits out the busy timeout (1 s), then fails
    try:
        os.kill(agent_pid, signal.SIGKILL)

        def logged() -> bool:
            errors = [line for line in log_text(dproj).splitlines() if "reconcile-error" in line]
            return any("busy" in line for line in errors)

        wait_for(logged, 30, "the daemon to log the failed reconcile", poll=0.2, proj=dproj)
        failed_at = ticks(dproj)
        wait_for(lambda: ticks(dproj) != failed_at, 30, "the daemon to tick again", poll=0.2, proj=dproj)
        assert running_daemon(dproj).pid == pid
        assert current(dproj, task.id).status is Status.WORKING  # nothing was half-recorded
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: current(dproj, task.id).status is Status.BLOCKED, 30, "recovery after the lock", 0.1, dproj)
    assert [t.content for t in agent_turns(dproj, task.id)][-1] == "after the lock"
    assert running_daemon(dproj).pid == pid
    check_invariants(dproj, agent, [])


def break_a_working_task(proj: Project, agent: FakeAgent, goal: str) -> Any:
    """A task left working by a dead turn: no status.json, and a ``command.json`` whose
    ``created_at`` nobody can parse (``parse_time`` raises on it)."""
    task = tasks.create(proj, goal, actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    sup, agent_pid = live_pids(proj, task.id, agent)
    os.kill(sup, signal.SIGKILL)
    os.kill(agent_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(sup) and not pid_alive(agent_pid), 10, "the turn's processes to die")
    protocol_dir = proj.paths.protocol_dir(task.id)
    (protocol_dir / proto.STATUS).unlink()
    command = json.loads((protocol_dir / proto.COMMAND).read_text())
    command["created_at"] = "yesterday-ish"
    (protocol_dir / proto.COMMAND).write_text(json.dumps(command))
    return task


def test_a_corrupt_protocol_file_stops_neither_the_daemon_nor_the_other_tasks(dproj, agent, corral):
    """One task whose protocol file cannot be parsed must not keep the daemon from the others.
    (Until e949a50, ``sweep_working`` let that task's ValueError abort the whole pass on every
    tick: the healthy task's crash was never recorded.) With the file repaired — or coped with —
    the broken task is recovered too, and the daemon never stopped."""
    agent.script(LONG, LONG, default=ok("resumed"))
    broken = break_a_working_task(dproj, agent, "Corrupt, created first")
    healthy = tasks.create(dproj, "Healthy, created second", actor=Actor.HUMAN)
    turns.start(dproj, healthy.ref, actor=Actor.HUMAN)
    _sup, agent_pid = live_pids(dproj, healthy.id, agent)
    pid = start_daemon(corral)
    os.kill(agent_pid, signal.SIGKILL)
    wait_for(
        lambda: current(dproj, healthy.id).status is Status.BLOCKED,
        20,
        "the healthy task to be recovered despite the broken one",
        poll=0.1,
        proj=dproj,
    )
    command_path = dproj.paths.protocol_dir(broken.id) / proto.COMMAND
    command = json.loads(command_path.read_text())
    if command.get("created_at") == "yesterday-ish":  # still not coped with: a person repairs it
        command["created_at"] = "2020-01-01T00:00:00Z"
        command_path.write_text(json.dumps(command))
    wait_for(lambda: current(dproj, broken.id).status is Status.BLOCKED, 30, "the broken task's recovery", 0.1, dproj)
    first = ticks(dproj)
    wait_for(lambda: ticks(dproj) != first, 10, "another tick", poll=0.1, proj=dproj)
    assert running_daemon(dproj).pid == pid
    check_invariants(dproj, agent, [])


@pytest.mark.slow
def test_the_daemon_survives_a_status_file_with_an_impossible_pid(dproj, agent, corral):
    """BUG: ``Daemon.run`` calls ``refresh_watch()`` outside its exception guard, and
    ``pid_alive()`` lets ``os.kill``'s OverflowError out: a status.json whose pid does not fit a
    pid_t ends the daemon at its first watch refresh."""
    agent.script(LONG, default=ok("recovered"))
    task = tasks.create(dproj, "Impossible pid", actor=Actor.HUMAN)
    turns.start(dproj, task.ref, actor=Actor.HUMAN)
    sup, agent_pid = live_pids(dproj, task.id, agent)
    os.kill(sup, signal.SIGKILL)
    os.kill(agent_pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(sup), 10, "the supervisor to die")
    status = status_json(dproj, task.id)
    status.update(pid=2**40, agent_pid=None)
    (dproj.paths.protocol_dir(task.id) / proto.STATUS).write_text(json.dumps(status))
    started = corral("daemon", "start", "--json", env=DAEMON_ENV)
    time.sleep(3.0)  # a tick and a watch refresh or two
    state = daemons.state()
    out = daemons.out_file().read_text(errors="replace")
    assert started.returncode == 0 and state.running, f"the daemon died:\n{started.stdout}\n{out[-1500:]}"


# -- the log -------------------------------------------------------------------------------------


def test_the_daemon_log_rotates(dproj, corral):
    log = daemons.log_file()
    logs = log.parent
    assert logs == Path(os.environ["CORRAL_HOME"]) / "daemon"  # the home's, not a project's
    logs.mkdir(parents=True, exist_ok=True)
    filler = "x" * 99 + "\n"
    log.write_text(filler * 10_000)  # 1,000,000 bytes: the next record rolls it over
    start_daemon(corral)
    rotated = logs / "daemon.log.1"
    wait_for(rotated.exists, 10, "the log to rotate")
    assert rotated.read_text().startswith(filler)
    assert rotated.stat().st_size >= 1_000_000
    assert "started" in log.read_text() and log.stat().st_size < 10_000
    # Older generations shift along and at most three are kept.
    for n in (2, 3):
        (logs / f"daemon.log.{n}").write_text(f"generation {n}\n")
    corral.ok("daemon", "stop")
    log.write_text(filler * 10_000)
    start_daemon(corral)
    wait_for(lambda: (logs / "daemon.log.1").read_text().startswith(filler) and "started" in log.read_text(), 10,
             "the second rotation")  # fmt: skip
    assert (logs / "daemon.log.2").read_text().startswith(filler)  # the previous .1
    assert (logs / "daemon.log.3").read_text() == "generation 2\n"
    assert not (logs / "daemon.log.4").exists()
    corral.ok("daemon", "stop")


def test_a_project_whose_repository_moved_or_database_went_is_no_longer_served_and_the_log_says_why(
    dproj, corral, repo, tmp_path
):
    """The daemon serves the home, so it goes on running; it only stops serving that project
    (it must not write into a database no one will read again, nor reconcile worktrees that no
    longer link to it), and serves it again once a command runs where the repository is now."""
    pid = start_daemon(corral)
    assert running_daemon().projects == (str(dproj.repo),)
    dproj.close()
    dproj.paths.db.unlink()  # the database removed under the daemon: it must not write a file no one reads
    for suffix in ("-wal", "-shm"):
        Path(f"{dproj.paths.db}{suffix}").unlink(missing_ok=True)
    wait_for(lambda: running_daemon().projects == (), 10, "the daemon to stop serving the project")
    assert pid_alive(pid) and running_daemon().pid == pid
    assert "task database" in log_text(dproj) and "was removed" in log_text(dproj)
    time.sleep(1.0)  # a few more ticks
    assert not dproj.paths.db.exists()  # and it made no new one behind the person's back

    corral.ok("list")  # a new database for the same repository
    wait_for(lambda: running_daemon().projects == (str(dproj.repo),), 10, "the project to be served again")
    moved = tmp_path / "moved-away"
    os.rename(repo, moved)
    wait_for(lambda: running_daemon().projects == (), 10, "the daemon to stop serving the moved project")
    assert f"the repository {dproj.repo} is gone" in log_text(dproj)
    assert running_daemon().pid == pid
    CLI(moved).ok("list")  # the next command where it is now reattaches the state
    wait_for(lambda: running_daemon().projects == (str(moved),), 10, "the moved project to be served where it is")
    assert running_daemon().pid == pid
