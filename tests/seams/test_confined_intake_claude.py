"""A confined turn through corral's shell, with the real Claude Code (issue 30): null intents are undeclared,
a refused failure_disposition is journaled as nothing, rows read as text, and the shell masks the secrets
of the agent's own environment, which the daemon serving the shell never had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI
from tests.seams.test_trusted_runs_claude import result_of
from tests.support.claude import claude_env
from tests.support.model_server import ScriptedServer, Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FAILING = "echo 'boom: the build broke' >&2; echo noise; exit 3"
SECRET = "quince-lantern-2718-harbor"


def bash(command: str, **intent: Any) -> ToolUse:
    return ToolUse("mcp__corral__bash", {"command": command, **intent})


@pytest.fixture
def rig(claude: Path, claude_home: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    server = ScriptedServer([])
    env = claude_env(server, claude_home)
    env.update(
        {
            "CORRAL_CLAUDE_BIN": str(claude),
            "CORRAL_SANDBOX": "bwrap",
            "CORRAL_AGENT_TOOLS": "1",
            "CORRAL_AUTO_RESUME": "0",
        }
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MY_DEPLOY_TOKEN", raising=False)
    (claude_home / ".claude.json").write_text("{}")
    corral = CLI(repo)
    yield server, corral
    corral("daemon", "stop")
    server.close()


def test_nulls_refusals_rows_and_secrets_of_a_confined_turn(rig: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, corral = rig
    server.steps.extend(
        [
            bash(FAILING, operationId=None, attemptId=None, expectedExitCodes=None, timeout_seconds=None),  # 1
            bash(FAILING, attemptId=""),  # 2: an empty optional string: undeclared
            bash(FAILING),  # 3: the same operation's third failure
            ToolUse(  # 4: refused whole (an unknown target): nothing is written
                "mcp__corral__failure_disposition",
                {"disposition": "superseded", "targets": ["nope"], "reason": "x", "evidence": None},
            ),
            bash(f"echo {SECRET}"),  # 5: the agent's secret, which the daemon never had
            Text("Done."),
        ]
    )
    corral.ok("daemon", "start")  # the daemon that serves the shell runs without the variable
    monkeypatch.setenv("MY_DEPLOY_TOKEN", SECRET)  # the turn (its supervisor, its agent) has it
    corral.ok("create", "Build it", "--ref", "build", "--harness", "claude")
    corral.ok("start", "build", "--wait", "--timeout", "150")
    results = [result_of(server, i) for i in range(1, 6)]
    for ran in results[:3]:
        assert ran["is_error"] and ran["doc"]["exit_code"] == 3, ran  # ran: no intent was refused
    assert results[3]["is_error"] and results[3]["doc"]["error"]["code"] == "disposition-refused"
    assert SECRET not in json.dumps(results[4]["doc"]) and "[redacted]" in results[4]["doc"]["stdout"]
    rows = corral.json("failures", "build", "--history")["failures"]["rows"]
    assert len(rows) == 1, rows  # one operation; the refused disposition is no incident
    (row,) = rows
    assert row["label"] == "Action required" and row["failures"] == 3
    assert row["summary"] == f"mcp__corral__bash failed: {FAILING} exited 3: boom: the build broke"
    text = corral.ok("failures", "build").stdout
    assert "corral_shell" not in text and "exited 3: boom: the build broke" in text
