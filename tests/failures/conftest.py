"""Fixtures for "every stop explained": real causes, through the database, to `show` and `--json`."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor
from corral.domain.records import Task
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from tests.conftest import CLI, FakeAgent
from tests.support.polling import until


@pytest.fixture
def fproj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """A project on ``repo`` whose claude is the fake agent; auto-resume off, so a stop stays put."""
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    proj = Project.open(repo)
    yield proj
    with proj.store.read() as tx:
        ids = [t.id for t in tx.tasks()]
    for task_id in ids:
        reap_turn(proj, task_id, grace=0.2)
    for call in agent.calls():
        try:
            os.kill(call["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    proj.close()


def reopen(proj: Project) -> Project:
    """The same repository opened again, reading settings changed since (env vars)."""
    proj.close()
    return Project.open(proj.repo)


def new_task(proj: Project, goal: str = "Add a greeting", **kw: Any) -> Task:
    return tasks.create(proj, goal, actor=Actor.HUMAN, **kw)


def run_start(proj: Project, task: Task, timeout: float = 40) -> Task:
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=timeout)
    assert not result.timed_out, result.task
    return result.task


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    return until(predicate, timeout, what)


def live_supervisor(proj: Project, task: Task) -> tuple[int, int]:
    """The running turn's supervisor and agent pids, once both are alive."""

    def both() -> tuple[int, int] | None:
        status = proto.read_raw(proj.paths.protocol_dir(task.id) / proto.STATUS) or {}
        sup, agent = status.get("pid"), status.get("agent_pid")
        if isinstance(sup, int) and isinstance(agent, int) and pid_alive(sup) and pid_alive(agent):
            return sup, agent
        return None

    return wait_for(both, 20, "the supervisor and its agent to run")


def kill_supervisor(proj: Project, task: Task) -> None:
    """SIGKILL the turn's supervisor and its agent (no receipt is written)."""
    sup, agent_pid = live_supervisor(proj, task)
    for pid in (sup, agent_pid):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(sup), 10, "the supervisor to die")


def show_text(corral: CLI, ref: str, *extra: str) -> str:
    out = corral.ok("show", ref, *extra).stdout
    assert "Traceback" not in out
    return out


def show_json(corral: CLI, ref: str) -> dict[str, Any]:
    doc: dict[str, Any] = corral.json("show", ref)
    return doc


def line_after(text: str, label: str) -> str:
    """The rest of the line that starts with ``label`` (e.g. "Stopped because:")."""
    for line in text.splitlines():
        if line.startswith(label):
            return line[len(label) :].strip()
    raise AssertionError(f"no '{label}' line in:\n{text}")


def diagnostic_files(proj: Project) -> list[Path]:
    root = proj.paths.diagnostics
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
