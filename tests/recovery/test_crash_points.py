"""Every durability point of start, unblock, resume, the supervisor and the reconciler, crashed.

For each operation, the points it passes are enumerated (``CORRAL_CRASH_TRACE``); then,
for each point, a fresh CLI process runs the operation and dies exactly there
(``CORRAL_CRASH_AT``). A reconcile from a fresh process must reach a legal, recoverable
state where the invariants hold, and the task's work must still finish.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.runtime import protocol
from tests.recovery.conftest import check_invariants
from tests.turns.conftest import ok

SLOW_OK = [{"init": True}, {"text": "working"}, {"sleep": 0.3}, {"result": "done"}]
#: The points of start and of unblock are crashed in parts, each a test of its own that traces the
#: operation and crashes every ``PARTS``-th point: together the parts crash every point once.
PARTS = 3


def cli(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "corral", *args], cwd=repo, env=full, capture_output=True, text=True, timeout=60
    )


def trace(repo: Path, tmp: Path, *args: str) -> list[str]:
    """The crash points one run of ``corral ARGS`` passes, in order, supervisor included."""
    path = tmp / f"trace-{time.monotonic_ns()}"
    result = cli(repo, *args, env={"CORRAL_CRASH_TRACE": str(path)})
    assert result.returncode == 0, result.stderr
    time.sleep(1.0)  # let the supervisor reach its last points
    points = list(dict.fromkeys(path.read_text().split())) if path.exists() else []
    assert points, "the operation passed no crash point"
    return points


def settle(project: Project, ref: str) -> None:
    """Recover from a fresh process's point of view, then drive the task until its work finishes."""
    for _ in range(4):
        result = control.wait(project, ref, timeout=20)
        task = result.task
        if task.status is Status.BLOCKED:
            return
        if task.status is Status.BACKLOG:
            turns.start(project, ref, actor=Actor.HUMAN)
        elif task.status is Status.INTERRUPTED:
            turns.resume(project, ref, actor=Actor.HUMAN)
    raise AssertionError(f"{ref} did not finish: {task.status}")


@pytest.fixture
def env_for_crashes(rproj, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    return rproj


def fresh(project: Project) -> Project:
    project.close()
    return Project.open(project.repo)


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_every_crash_point_of_start(env_for_crashes, agent, repo, tmp_path, part):
    proj = env_for_crashes
    agent.script(default=SLOW_OK)
    tasks.create(proj, "Probe", actor=Actor.HUMAN, ref="probe")
    points = trace(repo, tmp_path, "start", "probe")
    assert {"start.prepared", "launch.command-written", "supervisor.agent-spawned"} <= {p.split("#")[0] for p in points}
    for i, point in enumerate(points):
        if i % PARTS != part:
            continue  # another part's
        ref = f"start-{i}"
        tasks.create(proj, f"Crash at {point}", actor=Actor.HUMAN, ref=ref)
        died = cli(repo, "start", ref, env={"CORRAL_CRASH_AT": point})
        assert "Traceback" not in died.stderr
        proj = fresh(proj)
        settle(proj, ref)
        check_invariants(proj, agent, [])
        with proj.store.read() as tx:
            task = tx.task_by_ref(ref)
            start_turns = [t for t in tx.turns(task.id) if t.kind == "start" and t.role is Role.HUMAN]
        # the first turn's instructions were delivered and consumed exactly once, whatever happened
        assert [t.feedback_delivery for t in start_turns] == [FeedbackDelivery.CONSUMED], point


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_every_crash_point_of_unblock(env_for_crashes, agent, repo, tmp_path, part):
    proj = env_for_crashes
    agent.script(default=SLOW_OK)
    submitted: list[str] = []
    probe = tasks.create(proj, "Probe", actor=Actor.HUMAN, ref="probe")
    turns.start(proj, probe.ref, actor=Actor.HUMAN)
    control.wait(proj, probe.ref, timeout=20)
    points = trace(repo, tmp_path, "unblock", "probe", "-m", "probe feedback")
    submitted.append("probe feedback")
    assert "unblock.committed#1" in points
    for i, point in enumerate(points):
        if i % PARTS != part:
            continue  # another part's
        ref = f"unblock-{i}"
        tasks.create(proj, f"Crash at {point}", actor=Actor.HUMAN, ref=ref)
        turns.start(proj, ref, actor=Actor.HUMAN)
        control.wait(proj, ref, timeout=20)
        feedback = f"feedback for {point}"
        died = cli(repo, "unblock", ref, "-m", feedback, env={"CORRAL_CRASH_AT": point})
        assert "Traceback" not in died.stderr
        proj = fresh(proj)
        settle(proj, ref)
        with proj.store.read() as tx:
            task = tx.task_by_ref(ref)
            stored = [t for t in tx.turns(task.id) if t.kind == "unblock"]
        if stored:  # the human turn was committed: it must be delivered and consumed by now
            submitted.append(feedback)
            assert stored[0].content == feedback
            assert stored[0].feedback_delivery is FeedbackDelivery.CONSUMED, point
        else:  # the CLI died before saving it: it never told the person it was saved
            assert point.startswith("store.before-commit"), point
        check_invariants(proj, agent, submitted)


@pytest.mark.slow
def test_every_crash_point_of_the_reconciler(env_for_crashes, agent, repo, tmp_path):
    proj = env_for_crashes
    agent.script(default=ok("finished"))

    def finished_unreconciled(ref: str) -> None:
        tasks.create(proj, f"Reconcile {ref}", actor=Actor.HUMAN, ref=ref)
        started = turns.start(proj, ref, actor=Actor.HUMAN)
        deadline = time.monotonic() + 20
        while not (started.launched.protocol_dir / protocol.RESPONSE).exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)

    finished_unreconciled("probe")
    points = trace(repo, tmp_path, "list")
    assert "reconcile.after-claim#1" in points
    for i, point in enumerate(points):
        ref = f"rec-{i}"
        finished_unreconciled(ref)
        died = cli(repo, "list", env={"CORRAL_CRASH_AT": point})
        assert "Traceback" not in died.stderr
        proj = fresh(proj)
        result = control.wait(proj, ref, timeout=20)
        assert result.task.status is Status.BLOCKED, point
        with proj.store.read() as tx:
            answers = [t for t in tx.turns(result.task.id) if t.role is Role.AGENT]
        assert [a.content for a in answers] == ["finished"], point  # recorded exactly once
        check_invariants(proj, agent, [])


@pytest.mark.parametrize(
    "point",
    ["supervisor.started", "supervisor.agent-spawned", "supervisor.before-response", "supervisor.after-response"],
)
def test_supervisor_dies_at_each_point(env_for_crashes, agent, repo, point):
    proj = env_for_crashes
    agent.script([{"init": True}, {"sleep": 0.5}, {"result": "first try"}], default=ok("after recovery"))
    tasks.create(proj, "Supervisor crash", actor=Actor.HUMAN, ref="sup")
    died = cli(repo, "start", "sup", env={"CORRAL_CRASH_AT": point})
    assert died.returncode == 0, died.stderr  # the CLI itself lived; its supervisor died
    proj = fresh(proj)
    settle(proj, "sup")
    check_invariants(proj, agent, [])
    with proj.store.read() as tx:
        task = tx.task_by_ref("sup")
        answers = [t.content for t in tx.turns(task.id) if t.role is Role.AGENT and t.kind != "error"]
    if point == "supervisor.after-response":
        assert answers == ["first try"]  # the receipt was written: nothing was lost, nothing redone
    elif point == "supervisor.started":
        assert answers == ["first try"] and len(agent.calls()) == 1  # no agent had started before the crash
    else:
        # The orphaned agent was stopped (it may not even have read its script yet) and the
        # turn ran again: exactly one completed answer is on record.
        assert len(answers) == 1 and answers[0] in ("first try", "after recovery")


def test_trace_names_are_stable(tmp_path):
    """The points tests rely on exist in the code (a rename must update the tests)."""
    source = Path(__file__).resolve().parents[2] / "src" / "corral"
    text = "".join(p.read_text() for p in source.rglob("*.py"))
    for name in (
        "start.prepared",
        "start.committed",
        "unblock.committed",
        "resume.committed",
        "launch.command-written",
        "launch.supervisor-spawned",
        "launch.supervisor-registered",
        "supervisor.started",
        "supervisor.agent-spawned",
        "supervisor.before-response",
        "supervisor.after-response",
        "reconcile.after-claim",
        "store.before-commit",
        "store.after-commit",
    ):
        assert f'"{name}"' in text, name
    json.dumps({})  # keep json imported for readers of recorded receipts
