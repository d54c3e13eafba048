"""The real Claude Code on both sides of corral's MCP tools, scripted by the loopback model server.

As the task agent: corral launches it with the daemon's endpoint and the turn's token; it creates
a subtask, starts it, waits on it (its own task reads ``waiting on kid`` meanwhile), posts
progress, accepts the subtask into its own branch and is refused accepting itself; then the
person accepts the parent and the subtask's work is on the target.

As a builder: a person's ``claude mcp add corral -- corral mcp``, then ``claude -p`` creates and
starts a task and reads its ``stopped_because``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, git
from tests.support.claude import claude_argv, claude_bin, claude_env, parse_stream
from tests.support.model_server import Text, ToolUse, scripted_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: The subtask's harness: a command that works a little, slowly enough to be waited on.
KID = "sh -c 'sleep 2; echo from the kid > kid.txt && git add -A && git commit -qm kid && echo kid done'"


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        if not key.startswith("CORRAL_"):
            monkeypatch.setenv(key, value)


def tool_result(request: Any) -> dict[str, Any]:
    found = request.tool_results()[-1]  # a request carries the whole conversation: the newest result
    content = found.get("content")
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content or [])
    try:  # Claude Code adds its own advice after an error's text: corral's JSON comes first
        doc, _end = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        raise AssertionError(f"a tool result that is not corral's JSON: {text!r}") from exc
    return {"is_error": bool(found.get("is_error")), "doc": doc}


def test_claude_code_as_the_task_agent(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corral = CLI(repo)
    steps = [
        ToolUse("mcp__corral__create", {"goal": "Child work", "ref": "kid", "harness": "command"}),
        ToolUse("mcp__corral__start", {"task": "kid"}),
        ToolUse("mcp__corral__wait", {"task": "kid"}),
        ToolUse("mcp__corral__update_progress", {"message": "merging the kid"}),
        ToolUse("mcp__corral__accept", {"task": "kid"}),
        ToolUse("mcp__corral__accept", {"task": "parent"}),
        Text("All done."),
    ]
    with scripted_server(steps) as server:
        use_env(monkeypatch, claude_env(server, tmp_path / "claude-home"))
        monkeypatch.setenv("CORRAL_AGENT_TOOLS", "1")
        monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(claude_bin()))
        monkeypatch.setenv("CORRAL_COMMAND", KID)
        try:
            corral.ok("create", "Parent work", "--ref", "parent", "--harness", "claude")
            corral.ok("start", "parent")
            waiting = None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                doc = corral.json("show", "parent")
                if "waiting on kid" in (doc["task"]["substate"] or ""):
                    waiting = doc["task"]["substate"]
                if doc["task"]["status"] != "working":
                    break
                time.sleep(0.2)
            assert waiting is not None and waiting.startswith("waiting on kid ("), doc
            assert doc["task"]["status"] == "blocked", doc
            results = [tool_result(r) for r in server.script_requests[1:7]]
            created, started, waited, progress, accepted, self_accept = results
            assert not created["is_error"] and created["doc"]["task"]["parent"] == "parent"
            assert not started["is_error"] and started["doc"]["task"]["status"] == "working"
            assert waited["doc"]["rests"] is True and waited["doc"]["task"]["status"] == "blocked"
            assert progress["doc"] == {"message": "merging the kid", "truncated": False}
            assert not accepted["is_error"] and accepted["doc"]["task"]["status"] == "complete", accepted
            assert self_accept["is_error"] and self_accept["doc"]["error"]["code"] == "agent-out-of-scope"
            kid = corral.json("show", "kid")
            assert ("complete", "agent") in {(c["to"], c["actor"]) for c in kid["status_changes"]}
            assert "kid.txt" in git(repo, "ls-tree", "-r", "--name-only", "corral/parent").split()
            corral.ok("accept", "parent")
            assert "kid.txt" in git(repo, "ls-tree", "-r", "--name-only", "main").split()
        finally:
            corral("daemon", "stop")


def test_claude_code_as_a_builder_over_stdio(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [
        ToolUse("mcp__corral__create", {"goal": "Build the thing", "ref": "built"}),
        ToolUse("mcp__corral__start", {"task": "built"}),
        ToolUse("mcp__corral__wait", {"task": "built"}),
        Text("Started it; it stopped."),
    ]
    with scripted_server(steps) as server:
        env = claude_env(server, tmp_path / "claude-home")
        env.update({k: v for k, v in __import__("os").environ.items() if k.startswith("CORRAL_")})
        env["CORRAL_HARNESS"] = "command"
        env["CORRAL_COMMAND"] = "sh -c 'echo cannot build >&2; exit 3'"
        env["CORRAL_AUTO_RESUME"] = "0"  # the failed turn rests the task at once, its cause stated
        env["CORRAL_BUDGET_UNKNOWN"] = "1"  # corral's own ladder: one attempt of an unclassified failure
        added = subprocess.run(
            [str(claude_bin()), "mcp", "add", "corral", "--", sys.executable, "-m", "corral", "mcp"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert added.returncode == 0, added.stderr
        argv = claude_argv("Build the thing with corral.", allowed_tools="mcp__corral__*")
        proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        events = parse_stream(proc.stdout)
        assert proc.returncode == 0, proc.stderr
        assert events[-1]["type"] == "result" and events[-1]["result"] == "Started it; it stopped."
        created, started, waited = (tool_result(r) for r in server.script_requests[1:4])
        assert not created["is_error"] and created["doc"]["task"]["ref"] == "built"
        assert not started["is_error"]
        assert waited["doc"]["rests"] is True
        assert waited["doc"]["task"]["status"] == "blocked"  # the ladder gave up: a stated cause
        assert waited["doc"]["stopped_because"], waited["doc"]
        shown = CLI(repo).json("show", "built")
        assert shown["stopped_because"] == waited["doc"]["stopped_because"]
        assert {c["actor"] for c in shown["status_changes"] if c["to"] in ("backlog", "working")} == {"builder"}
