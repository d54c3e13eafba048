"""How each harness is told to reach corral's MCP endpoint: argv and environment, never the token in argv.

What the real binaries accept is checked in tests/seams/test_agent_tools_wiring.py; these pin
the exact shape the adapters render.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.adapters.harness import NAMES, make_harness
from corral.adapters.harness.base import AgentTools, Launch, TurnRequest
from corral.adapters.harness.claude import AGENT_TOOLS_RULE, ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.command import CONTRACT_VARS, CommandHarness
from corral.adapters.harness.pi import PiHarness
from corral.domain.agent_tools import SERVER_NAME, TOKEN_ENV, URL_ENV
from corral.domain.posture import Posture

TOKEN = "tok_3b9f0c2e7d1a4f6b8e5c9a0d2f4b6e8a"
URL = "http://127.0.0.1:43210/mcp"
TOOLS = AgentTools(url=URL, token=TOKEN, timeout_seconds=600.0)


def request(**kw: object) -> TurnRequest:
    base: dict[str, object] = {
        "prompt": "do it",
        "cwd": "/w",
        "model": "m",
        "posture": Posture(permission_mode="acceptEdits", allowed_tools=("Bash", "Write")),
    }
    base.update(kw)
    return TurnRequest(**base)  # type: ignore[arg-type]


def no_token_in_argv(launch: Launch) -> None:
    assert not any(TOKEN in arg for arg in launch.argv), launch.argv


def option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, argv
    return argv[argv.index(name) + 1]


def test_the_token_is_kept_out_of_a_record_repr() -> None:
    assert TOKEN not in repr(TOOLS)
    assert TOKEN not in repr(request(tools=TOOLS))
    assert TOOLS.token == TOKEN


# ---------------------------------------------------------------------------------------------
# Claude Code


def test_claude_work_gets_corral_over_http_with_the_token_in_its_environment() -> None:
    launch = ClaudeHarness("/bin/claude").work(request(tools=TOOLS))
    no_token_in_argv(launch)
    config = json.loads(option(launch.argv, "--mcp-config"))
    assert config == {
        "mcpServers": {
            SERVER_NAME: {"type": "http", "url": URL, "headers": {"Authorization": "Bearer ${CORRAL_AGENT_TOKEN}"}}
        }
    }
    assert "--strict-mcp-config" in launch.argv
    assert option(launch.argv, "--allowedTools") == "Bash Write mcp__corral__*"
    assert option(launch.argv, "--permission-mode") == "acceptEdits"
    assert launch.env == {TOKEN_ENV: TOKEN, URL_ENV: URL, "MCP_TOOL_TIMEOUT": "600000"}
    # The prompt stays the positional right after -p: the variadic options come after it.
    assert launch.argv[:3] == ["/bin/claude", "-p", "do it"]


def test_claude_allows_corral_tools_with_no_other_allowed_tools() -> None:
    launch = ClaudeHarness().work(request(posture=Posture(permission_mode="acceptEdits"), tools=TOOLS))
    assert option(launch.argv, "--allowedTools") == AGENT_TOOLS_RULE == "mcp__corral__*"


def test_claude_tool_timeout_is_in_milliseconds() -> None:
    launch = ClaudeHarness().work(request(tools=AgentTools(URL, TOKEN, 2.5)))
    assert launch.env["MCP_TOOL_TIMEOUT"] == "2500"


def test_claude_ask_stays_in_plan_mode_with_corral_allowed() -> None:
    h = ClaudeHarness()
    for launch in (h.ask(request(tools=TOOLS)), h.work(request(posture=Posture(read_only=True), tools=TOOLS))):
        no_token_in_argv(launch)
        assert option(launch.argv, "--permission-mode") == "plan"
        assert option(launch.argv, "--disallowedTools") == "Bash Write Edit MultiEdit NotebookEdit"
        assert option(launch.argv, "--allowedTools") == "mcp__corral__*"
        assert json.loads(option(launch.argv, "--mcp-config"))["mcpServers"][SERVER_NAME]["url"] == URL
        assert "--strict-mcp-config" in launch.argv
        assert launch.env[TOKEN_ENV] == TOKEN


def test_claude_without_tools_is_as_before() -> None:
    h = ClaudeHarness()
    for launch in (h.work(request()), h.ask(request())):
        assert "--mcp-config" not in launch.argv and "--strict-mcp-config" not in launch.argv
        assert TOKEN_ENV not in launch.env and "MCP_TOOL_TIMEOUT" not in launch.env
    assert option(h.work(request()).argv, "--allowedTools") == "Bash Write"


def test_claude_interactive_gets_no_corral_tools() -> None:
    launch = ClaudeHarness().interactive(request(tools=TOOLS))
    assert "--mcp-config" not in launch.argv and TOKEN_ENV not in launch.env


# ---------------------------------------------------------------------------------------------
# Codex


def codex(tmp_path: Path, config: str | None = None, extra: tuple[str, ...] = ()) -> CodexHarness:
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    if config is not None:
        (home / "config.toml").write_text(config)
    return CodexHarness("/bin/codex", extra=extra, env={"CODEX_HOME": str(home), "PATH": ""})


def mcp_options(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-c" and argv[i + 1].startswith("mcp_servers.")]


def test_codex_work_names_corral_and_the_token_variable(tmp_path: Path) -> None:
    h = codex(tmp_path)
    assert h.takes_agent_tools is True and h.agent_tools_absent is None
    launch = h.work(request(tools=TOOLS, resume_id="thread-1"))
    no_token_in_argv(launch)
    assert mcp_options(launch.argv) == [
        f'mcp_servers.corral.url="{URL}"',
        'mcp_servers.corral.bearer_token_env_var="CORRAL_AGENT_TOKEN"',
        "mcp_servers.corral.tool_timeout_sec=600",
        'mcp_servers.corral.default_tools_approval_mode="approve"',
    ]
    assert launch.env == {TOKEN_ENV: TOKEN, URL_ENV: URL}
    # exec's options, these included, go before `resume` (which takes none of its own).
    assert launch.argv.index("resume") > max(i for i, a in enumerate(launch.argv) if a.startswith("mcp_servers."))
    assert option(launch.argv, "-s") == "workspace-write"


def test_codex_ask_runs_only_the_tools_that_need_no_approval(tmp_path: Path) -> None:
    h = codex(tmp_path)
    for launch in (h.ask(request(tools=TOOLS)), h.work(request(posture=Posture(read_only=True), tools=TOOLS))):
        no_token_in_argv(launch)
        assert option(launch.argv, "-s") == "read-only"
        assert 'mcp_servers.corral.default_tools_approval_mode="auto"' in mcp_options(launch.argv)
        assert launch.env[TOKEN_ENV] == TOKEN


def test_codex_fractional_timeout(tmp_path: Path) -> None:
    launch = codex(tmp_path).work(request(tools=AgentTools(URL, TOKEN, 2.5)))
    assert "mcp_servers.corral.tool_timeout_sec=2.5" in mcp_options(launch.argv)


def test_codex_without_tools_and_interactive_get_none(tmp_path: Path) -> None:
    h = codex(tmp_path)
    for launch in (h.work(request()), h.interactive(request(tools=TOOLS))):
        assert mcp_options(launch.argv) == [] and TOKEN_ENV not in launch.env


@pytest.mark.parametrize(
    ("config", "extra"),
    [
        ('[mcp_servers.corral]\ncommand = "corral"\nargs = ["mcp"]\n', ()),
        (None, ('mcp_servers.corral.command="corral"',)),
        (None, ('mcp_servers.corral={command="corral", args=["mcp"]}',)),
    ],
)
def test_codex_with_the_users_own_stdio_corral_server_gets_no_tools(
    tmp_path: Path, config: str | None, extra: tuple[str, ...]
) -> None:
    h = codex(tmp_path, config, extra)
    assert h.takes_agent_tools is False
    assert h.agent_tools_absent is not None and "stdio MCP server `corral`" in h.agent_tools_absent
    launch = h.work(request(tools=TOOLS))
    assert mcp_options(launch.argv) == [] and TOKEN_ENV not in launch.env


def test_codex_with_the_users_own_url_server_named_corral_is_pointed_at_the_turns(tmp_path: Path) -> None:
    h = codex(tmp_path, '[mcp_servers.corral]\nurl = "http://127.0.0.1:1/mcp"\n\n[mcp_servers.other]\ncommand = "x"\n')
    assert h.takes_agent_tools is True
    assert f'mcp_servers.corral.url="{URL}"' in mcp_options(h.work(request(tools=TOOLS)).argv)


# ---------------------------------------------------------------------------------------------
# command and Pi


def test_command_gets_the_endpoint_and_the_token_in_its_environment(tmp_path: Path) -> None:
    h = CommandHarness("my-agent --flag")
    assert h.takes_agent_tools is True and h.agent_tools_absent is None
    for launch in (
        h.work(request(tools=TOOLS, prompt_dir=str(tmp_path / "w"))),
        h.ask(request(tools=TOOLS, prompt_dir=str(tmp_path / "a"))),
    ):
        assert launch.argv == ["my-agent", "--flag"]
        assert launch.env[URL_ENV] == URL and launch.env[TOKEN_ENV] == TOKEN
    plain = h.work(request(prompt_dir=str(tmp_path / "p")))
    assert URL_ENV not in plain.env and TOKEN_ENV not in plain.env
    assert TOKEN_ENV not in h.interactive(request(tools=TOOLS)).env
    assert {URL_ENV, TOKEN_ENV} <= set(CONTRACT_VARS)


def test_pi_gets_corrals_extension_by_path_and_the_token_in_its_environment() -> None:
    from corral.adapters.harness.pi import CONFINED_TOOLS, SHELL_ENV
    from corral.pi_extension import EXTENSION

    h = PiHarness("/bin/pi")
    assert h.takes_agent_tools is True and h.agent_tools_absent is None
    confined = h.work(request(tools=AgentTools(url=URL, token=TOKEN, timeout_seconds=600.0, shell=True)))
    no_token_in_argv(confined)
    assert option(confined.argv, "-e") == str(EXTENSION) and "--no-extensions" in confined.argv
    assert option(confined.argv, "--tools") == CONFINED_TOOLS == "read,edit,write,bash,failure_disposition"
    assert confined.env == {
        TOKEN_ENV: TOKEN, URL_ENV: URL, "CORRAL_TOOL_TIMEOUT_MS": "600000", SHELL_ENV: "1", "JITI_FS_CACHE": "false",
    }  # fmt: skip
    loose = h.work(request(tools=TOOLS))  # unconfined: Pi's own bash stays, the extension adds failure_disposition
    assert option(loose.argv, "-e") == str(EXTENSION) and "--tools" not in loose.argv
    assert SHELL_ENV not in loose.env and loose.env[TOKEN_ENV] == TOKEN
    # an ask, and a turn without corral's endpoint: no extension, no token
    for launch in (h.ask(request(tools=TOOLS)), h.work(request())):
        assert "-e" not in launch.argv and TOKEN_ENV not in launch.env
    assert "-e" not in h.interactive(request(tools=TOOLS)).argv


def test_pi_without_its_extensions_files_takes_no_agent_tools_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import corral.pi_extension as pi_extension

    monkeypatch.setattr(pi_extension, "TOOLS_FILE", tmp_path / "mcp_tools.json")  # an install built without it
    h = PiHarness("/bin/pi")
    assert h.takes_agent_tools is False
    assert h.agent_tools_absent == "corral's Pi extension is not installed (mcp_tools.json missing): reinstall corral"


@pytest.mark.parametrize("name", NAMES)
def test_every_harness_says_whether_it_takes_agent_tools(name: str) -> None:
    h = make_harness(name, {"command": "my-agent"})
    assert isinstance(h.takes_agent_tools, bool)
    if h.takes_agent_tools:
        assert h.agent_tools_absent is None
    else:
        assert isinstance(h.agent_tools_absent, str) and h.agent_tools_absent
        assert "\n" not in h.agent_tools_absent


def test_codex_reads_an_mcp_tool_call_as_a_tool_step() -> None:
    h = CodexHarness("codex")
    item = {"id": "item_1", "type": "mcp_tool_call", "server": "corral", "tool": "ping", "arguments": {}}
    started = h.parse(json.dumps({"type": "item.started", "item": {**item, "status": "in_progress"}}).encode())
    assert [(e.kind, e.tool_id, e.name) for e in started] == [("tool_start", "item_1", "mcp__corral__ping")]
    result = {"content": [{"type": "text", "text": "pong"}], "structured_content": None}
    done = h.parse(
        json.dumps(
            {"type": "item.completed", "item": {**item, "result": result, "error": None, "status": "completed"}}
        ).encode()
    )
    assert [(e.kind, e.is_error, e.text) for e in done] == [("tool_end", False, "pong")]
    refused = {**item, "result": None, "error": {"message": "MCP tool call requires approval"}, "status": "failed"}
    failed = h.parse(json.dumps({"type": "item.completed", "item": refused}).encode())
    assert [(e.kind, e.is_error, e.text) for e in failed] == [("tool_end", True, "MCP tool call requires approval")]
    assert done[0].is_progress


def test_a_pi_bash_calls_arguments_are_an_intent_only_where_the_turn_had_corrals_shell() -> None:
    from corral.domain.intents import Intent

    args = {"command": "make", "operationId": "build", "expectedExitCodes": [1]}
    start = {"type": "tool_execution_start", "toolCallId": "c1", "toolName": "bash", "args": args}
    end = {"type": "tool_execution_end", "toolCallId": "c1", "toolName": "bash", "isError": True}
    end["result"] = {"content": [{"type": "text", "text": '{"corral_shell": 1, "exit_code": 1}'}]}
    corrals = make_harness("pi", {"pi_corral_shell": True})
    [fact] = corrals.incident_facts(start, 0, "/w")
    assert isinstance(fact.intent, Intent) and fact.intent.operation_id == "build"  # type: ignore[attr-defined]
    assert corrals.incident_facts(end, 10, "/w")[0].exit_code == 1  # type: ignore[attr-defined]
    pis_own = make_harness("pi", {})  # Pi's own bash: the same name, no intent, no structured exit code
    [plain] = pis_own.incident_facts(start, 0, "/w")
    assert plain.intent is None and plain.disposition is None  # type: ignore[attr-defined]
    assert pis_own.incident_facts(end, 10, "/w")[0].exit_code is None  # type: ignore[attr-defined]
