"""Fixtures for turns run by the real supervisor with the scenario-driven fake agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent


def ok(result: str = "Done.") -> list[dict[str, Any]]:
    return [{"init": True}, {"text": "working"}, {"result": result}]


@pytest.fixture
def proj(agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A project on ``repo`` with the real clock, whose claude is the fake agent."""
    from corral.engine.project import Project

    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "30")
    # Crash recovery has its own tests; here an interrupted task stays interrupted.
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    p = Project.open(repo)
    yield p
    p.close()


def reopen(project):  # type: ignore[no-untyped-def]
    """The same repository opened again, reading settings changed since (env vars)."""
    from corral.engine.project import Project

    project.close()
    return Project.open(project.repo)
