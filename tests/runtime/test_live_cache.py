"""The daemon endpoint's cache of live facts: each running turn's read once per ttl, nothing kept for a resting task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.domain.records import Task
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.engine.runtime import liveness


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Proj:
    class paths:
        root = Path("/state")


def task(status: Status, tid: str = "t1") -> Any:
    return type("T", (), {"id": tid, "status": status})()


def test_a_running_turn_is_read_once_per_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    answers = iter([Live(alive=True, phase="work"), Live(alive=False)])

    def read(_project: Any, t: Task, _observed: Any = None) -> Live:
        reads.append(t.id)
        return next(answers)

    monkeypatch.setattr(liveness, "live_facts", read)
    clock = Clock()
    cache = liveness.LiveCache(ttl=0.5, clock=clock)
    working = task(Status.WORKING)
    assert cache.facts(Proj(), working) == Live(alive=True, phase="work")  # type: ignore[arg-type]
    clock.now += 0.4
    assert cache.facts(Proj(), working) == Live(alive=True, phase="work")  # type: ignore[arg-type]
    assert reads == ["t1"]
    clock.now += 0.2  # past the ttl: read again, and the supervisor's death is seen
    assert cache.facts(Proj(), working) == Live(alive=False)  # type: ignore[arg-type]
    assert reads == ["t1", "t1"]
    assert cache.facts(Proj(), task(Status.BLOCKED)) is None  # type: ignore[arg-type]
    assert reads == ["t1", "t1"]


def test_the_protocol_path_is_the_project_paths_protocol_dir(tmp_path: Path) -> None:
    from corral.engine.paths import ProjectPaths

    paths = ProjectPaths(repo=tmp_path / "repo", home=tmp_path / "home", root=tmp_path / "home" / "projects" / "p")
    project: Any = type("P", (), {"paths": paths})()
    assert liveness.protocol_path(project, "abc123") == str(paths.protocol_dir("abc123"))
