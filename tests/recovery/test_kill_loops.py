"""kill -9 loops on real processes: the agent, the supervisor and the daemon, each killed at
random moments while the fake agent works, over bounded loops (105 kills in all).

After every kill the recovery invariants hold (``check_invariants``: legal histories with
their actors, no feedback lost, no filed receipt without its turn, never two live agents
for one task); once the kill has been absorbed by a reconcile they hold in their settled
form too (no task working without a live owner, no receipt left unprocessed). In the end
the work finishes: the task rests blocked after a completed turn and every feedback ever
given has been delivered and consumed.

The moments are drawn from a seeded ``random.Random``; each test prints its seed.
Reproduce a run with ``CORRAL_KILL_SEED=<base seed> pytest tests/recovery/test_kill_loops.py``. Each
loop runs in :data:`PARTS` parts, each a test with its own task and seed; their kills add up to the
loop's total.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status
from corral.engine import daemons
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.auto_resume import resumable
from corral.engine.operations.refresh import settle
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from corral.errors import CorralError
from tests.conftest import FakeAgent
from tests.recovery.conftest import check_invariants, kill_leftovers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

BASE_SEED = int(os.environ.get("CORRAL_KILL_SEED") or time.time_ns() % 1_000_000_007)

AGENT_KILLS = 40
SUPERVISOR_KILLS = 35
DAEMON_KILLS = 30
#: Each loop runs in parts, each a test of its own (its own task, its own seed), whose kills add up to
#: the loop's total above: no one test holds a worker of a parallel run for the whole loop.
PARTS = 2


def share(total: int, part: int) -> int:
    """The kills of part ``part`` of a loop of ``total``: the parts' shares add up to it."""
    return total // PARTS + (1 if part < total % PARTS else 0)


#: A turn of the fake agent: output, some work in the worktree, a result — about a second in all.
WORK = [
    {"init": True},
    {"text": "looking"},
    {"sleep": 0.3},
    {"write": {"path": "work.txt", "content": "work in progress\n"}},
    {"text": "still going"},
    {"sleep": 0.3},
    {"result": "done"},
]


class Seeded(random.Random):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> Seeded:
    seed = BASE_SEED ^ zlib.crc32(request.node.name.encode())
    print(f"\nkill-loop seed: CORRAL_KILL_SEED={BASE_SEED} ({request.node.name}: {seed})")
    return Seeded(seed)


@pytest.fixture
def kproj(rproj: Project, agent: FakeAgent) -> Iterator[Project]:
    """``rproj`` (auto-resume on, 1 s grace), with every process a loop left behind stopped."""
    yield rproj
    with rproj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        reap_turn(rproj, task_id, grace=0.2)
    kill_leftovers(agent)


# -- helpers -------------------------------------------------------------------------------------


def current(proj: Project, task_id: str) -> Any:
    with proj.store.read() as tx:
        return tx.get_task(task_id)


def status_json(proj: Project, task_id: str) -> dict[str, Any]:
    return proto.read_raw(proj.paths.protocol_dir(task_id) / proto.STATUS) or {}


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def is_ours(pid: int, key: str, proj: Project, task_id: str) -> bool:
    """The pid still names this task's supervisor or agent (pids get reused; never kill a stranger)."""
    if not pid_alive(pid):
        return False
    line = cmdline(pid)
    if key == "pid":
        return "corral.engine.runtime.supervisor" in line and task_id in line
    # The fake agent runs as a script (corral/testing/fake_agent.py), or as a module where a test starts it so.
    return "corral/testing/fake_agent.py" in line or "corral.testing.fake_agent" in line


def nudge(proj: Project, task_id: str, submitted: list[str], seed: int) -> None:
    """A person keeps the task busy: feedback when it is blocked, a resume once the breaker tripped."""
    task = current(proj, task_id)
    try:
        if task.status is Status.BLOCKED:
            text = f"feedback #{len(submitted) + 1} for {task.ref} (seed {seed})"
            turns.unblock(proj, task.ref, actor=Actor.HUMAN, message=text)
            submitted.append(text)
        elif task.status is Status.INTERRUPTED and not resumable(proj, task_id):
            turns.resume(proj, task.ref, actor=Actor.HUMAN)  # the breaker tripped (or a cause it never takes)
    except CorralError:
        pass  # the status moved under us (a reconciler got there first): look again next time


def running_target(proj: Project, task_id: str, key: str, timeout: float = 30) -> tuple[int, str] | None:
    """The live pid under ``key`` in the running turn's status.json (and its command id),
    or None once the turn ended before one showed up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = status_json(proj, task_id)
        pid, command_id = status.get(key), status.get("command_id")
        if isinstance(pid, int) and isinstance(command_id, str) and is_ours(pid, key, proj, task_id):
            return pid, command_id
        sup = status.get("pid")
        if not (isinstance(sup, int) and pid_alive(sup)):
            settle(proj)  # the turn may have ended: let its receipt move the task on
            if current(proj, task_id).status is not Status.WORKING:
                return None
        time.sleep(0.01)
    raise AssertionError(f"no live {key} showed up in {timeout} s")


def absorb(proj: Project, task_id: str, killed_command: str, timeout: float = 30) -> None:
    """Reconcile until the killed turn is recorded: the task rests, or a new turn runs with a live owner."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        settle(proj)
        task = current(proj, task_id)
        if task.status is not Status.WORKING:
            return
        status = status_json(proj, task_id)
        pid = status.get("pid")
        if status.get("command_id") != killed_command and isinstance(pid, int) and pid_alive(pid):
            return
        time.sleep(0.03)
    raise AssertionError(f"the killed turn {killed_command} was not recorded within {timeout} s")


def finish(proj: Project, agent: FakeAgent, task_ids: list[str], submitted: list[str], seed: int) -> None:
    """Drive every task to rest blocked after a completed turn; then nothing may be missing."""
    agent.script(default=WORK)  # from here on the agent works normally
    for task_id in task_ids:
        ref = current(proj, task_id).ref
        for _ in range(12):
            result = control.wait(proj, ref, timeout=60)
            assert not result.timed_out, f"{ref} did not come to rest (seed {seed})"
            if result.task.status is Status.BLOCKED:
                break
            assert result.task.status is Status.INTERRUPTED, (result.task.status, seed)
            turns.resume(proj, ref, actor=Actor.HUMAN)
        assert current(proj, task_id).status is Status.BLOCKED, f"{ref} did not finish (seed {seed})"
    checked(proj, agent, submitted)
    with proj.store.read() as tx:
        for task_id in task_ids:
            history = tx.turns(task_id)
            last = [t for t in history if t.role is Role.AGENT][-1]
            assert last.kind != "error" and last.content == "done", (last.kind, last.content, seed)
            feedback = [t for t in history if t.kind == "unblock" and t.role is Role.HUMAN]
            task = tx.get_task(task_id)
            assert task is not None and task.resting_cause is None, seed
            # every feedback given is there, once, in order, and was delivered and consumed
            assert [t.content for t in feedback] == [f for f in submitted if f" for {task.ref} (" in f], seed
            assert all(t.feedback_delivery is FeedbackDelivery.CONSUMED for t in feedback), seed


def story(proj: Project, agent: FakeAgent) -> str:
    """What happened, for a failure message: each task's turns and status changes, the agents."""
    lines = []
    with proj.store.read() as tx:
        for task in tx.tasks():
            lines.append(f"task {task.ref} {task.status.value} cause={task.resting_cause and task.resting_cause.code}")
            events = [(t.started_at, f"turn {t.sequence} {t.role.value} {t.kind} cmd={t.command_id}")
                      for t in tx.turns(task.id)]  # fmt: skip
            events += [(c.at, f"  {c.from_status and c.from_status.value} -> {c.to_status.value} ({c.reason})")
                       for c in tx.status_changes(task.id)]  # fmt: skip
            lines += [f"  {at:%H:%M:%S.%f} {what}" for at, what in sorted(events, key=lambda e: e[0])]
    for call in agent.calls():
        alive = "ALIVE" if pid_alive(call["pid"]) else "dead"
        lines.append(f"agent pid {call['pid']} at {call['at']:.3f} {alive} in {Path(call['cwd']).name}")
    return "\n".join(lines[-400:])


def checked(proj: Project, agent: FakeAgent, submitted: list[str], *, settled: bool = True) -> None:
    try:
        check_invariants(proj, agent, submitted, settled=settled)
    except AssertionError:
        print(story(proj, agent))
        raise


def kill_loop(proj: Project, agent: FakeAgent, rng: Seeded, *, key: str, kills: int, max_delay: float) -> None:
    seed = rng.seed_value
    agent.script(default=WORK)
    task = tasks.create(proj, f"Survive kill -9 of the {key}", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    submitted: list[str] = []
    done = missed = 0
    deadline = time.monotonic() + 150
    phases: Counter[str] = Counter()
    while done < kills:
        assert time.monotonic() < deadline, f"the loop ran out of time after {done} kills (seed {seed})"
        if current(proj, task.id).status is not Status.WORKING:
            nudge(proj, task.id, submitted, seed)
            settle(proj)  # an interrupted task that may auto-resume does so here
            continue
        target = running_target(proj, task.id, key)
        if target is None:
            continue
        pid, command_id = target
        # A third of the moments fall early (while it syncs, spawns, starts up), the rest anywhere.
        time.sleep(rng.uniform(0, 0.15) if rng.random() < 1 / 3 else rng.uniform(0, max_delay))
        phase = str(status_json(proj, task.id).get("phase"))
        if not is_ours(pid, key, proj, task.id):
            missed += 1  # it finished first; that is a moment too, but not a kill
            continue
        os.kill(pid, signal.SIGKILL)
        done += 1
        phases[phase] += 1
        checked(proj, agent, submitted, settled=False)
        absorb(proj, task.id, command_id)
        checked(proj, agent, submitted)
    print(f"{key}: {done} kills ({missed} missed) by supervisor phase: {dict(phases)}; feedback {len(submitted)}")
    finish(proj, agent, [task.id], submitted, seed)
    with proj.store.read() as tx:
        history = tx.turns(task.id)
        crashes = [c for c in tx.status_changes(task.id) if c.to_status is Status.INTERRUPTED]
    # The kills were crashes corral saw (a few land after the receipt was written: no crash then).
    assert len(crashes) >= done * 0.5, (len(crashes), done, seed)
    assert all(c.actor is Actor.SYSTEM for c in crashes), seed
    assert any(t.kind == "auto-resume" and t.actor is Actor.SYSTEM for t in history), seed


# -- the loops -----------------------------------------------------------------------------------


def test_the_parts_of_each_loop_add_up_to_its_kills():
    for total in (AGENT_KILLS, SUPERVISOR_KILLS, DAEMON_KILLS):
        assert sum(share(total, part) for part in range(PARTS)) == total
        assert all(share(total, part) >= total // PARTS > 0 for part in range(PARTS))
    assert AGENT_KILLS + SUPERVISOR_KILLS + DAEMON_KILLS == 105  # the module's word


@pytest.mark.parametrize("part", range(PARTS))
def test_kill_9_the_agent_at_random_moments(kproj, agent, rng, part):
    kill_loop(kproj, agent, rng, key="agent_pid", kills=share(AGENT_KILLS, part), max_delay=0.9)


@pytest.mark.parametrize("part", range(PARTS))
def test_kill_9_the_supervisor_at_random_moments(kproj, agent, rng, part):
    kill_loop(kproj, agent, rng, key="pid", kills=share(SUPERVISOR_KILLS, part), max_delay=1.0)


def spawn_daemon(proj: Project, trace: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, CORRAL_AUTO_RESUME="1", CORRAL_CRASH_TRACE=str(trace))
    out = proj.paths.root / "kill-loop-daemon.out"
    with open(out, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "corral", "daemon", "run", "--tick", "0.25"],  # the home's: serves proj
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=fh,
            start_new_session=True,
        )


def lock_holders(proj: Project) -> list[str]:
    """Who holds the home daemon's flock, from /proc/locks (pid and command line)."""
    inode = daemons.lock_file().stat().st_ino
    holders = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[5].endswith(f":{inode}"):
            holders.append(f"{fields[4]} {cmdline(int(fields[4]))[:200]}")
    return holders


def served_count() -> int:
    """How many times a daemon of this home has begun serving a project (its log's ``serving`` events)."""
    log = daemons.log_file()
    return log.read_text(errors="replace").count(" INFO serving {") if log.exists() else 0


def last_daemon_point(trace: Path) -> str:
    """Where the daemon was when it died: the last crash point it passed (supervisors it spawned
    inherit the trace variable; their points are left out)."""
    if not trace.exists():
        return "before any point"
    points = [p for p in trace.read_text().split() if not p.startswith("supervisor.")]
    return points[-1].split("#")[0] if points else "before any point"


@pytest.mark.parametrize("part", range(PARTS))
def test_kill_9_the_daemon_at_random_moments(kproj, agent, rng, tmp_path, part):
    """The daemon is the only reconciler while it runs; it is killed every 0.05–1.5 s and started
    again, while two tasks work, finish, crash (the agent kills itself) and get feedback."""
    seed = rng.seed_value
    crash = [{"init": True}, {"text": "about to crash"}, {"sleep": 0.2}, {"kill": "KILL"}]

    def committed(n: int) -> list[dict[str, Any]]:
        write = {"write": {"path": f"work-{n}.txt", "content": f"work {n}\n"}}
        return [*WORK[:3], write, {"commit": f"agent work {n}"}, *WORK[4:]]

    agent.script(*[crash if rng.random() < 0.35 else committed(n) for n in range(400)], default=WORK)
    ids = []
    for n in (1, 2):
        task = tasks.create(kproj, f"Under a dying daemon {n}", actor=Actor.HUMAN)
        turns.start(kproj, task.ref, actor=Actor.HUMAN)
        ids.append(task.id)
    submitted: list[str] = []
    where: Counter[str] = Counter()
    lingering = 0
    deadline = time.monotonic() + 150
    kills = share(DAEMON_KILLS, part)
    for i in range(kills):
        assert time.monotonic() < deadline, f"out of time after {i} daemon kills (seed {seed})"
        trace = tmp_path / f"daemon-{i}.trace"
        served_before = served_count()
        proc = spawn_daemon(kproj, trace)
        # A third of the moments fall anywhere from the spawn (start-up included); the rest in the
        # daemon's working life, from when it serves the project: on a loaded machine its start-up
        # alone can outlast the whole window, and a kill there exercises no recovery at all.
        working_life = rng.random() >= 1 / 3
        span = rng.uniform(0.05, 1.5)
        until = time.monotonic() + span
        started = time.monotonic()
        while time.monotonic() < until:
            for task_id in ids:
                nudge(kproj, task_id, submitted, seed)
            time.sleep(0.02)
            if working_life and served_count() == served_before:
                assert time.monotonic() - started < 30, f"daemon {i} never served the project (seed {seed})"
                until = time.monotonic() + span
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        where[last_daemon_point(trace)] += 1
        # The flock dies with it: no daemon is seen running, and a new one can start. (A child the
        # daemon forked at that very instant shares the lock's open file until it execs: allow
        # that moment, never a lock that stays.)
        if daemons.state().running:
            lingering += 1
            held = time.monotonic() + 2
            while daemons.state().running:
                assert time.monotonic() < held, f"the killed daemon's lock is still held: {lock_holders(kproj)} {seed}"
                time.sleep(0.01)
        checked(kproj, agent, submitted, settled=False)
    print(
        f"daemon: {kills} kills; last point passed before each: {dict(where)}; feedback {len(submitted)}; "
        f"lock still held for a moment after {lingering} kills"
    )
    with kproj.store.read() as tx:
        history = [t for task_id in ids for t in tx.turns(task_id)]
    assert any(t.kind == "auto-resume" and t.actor is Actor.SYSTEM for t in history), "the daemon resumed nothing"
    assert any(t.role is Role.AGENT and t.kind != "error" for t in history), "no turn completed under the daemon"
    finish(kproj, agent, ids, submitted, seed)


# -- the moment the loops can hit but rarely, made exact ------------------------------------------

#: A supervisor that dies (as under SIGKILL: no cleanup) the instant after it spawned its agent,
#: before its status.json names that agent: a window of microseconds the random loops may hit.
DIES_BEFORE_NAMING_ITS_AGENT = r"""
import os, sys
from corral.engine.runtime import heartbeat as h
from corral.engine.runtime import supervisor as s
original = h.StatusReporter.update
def update(self, **changes):
    if changes.get("agent_pid") is not None:
        os._exit(137)
    original(self, **changes)
h.StatusReporter.update = update
sys.exit(s.main(sys.argv[1:]))
"""


def test_a_supervisor_killed_before_it_names_its_agent_leaves_no_second_agent(kproj, agent, monkeypatch):
    """BUG: never two live agents for one task. The supervisor spawns the agent in a session of
    its own and only then writes ``agent_pid`` to status.json; killed in between, it leaves an
    agent nobody knows of. ``lost()``/``reap_turn`` stop only the pids status.json names, so the
    auto-resumed turn's agent runs beside the orphan in the same worktree (until the orphan next
    writes to its dead stdout pipe)."""
    from corral.engine.operations import launch

    # The orphan is busy without output (a long tool run, say): its first write would hit a
    # closed pipe and end it, so it is the silent stretch that overlaps the next turn.
    agent.script([{"sleep": 20}, {"init": True}, {"result": "orphan"}], default=WORK)
    real = launch.spawn_supervisor
    spawned: list[int] = []

    def spawn(protocol_dir: Path, log_path: Path, token: str | None = None) -> int:
        if spawned:
            return real(protocol_dir, log_path, token)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", DIES_BEFORE_NAMING_ITS_AGENT, str(protocol_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        spawned.append(proc.pid)
        return proc.pid

    monkeypatch.setattr(launch, "spawn_supervisor", spawn)
    task = tasks.create(kproj, "Orphaned agent", actor=Actor.HUMAN)
    turns.start(kproj, task.ref, actor=Actor.HUMAN)
    deadline = time.monotonic() + 20
    while not (agent.calls() and not pid_alive(spawned[0])):
        assert time.monotonic() < deadline, "the patched supervisor did not spawn its agent and die"
        time.sleep(0.02)
    orphan = agent.calls()[0]["pid"]
    assert pid_alive(orphan) and status_json(kproj, task.id).get("agent_pid") is None
    settle(kproj)  # the turn is lost → interrupted → auto-resumed
    deadline = time.monotonic() + 20
    while len(agent.calls()) < 2:
        assert time.monotonic() < deadline, "the task was not auto-resumed"
        time.sleep(0.02)
    assert not pid_alive(orphan), "the lost turn's agent still runs beside the resumed turn's agent"


def test_a_reconcile_between_an_unblock_and_its_launch_leaves_the_new_turn_alone(kproj, agent, monkeypatch, repo):
    """BUG (found by the daemon loop as two live agents for one task): ``unblock`` commits the
    move to working, then launches. A reconciler that runs in between (the daemon's tick, or any
    CLI read command) finds the task working while ``status.json`` is still the previous, finished
    turn's, naming a dead supervisor. Since a status.json exists, the grace period does not
    apply: the new turn is declared lost before it started ("the supervisor ended without a
    receipt"), the task is interrupted and auto-resumed, and that resumed turn races the unblock's
    own launch — two supervisors, two agents, or one killing the other."""
    from corral.engine.operations import launch

    agent.script(default=WORK)
    task = tasks.create(kproj, "Unblocked under a busy reconciler", actor=Actor.HUMAN)
    turns.start(kproj, task.ref, actor=Actor.HUMAN)
    assert control.wait(kproj, task.ref, timeout=30).task.status is Status.BLOCKED
    real = launch.launch
    others: list[subprocess.CompletedProcess[str]] = []

    def launch_after_another_reconciler(project: Project, t: Any, command: dict[str, Any]) -> Any:
        # Another process reconciles at exactly this moment (a daemon tick, `corral list`).
        others.append(
            subprocess.run(
                [sys.executable, "-m", "corral", "list"], cwd=repo, capture_output=True, text=True, timeout=60
            )
        )
        return real(project, t, command)

    monkeypatch.setattr(launch, "launch", launch_after_another_reconciler)
    turns.unblock(kproj, task.ref, actor=Actor.HUMAN, message="carry on")
    monkeypatch.setattr(launch, "launch", real)
    assert others and others[0].returncode == 0, others[0].stderr
    result = control.wait(kproj, task.ref, timeout=30)
    for _ in range(5):
        if result.task.status is Status.BLOCKED:
            break
        if result.task.status is Status.INTERRUPTED:
            turns.resume(kproj, task.ref, actor=Actor.HUMAN)
        result = control.wait(kproj, task.ref, timeout=30)
    checked(kproj, agent, ["carry on"])
    with kproj.store.read() as tx:
        moves = [(c.from_status, c.to_status, c.reason) for c in tx.status_changes(task.id)]
    assert moves[-2:] == [
        (Status.BLOCKED, Status.WORKING, "unblock"),
        (Status.WORKING, Status.BLOCKED, "unblock turn completed"),
    ], story(kproj, agent)
    assert len(agent.calls()) == 2, story(kproj, agent)  # the start and the unblock, nothing else
