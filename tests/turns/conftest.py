"""Fixtures for turns run by the real supervisor with the scenario-driven fake agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.testing.fake_agent import wrapper_script


class FakeAgent:
    """Scripts the fake agent's invocations and reads back what each one received."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.record = root / "record"
        self.scenario = root / "scenario.json"
        self.bin = wrapper_script(root / "bin")
        monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(self.bin))
        monkeypatch.setenv("CORRAL_FAKE_SCENARIO", str(self.scenario))
        monkeypatch.setenv("CORRAL_FAKE_RECORD", str(self.record))
        self.script()

    def script(self, *invocations: list[dict[str, Any]], default: list[dict[str, Any]] | None = None) -> None:
        doc: dict[str, Any] = {"invocations": [list(i) for i in invocations]}
        if default is not None:
            doc["default"] = default
        self.scenario.write_text(json.dumps(doc))
        counter = self.record / "fake-agent.count"
        if counter.exists():
            counter.unlink()

    def calls(self) -> list[dict[str, Any]]:
        path = self.record / "invocations.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeAgent:
    return FakeAgent(tmp_path / "agent", monkeypatch)


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
