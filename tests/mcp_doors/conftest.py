"""The agent door's fixture: the ``command`` harness runs the scripted MCP agent, the daemon serves it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI

AGENT = Path(__file__).resolve().parents[1] / "support" / "mcp_agent.py"


class Door:
    """The CLI of a repository whose turns' agents are tests/support/mcp_agent.py, and its plan."""

    def __init__(self, cli: CLI, plan: Path, out: Path) -> None:
        self.cli, self.plan, self.out = cli, plan, out

    def script(self, steps: dict[str, list[dict[str, Any]]]) -> None:
        self.plan.write_text(json.dumps(steps))


@pytest.fixture
def door(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Door]:
    """The agent door on; the home daemon a launch starts is stopped after the test."""
    plan, out = tmp_path / "plan.json", tmp_path / "out"
    monkeypatch.setenv("CORRAL_AGENT_TOOLS", "1")
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {AGENT}")
    monkeypatch.setenv("MCP_AGENT_PLAN", str(plan))
    monkeypatch.setenv("MCP_AGENT_OUT", str(out))
    cli = CLI(repo)
    yield Door(cli, plan, out)
    cli("daemon", "stop")
