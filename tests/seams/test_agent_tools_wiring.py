"""Test seam 2 for the agent door: the real Claude Code and Codex reach an MCP server the way the
adapters tell them to (docs/harnesses.md#agent-tools).

A tiny MCP server (:mod:`tests.support.mcp_stub`, the official SDK over streamable HTTP on
loopback) stands in for corral's daemon; the real binary, scripted by its loopback model server
to call the stub's tool, runs the launch the adapter builds from ``TurnRequest.tools``. Each
test checks that the tool was called with the turn's bearer token, that its result reached the
model's next request, and — looked at from the tool call itself, while the harness waits for its
answer — that no process on the machine carries the token in its argv while the endpoint, which
the harness's argv does hold, is found there (so the look is not blind).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import AgentTools, TurnRequest
from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.domain.posture import Posture
from tests.support import responses_server as rs
from tests.support.claude import claude_env
from tests.support.codex import MODEL, codex_bin_or_skip, codex_config_args, codex_env, codex_home_outside_tmp
from tests.support.mcp_stub import Call, McpStub, StubTool, mcp_stub
from tests.support.model_server import Step, Text, ToolUse, scripted_server
from tests.support.pi import HarnessRun, run_launch
from tests.support.scripted_http import ScriptLoop

pytestmark = pytest.mark.timeout(120)

TIMEOUT_SECONDS = 60.0


def argv_holding(needle: str) -> list[int]:
    """The pids whose command line (``/proc/<pid>/cmdline``, readable by any user) contains ``needle``."""
    found = []
    data = needle.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if data in cmdline:
            found.append(int(entry.name))
    return found


class ArgvWatch:
    """At every tool call: who holds the token, and who holds the endpoint, in argv."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.url = ""
        self.seen: list[tuple[list[int], list[int]]] = []

    def __call__(self, call: Call) -> None:
        self.seen.append((argv_holding(self.token), argv_holding(self.url)))


@pytest.fixture
def token() -> str:
    return f"corral-test-{secrets.token_hex(16)}"


@pytest.fixture
def stub(token: str) -> Iterator[tuple[McpStub, ArgvWatch]]:
    watch = ArgvWatch(token)
    tools = (StubTool("ping", "Answer pong.", read_only=True), StubTool("poke", "Change something."))
    with mcp_stub(tools, token=token, on_call=watch, result_text="pong from corral") as server:
        watch.url = server.url
        yield server, watch


def assert_called_with_bearer(server: McpStub, watch: ArgvWatch, token: str, tool: str = "ping") -> None:
    calls = server.tool_calls(tool)
    assert len(calls) == 1, server.calls
    assert calls[0].authorization == f"Bearer {token}"
    # Every HTTP request of the session carried it (the stub answers 401 to any that does not).
    assert server.requests and all(r.headers.get("authorization") == f"Bearer {token}" for r in server.requests)
    assert server.hook_errors == []
    assert len(watch.seen) == len(server.calls)
    for holding_token, holding_url in watch.seen:
        assert holding_token == [], f"the token is in the argv of pids {holding_token}"
        assert holding_url, "the harness's argv was not found: the look at argv saw nothing"


def tools_for(server: McpStub, token: str) -> AgentTools:
    return AgentTools(url=server.url, token=token, timeout_seconds=TIMEOUT_SECONDS)


# ---------------------------------------------------------------------------------------------
# Claude Code


def test_claude_work_calls_corral_with_the_bearer_and_gets_its_answer(
    claude: Path, claude_home: Path, tmp_path: Path, stub: tuple[McpStub, ArgvWatch], token: str
) -> None:
    server, watch = stub
    with scripted_server([ToolUse("mcp__corral__poke", {}), Text("done")]) as model:
        harness = ClaudeHarness(str(claude))
        req = TurnRequest(
            prompt="poke corral",
            cwd=str(tmp_path),
            posture=Posture(permission_mode="acceptEdits", allowed_tools=("Read",)),
            tools=tools_for(server, token),
        )
        launch = harness.work(req)
        run = run_launch(harness, launch, cwd=tmp_path, env=claude_env(model, claude_home), timeout=90)
        assert run.verdict().succeeded, run.describe()
        assert_called_with_bearer(server, watch, token, "poke")
        results = model.script_requests[1].tool_results()
        assert [r.get("is_error", False) for r in results] == [False], results
        assert "pong from corral" in str(results[0]["content"])
        assert model.remaining == []
        assert not any(token in arg for arg in launch.argv)


def test_claude_ask_runs_only_read_tools_in_plan_mode(
    claude: Path, claude_home: Path, tmp_path: Path, stub: tuple[McpStub, ArgvWatch], token: str
) -> None:
    """Plan mode runs an allowed MCP tool only when it is annotated ``readOnlyHint``: corral's read tools."""
    server, watch = stub
    steps: list[Step] = [ToolUse("mcp__corral__ping", {}), ToolUse("mcp__corral__poke", {}), Text("answered")]
    with scripted_server(steps) as model:
        harness = ClaudeHarness(str(claude))
        req = TurnRequest(prompt="what is up?", cwd=str(tmp_path), tools=tools_for(server, token))
        run = run_launch(harness, harness.ask(req), cwd=tmp_path, env=claude_env(model, claude_home), timeout=90)
        assert run.verdict().succeeded, run.describe()
        assert_called_with_bearer(server, watch, token, "ping")
        assert server.tool_calls("poke") == []
        # Each request carries the conversation so far: its last tool result is the newest.
        ping, poke = model.script_requests[1].tool_results()[-1], model.script_requests[2].tool_results()[-1]
        assert "pong from corral" in str(ping["content"]) and not ping.get("is_error")
        assert poke.get("is_error") is True
        assert "Cannot call mcp__corral__poke while in plan mode" in str(poke["content"])


# ---------------------------------------------------------------------------------------------
# Codex


@pytest.fixture
def codex() -> Path:
    return codex_bin_or_skip()


@pytest.fixture
def codex_homes(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with codex_home_outside_tmp() as codex_home:
        yield tmp_path / "home", codex_home


class NamespacedResponses(rs.ResponsesServer):
    """The Responses server, its function calls carrying the ``namespace`` Codex declares MCP
    tools in: Codex 0.171 lists corral's tools as ``{"type": "namespace", "name": "mcp__corral",
    "tools": [{"name": "ping", …}]}`` and runs a call ``{"type": "function_call", "namespace":
    "mcp__corral", "name": "ping", …}``; a plain ``mcp__corral__ping`` is "unsupported call"."""

    def __init__(self, steps: list[rs.Step], namespace: str) -> None:
        self.exhausted_text = "(script exhausted)"
        owner = self

        class Handler(rs._Handler):
            def _function_call(self, step: rs.FunctionCall, index: int) -> dict[str, Any]:
                item = {
                    "type": "function_call",
                    "id": owner.new_id("fc"),
                    "status": "completed",
                    "call_id": step.call_id or owner.new_id("call"),
                    "namespace": namespace,
                    "name": step.name,
                    "arguments": step.arguments_json,
                }
                self._event({"type": "response.output_item.added", "output_index": index, "item": item})
                self._event({"type": "response.output_item.done", "output_index": index, "item": item})
                return item

        Handler.owner = self
        ScriptLoop.__init__(self, steps, Handler, "responses-server")


def codex_turn(
    codex: Path, homes: tuple[Path, Path], cwd: Path, tools: AgentTools, tool: str, *, ask: bool = False
) -> tuple[HarnessRun, NamespacedResponses, list[str]]:
    server = NamespacedResponses([rs.FunctionCall(tool, {}, call_id="call_corral"), rs.Message("done")], "mcp__corral")
    try:
        harness = CodexHarness(str(codex), extra=codex_config_args(server), env={"CODEX_HOME": str(homes[1])})
        req = TurnRequest(prompt="call corral", cwd=str(cwd), model=MODEL, tools=tools)
        launch = harness.ask(req) if ask else harness.work(req)
        run = run_launch(harness, launch, cwd=cwd, env=codex_env(*homes), timeout=90)
    finally:
        server.close()
    return run, server, launch.argv


def output_of(server: NamespacedResponses) -> str:
    outputs = server.script_requests[1].function_call_outputs()
    assert [o["call_id"] for o in outputs] == ["call_corral"], outputs
    return str(outputs[0]["output"])


def test_codex_work_calls_corral_with_the_bearer_and_gets_its_answer(
    codex: Path, codex_homes: tuple[Path, Path], tmp_path: Path, stub: tuple[McpStub, ArgvWatch], token: str
) -> None:
    server, watch = stub
    run, model, argv = codex_turn(codex, codex_homes, tmp_path, tools_for(server, token), "poke")
    assert run.verdict().succeeded, run.describe()
    assert_called_with_bearer(server, watch, token, "poke")
    assert "pong from corral" in output_of(model)
    assert model.remaining == []
    assert not any(token in arg for arg in argv)
    assert [(e.is_error, e.text) for e in run.of("tool_end")] == [(False, "pong from corral")]
    assert [e.name for e in run.of("tool_start")] == ["mcp__corral__poke"]


def test_codex_ask_runs_only_read_tools(
    codex: Path, codex_homes: tuple[Path, Path], tmp_path: Path, stub: tuple[McpStub, ArgvWatch], token: str
) -> None:
    """Read-only: a read tool (``readOnlyHint``) runs; any other would need an approval exec never gives."""
    server, watch = stub
    run, model, _ = codex_turn(codex, codex_homes, tmp_path, tools_for(server, token), "ping", ask=True)
    assert run.verdict().succeeded, run.describe()
    assert_called_with_bearer(server, watch, token, "ping")
    assert "pong from corral" in output_of(model)

    run, model, _ = codex_turn(codex, codex_homes, tmp_path, tools_for(server, token), "poke", ask=True)
    assert run.verdict().succeeded, run.describe()
    assert server.tool_calls("poke") == []
    assert "MCP tool call requires approval" in output_of(model)
    assert [e.is_error for e in run.of("tool_end")] == [True]
