"""Trusted runs with the real Claude Code: a confined turn's intents and dispositions, through corral's shell.

corral launches Claude Code in its bubblewrap sandbox with the daemon's MCP endpoint; the model
(a scripted loopback server) calls ``mcp__corral__bash`` (the harness's own Bash is disallowed in
a confined turn) and ``mcp__corral__failure_disposition``. The test reads what corral recorded:
the incidents of the session (``corral failures --history --json``), and what ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI
from tests.support.claude import claude_env
from tests.support.model_server import ScriptedServer, Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def bash(command: str, **intent: Any) -> ToolUse:
    return ToolUse("mcp__corral__bash", {"command": command, **intent})


def result_of(server: ScriptedServer, i: int) -> dict[str, Any]:
    """The newest tool result of request ``i`` (corral's JSON first; Claude Code may add advice after it)."""
    found = server.script_requests[i].tool_results()[-1]
    content = found.get("content")
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])
    doc, _end = json.JSONDecoder().raw_decode(text)
    return {"is_error": bool(found.get("is_error")), "doc": doc}


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
    (claude_home / ".claude.json").write_text("{}")
    corral = CLI(repo)
    yield server, corral
    corral("daemon", "stop")
    server.close()


def test_intents_and_dispositions_of_a_confined_turn(rig: Any, repo: Path) -> None:
    server, corral = rig
    server.steps.extend(
        [
            bash("exit 3", operationId="build"),  # 1: fails
            bash("true --fast-flag-changed", operationId="build"),  # 2: passes under the same operation
            bash("grep -q needle /dev/null", expectedExitCodes=[1]),  # 3: a declared no-match
            bash("touch first-run", attemptId="a1"),  # 4: runs
            bash("touch second-run", attemptId="a1"),  # 5: a reused attemptId: never runs
            bash("exit 4", operationId="lint"),  # 6: fails
            ToolUse(
                "mcp__corral__failure_disposition", {"disposition": "superseded", "targets": ["lint"], "reason": "x"}
            ),
            bash("true", attemptId="after-lint"),  # 8: a later success: evidence
            ToolUse(
                "mcp__corral__failure_disposition",
                {
                    "disposition": "superseded",
                    "targets": ["lint"],
                    "reason": "fixed another way",
                    "evidence": "after-lint",
                },
            ),
            Text("Done."),
        ]
    )
    corral.ok("create", "Build it", "--ref", "build", "--harness", "claude")
    corral.ok("start", "build", "--wait", "--timeout", "150")
    shown = corral.json("show", "build")
    assert shown["task"]["status"] == "blocked", shown["stopped_because"]
    assert shown["sandbox"]["mode"] == "bwrap" and shown["agent_tools"]["mcp"] is True, (
        shown["sandbox"],
        shown["agent_tools"],
    )
    assert shown["failure_rule"] == {"rule": "intents", "why": None}
    results = [result_of(server, i) for i in range(1, 10)]
    assert results[0]["doc"]["exit_code"] == 3 and results[0]["is_error"]
    assert results[1]["doc"]["exit_code"] == 0 and not results[1]["is_error"]
    assert results[2]["doc"] == {**results[2]["doc"], "exit_code": 1, "expected": True} and not results[2]["is_error"]
    assert results[4]["is_error"] and results[4]["doc"]["error"]["code"] == "intent-rejected"
    assert results[6]["is_error"] and results[6]["doc"]["error"]["code"] == "disposition-refused"
    assert "lint" in results[6]["doc"]["error"]["hint"] or "exit 4" in results[6]["doc"]["error"]["hint"]
    assert results[8]["doc"]["recorded"] is True, results[8]
    worktree = Path(shown["task"]["worktree"])
    assert (worktree / "first-run").exists() and not (worktree / "second-run").exists()
    incidents = corral.json("failures", "build", "--history", "--raw")["failures"]["rows"]
    by_op = {row["operation"]: row["label"] for row in incidents}
    assert by_op["op:build"] == "Recovered"
    assert by_op["op:lint"] == "Superseded"
    assert "Expected failure" in by_op.values()
    rejected = [row for row in incidents if row["operation"].startswith("intent:")]
    assert len(rejected) == 1 and rejected[0]["label"] == "Unclassified failure observation"
    assert corral.json("failures", "build")["failures"]["rows"] == []  # nothing needs action


def test_the_same_calls_from_an_unconfined_turn_change_nothing(rig: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, corral = rig
    monkeypatch.setenv("CORRAL_SANDBOX", "off")
    server.steps.extend(
        [
            bash("true", operationId="build"),
            ToolUse("mcp__corral__failure_disposition", {"disposition": "expected", "targets": ["x"], "reason": "y"}),
            Text("Done."),
        ]
    )
    corral.ok("create", "Build it loose", "--ref", "loose", "--harness", "claude")
    corral.ok("start", "loose", "--wait", "--timeout", "150")
    shell, disposition = result_of(server, 1), result_of(server, 2)
    assert shell["is_error"] and shell["doc"]["error"]["code"] == "shell-needs-sandbox"
    assert disposition["doc"]["recorded"] is False and disposition["doc"]["ignored"] is True
    loose = corral.json("show", "loose")
    assert loose["sandbox"]["mode"] == "off"
    assert loose["failure_rule"] == {"rule": "exact", "why": "the agent ran unconfined"}
