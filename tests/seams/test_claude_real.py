"""Test seam 2: the real Claude Code CLI against the scripted model server.

Each test runs the pinned binary (``.ci/install-agents``) as a subprocess in a temporary git
repository, pointed at a loopback :class:`ScriptedServer`, and checks both what the CLI did
(files, commits, stream-json events, exit code) and what it sent (the recorded requests).
The exact strings asserted here are the constants of ``tests/support/claude.py``, which the
Claude adapter classifies failures by.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.claude import (
    API_RETRY_SUBTYPE,
    BYPASS_AS_ROOT_STDERR,
    CLAUDE_CODE_VERSION,
    EXIT_API_ERROR,
    EXIT_BYPASS_AS_ROOT,
    EXIT_ON_SIGTERM,
    RESULT_429_PREFIX,
    RESULT_529_PREFIX,
    RESULT_529_REPEATED_PREFIX,
    RESULT_INVALID_API_KEY,
    RESULT_NOT_LOGGED_IN,
    VERSION_LINE,
    ClaudeRun,
    claude_env,
    claude_version,
    parse_stream,
    run_claude,
    start_claude,
)
from tests.support.model_server import Error, Hang, Text, ToolUse, scripted_server

pytestmark = pytest.mark.timeout(60)

#: The tests of the result the CLI ends with once it has spent its own retries lower them, and
#: say so here: that result is what corral classifies for a user who set CLAUDE_CODE_MAX_RETRIES
#: low. At the default, corral ends the CLI at its first retry line (tests/seams/test_claude_cadence.py).
USER_LOWERED_RETRIES = 1


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def assert_ok(run: ClaudeRun) -> dict:
    assert run.returncode == 0, run.describe()
    assert run.result is not None, run.describe()
    assert run.result["is_error"] is False, run.describe()
    return run.result


def test_pinned_version(claude: Path) -> None:
    assert claude_version(claude) == VERSION_LINE


def test_write_tool_use_writes_file_and_sends_tool_result(claude: Path, repo: Path, claude_home: Path) -> None:
    steps = [ToolUse("Write", {"file_path": str(repo / "hello.txt"), "content": "hi there\n"}), Text("wrote it")]
    with scripted_server(steps) as server:
        run = run_claude("write hello.txt", cwd=repo, env=claude_env(server, claude_home))
    result = assert_ok(run)
    assert result["result"] == "wrote it"
    assert (repo / "hello.txt").read_text() == "hi there\n"
    assert server.remaining == []
    first, second = server.script_requests
    assert first.path == "/v1/messages" and first.query.get("beta") == ["true"]
    assert first.body["stream"] is True and first.body["tools"]
    assert "write hello.txt" in first.texts(role="user")
    # The second request carries the assistant's tool_use and the CLI's tool_result for it.
    tool_use = second.blocks("tool_use", role="assistant")
    assert [b["name"] for b in tool_use] == ["Write"]
    [tool_result] = second.tool_results()
    assert tool_result["tool_use_id"] == tool_use[0]["id"]
    assert not tool_result.get("is_error")
    assert "File created successfully" in str(tool_result["content"])
    # ... and the stream-json output shows the same round trip.
    assert [b["tool_use_id"] for b in run.tool_results()] == [tool_use[0]["id"]]
    assert server.side_requests == []


def test_bash_tool_use_makes_a_commit(claude: Path, repo: Path, claude_home: Path) -> None:
    (repo / "notes.txt").write_text("to be committed\n")
    steps = [ToolUse("Bash", {"command": "git add -A && git commit -q -m x", "description": "commit"}), Text("done")]
    with scripted_server(steps) as server:
        run = run_claude("commit the notes", cwd=repo, env=claude_env(server, claude_home))
    assert_ok(run)
    assert git(repo, "log", "-1", "--format=%s") == "x"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == "notes.txt"
    [tool_result] = server.script_requests[1].tool_results()
    assert tool_result.get("is_error") is False
    assert run.result["permission_denials"] == []


def test_failing_bash_is_a_tool_error(claude: Path, repo: Path, claude_home: Path) -> None:
    steps = [ToolUse("Bash", {"command": "echo oops >&2; exit 3", "description": "fail"}), Text("saw it")]
    with scripted_server(steps) as server:
        run = run_claude("fail", cwd=repo, env=claude_env(server, claude_home))
    assert_ok(run)
    [block] = run.tool_results()
    assert block["is_error"] is True
    # Observed: "Exit code 3\noops"
    assert str(block["content"]).startswith("Exit code 3")
    assert "oops" in str(block["content"])
    assert server.script_requests[1].tool_results()[0]["is_error"] is True


def test_stream_json_init_and_result_events(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Text("all done")]) as server:
        run = run_claude("say done", cwd=repo, env=claude_env(server, claude_home))
    assert_ok(run)
    init = run.events[0]
    assert init["type"] == "system" and init["subtype"] == "init"
    assert init["session_id"] and init["cwd"] == str(repo)
    assert init["claude_code_version"] == CLAUDE_CODE_VERSION
    assert init["permissionMode"] == "acceptEdits"
    assert init["apiKeySource"] == "ANTHROPIC_API_KEY"
    assert {"Bash", "Write", "Edit", "Read"} <= set(init["tools"])
    assistant = run.of("assistant")
    assert [b["text"] for b in assistant[-1]["message"]["content"]] == ["all done"]
    result = run.events[-1]
    assert result["type"] == "result"
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["api_error_status"] is None
    assert result["result"] == "all done"
    assert result["session_id"] == init["session_id"]
    assert result["num_turns"] == 1
    assert result["stop_reason"] == "end_turn" and result["terminal_reason"] == "completed"
    assert "usage" in result and "total_cost_usd" in result
    # The session id also travels to the server as a header.
    assert server.script_requests[0].headers["x-claude-code-session-id"] == init["session_id"]
    assert server.script_requests[0].headers["x-api-key"] == claude_env(server, claude_home)["ANTHROPIC_API_KEY"]


@pytest.mark.slow
def test_resume_sends_the_earlier_conversation(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Text("first answer"), Text("second answer")]) as server:
        env = claude_env(server, claude_home)
        first = run_claude("first prompt", cwd=repo, env=env)
        assert_ok(first)
        session = first.session_id
        assert session
        second = run_claude("second prompt", cwd=repo, env=env, resume=session)
    assert assert_ok(second)["result"] == "second answer"
    assert second.session_id == session  # resuming keeps the id
    _, resumed = server.script_requests
    assert "first prompt" in resumed.texts(role="user")
    assert "first answer" in resumed.texts(role="assistant")
    assert resumed.texts(role="user")[-1] == "second prompt"
    roles = [m["role"] for m in resumed.messages if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]


def test_401_is_an_invalid_api_key_error(claude: Path, repo: Path, claude_home: Path) -> None:
    # 401 is retried like any API error (CLAUDE_CODE_MAX_RETRIES=1 -> two requests).
    with scripted_server([Error(401), Error(401)]) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, max_retries=USER_LOWERED_RETRIES))
    assert run.returncode == EXIT_API_ERROR, run.describe()
    result = run.result
    assert result is not None, run.describe()
    assert result["is_error"] is True
    assert result["result"] == RESULT_INVALID_API_KEY
    assert result["api_error_status"] == 401
    assert result["api_error_type"] == "authentication_error"
    assert result["terminal_reason"] == "api_error"
    [retry] = run.of("system", API_RETRY_SUBTYPE)
    assert retry["error_status"] == 401 and retry["error"] == "authentication_failed"
    assert run.of("assistant")[-1]["error"] == "authentication_failed"
    assert len(server.script_requests) == 2 and server.remaining == []


def test_no_api_key_is_not_logged_in(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Text("unused")]) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, api_key=None))
    assert run.returncode == EXIT_API_ERROR, run.describe()
    assert run.result is not None and run.result["is_error"] is True
    assert run.result["result"] == RESULT_NOT_LOGGED_IN
    assert run.result["api_error_status"] is None
    assert run.init is not None and run.init["apiKeySource"] == "none"
    assert run.of("assistant")[-1]["error"] == "authentication_failed"
    assert server.requests == []  # it gives up before calling the API


def test_529_is_retried_by_the_cli_itself(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Error(529), Text("recovered")]) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, max_retries=USER_LOWERED_RETRIES))
    assert assert_ok(run)["result"] == "recovered"
    [retry] = run.of("system", API_RETRY_SUBTYPE)
    assert retry["error_status"] == 529 and retry["error"] == "overloaded"
    assert retry["attempt"] == 1 and retry["max_retries"] == USER_LOWERED_RETRIES
    assert len(server.script_requests) == 2
    # The CLI retries in its own loop: the SDK's x-stainless-retry-count header stays "0".


def test_529_exhausted_fails_with_overloaded(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Error(529), Error(529)]) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, max_retries=USER_LOWERED_RETRIES))
    assert run.returncode == EXIT_API_ERROR, run.describe()
    assert run.result["is_error"] is True
    assert run.result["result"].startswith(RESULT_529_PREFIX)
    assert run.result["api_error_status"] == 529
    assert run.result["api_error_type"] == "overloaded_error"
    assert run.of("assistant")[-1]["error"] == "server_error"
    assert server.remaining == []


def test_529_in_stream_falls_back_to_a_non_streaming_request(claude: Path, repo: Path, claude_home: Path) -> None:
    steps = [Error(529, in_stream=True)] * 3
    with scripted_server(steps) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, max_retries=USER_LOWERED_RETRIES))
    assert run.returncode == EXIT_API_ERROR, run.describe()
    assert run.result["result"].startswith(RESULT_529_REPEATED_PREFIX)
    assert run.result["api_error_status"] == 529
    # Two streamed tries (max_retries=USER_LOWERED_RETRIES), then one non-streaming fallback with a smaller max_tokens.
    assert [r.body["stream"] for r in server.script_requests] == [True, True, False]
    assert server.remaining == []


def test_429_exhausted_fails_with_rate_limit(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Error(429, message="slow down"), Error(429, message="slow down")]) as server:
        run = run_claude("hi", cwd=repo, env=claude_env(server, claude_home, max_retries=USER_LOWERED_RETRIES))
    assert run.returncode == EXIT_API_ERROR, run.describe()
    assert run.result["result"] == RESULT_429_PREFIX + "slow down"
    assert run.result["api_error_status"] == 429
    assert run.of("assistant")[-1]["error"] == "rate_limit"


@pytest.mark.slow
def test_hung_stream_keeps_the_cli_running(claude: Path, repo: Path, claude_home: Path) -> None:
    hang = Hang()
    with scripted_server([hang, Text("never reached")]) as server:
        proc = start_claude("hi", cwd=repo, env=claude_env(server, claude_home))
        try:
            assert server.wait_for_requests(1, timeout=15), "the CLI never called the model"
            time.sleep(3)
            assert proc.poll() is None, "the CLI gave up on a stalled stream by itself"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == EXIT_ON_SIGTERM
    events = parse_stream(out)
    assert [e.get("subtype") for e in events] == ["init"]  # no result event
    assert len(server.script_requests) == 1  # no retry while the stream is open


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal only happens as root")
def test_bypass_permissions_as_root_is_refused(claude: Path, repo: Path, claude_home: Path) -> None:
    with scripted_server([Text("unused")]) as server:
        env = claude_env(server, claude_home)
        run = run_claude("hi", cwd=repo, env=env, permission_mode="bypassPermissions")
        assert run.returncode == EXIT_BYPASS_AS_ROOT, run.describe()
        assert run.stdout == ""
        assert run.stderr.strip() == BYPASS_AS_ROOT_STDERR
        assert server.requests == []
        # Inside a (declared) sandbox it is let through.
        sandboxed = run_claude("hi", cwd=repo, env={**env, "IS_SANDBOX": "1"}, permission_mode="bypassPermissions")
    assert assert_ok(sandboxed)["result"] == "unused"
    assert sandboxed.init["permissionMode"] == "bypassPermissions"
