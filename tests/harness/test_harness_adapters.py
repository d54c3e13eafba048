"""Harness adapters: argv as each CLI expects it, stream parsing, and failure classification."""

from __future__ import annotations

import json

import pytest

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import ARGV_PROMPT_LIMIT, AttemptFacts, Posture, TurnRequest
from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.command import CommandHarness
from corral.adapters.harness.pi import PiHarness
from corral.adapters.process import ArgvError, check_argv
from corral.domain.failures import FailureClass
from corral.errors import UsageError


def lines(*objs):
    return [json.dumps(o).encode() for o in objs]


def events(harness, raw):
    out = []
    for line in raw:
        out.extend(harness.parse(line))
    return [e for e in out if e.kind != "keepalive"]


REQ = TurnRequest(
    prompt="do it",
    cwd="/w",
    system="sys",
    resume_id="sess-1",
    model="opus",
    posture=Posture(permission_mode="acceptEdits", allowed_tools=("Bash", "Write")),
)


def test_claude_work_ask_and_interactive_argv():
    h = ClaudeHarness("/bin/claude")
    work = h.work(REQ)
    assert work.argv == [
        "/bin/claude",
        "-p",
        "do it",
        "--output-format",
        "stream-json",
        "--verbose",
        "--resume",
        "sess-1",
        "--model",
        "opus",
        "--append-system-prompt",
        "sys",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Bash Write",
    ]
    assert work.stdin is None and work.env == {}
    ask = h.ask(REQ)
    assert ask.argv[ask.argv.index("--permission-mode") + 1] == "plan"
    assert "--allowedTools" not in ask.argv and "Bash" in ask.argv[ask.argv.index("--disallowedTools") + 1]
    pair = h.interactive(REQ)
    assert "-p" not in pair.argv and pair.argv[1:3] == ["--resume", "sess-1"]
    sandboxed = h.work(TurnRequest(prompt="x", cwd="/w", posture=Posture(is_sandbox=True)))
    assert sandboxed.env == {"IS_SANDBOX": "1"}


def test_a_long_prompt_goes_on_stdin():
    prompt = "é" * (ARGV_PROMPT_LIMIT // 2 + 10)  # two bytes each: over the limit in bytes
    launch = ClaudeHarness().work(TurnRequest(prompt=prompt, cwd="/w"))
    assert prompt not in launch.argv and launch.stdin == prompt.encode()


def test_claude_stream_parsing():
    h = ClaudeHarness()
    got = events(
        h,
        [
            *lines(
                {"type": "system", "subtype": "init", "session_id": "abc"},
                {
                    "type": "assistant",
                    "message": {
                        "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t1", "name": "Bash"}]
                    },
                },
                {
                    "type": "user",
                    "message": {
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "is_error": True,
                                "content": "Exit code 1\nnope",
                            }
                        ]
                    },
                },
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "result": "done",
                    "session_id": "abc",
                    "usage": {"input_tokens": 3},
                    "total_cost_usd": 0.01,
                },
            ),
            b"not json",
            b"[1, 2]",
        ],
    )
    assert [e.kind for e in got] == ["session", "text", "tool_start", "tool_end", "result"]
    assert got[0].session_id == "abc" and got[3].is_error and got[3].text.startswith("Exit code 1")
    assert got[4].usage == {"input_tokens": 3, "total_cost_usd": 0.01}
    assert [e.is_progress for e in got] == [False, True, False, True, True]


def facts(harness, objs, exit_code=1, stderr="", signal=None, spawn_error=None):
    return AttemptFacts(exit_code, signal, events(harness, lines(*objs)), stderr, spawn_error)


def result(text, status=None, is_error=True):
    event = {
        "type": "result",
        "subtype": "success" if not is_error else "error_during_execution",
        "is_error": is_error,
        "result": text,
    }
    if status is not None:
        event["api_error_status"] = status
    return event


@pytest.mark.parametrize(
    ("objs", "stderr", "exit_code", "expected", "code"),
    [
        ([result("Not logged in · Please run /login")], "", 1, FailureClass.FATAL_AUTH, "harness-not-authenticated"),
        (
            [result("Invalid API key · Fix external API key")],
            "",
            1,
            FailureClass.FATAL_AUTH,
            "harness-not-authenticated",
        ),
        (
            [result('API Error: 529 {"type":"overloaded_error"}', status=529)],
            "",
            1,
            FailureClass.TRANSIENT_OVERLOAD,
            "harness-overloaded",
        ),
        (
            [result("API Error: 429 rate_limit_error", status=429)],
            "",
            1,
            FailureClass.TRANSIENT_OVERLOAD,
            "harness-overloaded",
        ),
        (
            [result("Claude AI usage limit reached|1760000000")],
            "",
            1,
            FailureClass.TRANSIENT_OVERLOAD,
            "usage-limit",  # the account's window: waited for with every task of the account
        ),
        (
            [],
            "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons\n",
            1,
            FailureClass.FATAL_CONFIG,
            "harness-permission-refused",
        ),
        ([], "Error: connect ECONNREFUSED 127.0.0.1:1\n", 1, FailureClass.TRANSIENT_UNREACHABLE, "harness-unreachable"),
        # a 5xx is the provider's server failing: the network's ladder, its own code and words (issue 29)
        (
            [result("API Error: 502 Bad Gateway", status=502)],
            "",
            1,
            FailureClass.TRANSIENT_NETWORK,
            "harness-server-error",
        ),
        ([], "Error: read ECONNRESET\n", 1, FailureClass.TRANSIENT_NETWORK, "harness-network"),
        ([], "something nobody has seen\n", 1, FailureClass.UNKNOWN, "harness-exited"),
        ([result("weird failure")], "", 1, FailureClass.UNKNOWN, "harness-error"),
    ],
)
def test_claude_classification(objs, stderr, exit_code, expected, code):
    verdict = ClaudeHarness().classify(facts(ClaudeHarness(), objs, exit_code, stderr))
    assert not verdict.succeeded
    assert verdict.failure_class is expected
    assert verdict.code == code


def test_claude_success_needs_a_clean_result_and_exit_zero():
    h = ClaudeHarness()
    assert h.classify(facts(h, [result("ok", is_error=False)], exit_code=0)).succeeded
    assert not h.classify(facts(h, [result("ok", is_error=False)], exit_code=1)).succeeded
    assert not h.classify(facts(h, [], exit_code=0)).succeeded  # no result event: not a success
    missing = h.classify(facts(h, [], spawn_error="not found"))
    assert missing.failure_class is FailureClass.FATAL_CONFIG and missing.code == "harness-missing"


def test_pi_argv_and_event_classification_ignores_exit_zero():
    h = PiHarness("pi", provider="scripted")
    argv = h.work(TurnRequest(prompt="go", cwd="/w", model="m1", resume_id="s1")).argv
    assert argv == [
        "pi",
        "-p",
        "--mode",
        "json",
        "--provider",
        "scripted",
        "--model",
        "m1",
        "--session",
        "s1",
        "--no-extensions",
        "go",
    ]
    ok_events = [
        {"type": "session", "id": "s9"},
        {"type": "tool_execution_start", "toolCallId": "1", "toolName": "bash"},
        {"type": "tool_execution_end", "toolCallId": "1", "isError": False},
        {
            "type": "message_end",
            "message": {"role": "assistant", "stopReason": "stop", "content": [{"type": "text", "text": "finished"}]},
        },
    ]
    parsed = events(h, lines(*ok_events))
    assert parsed[0].session_id == "s9"
    verdict = h.classify(AttemptFacts(0, None, parsed, ""))
    assert verdict.succeeded and verdict.result_text == "finished"
    failed_events = [
        {"type": "session", "id": "s9"},
        {"type": "auto_retry_start", "errorMessage": "429 rate limited"},
        {
            "type": "message_end",
            "message": {"role": "assistant", "stopReason": "error", "errorMessage": "429 Too Many Requests"},
        },
        {"type": "auto_retry_end", "success": False, "finalError": "429 Too Many Requests"},
    ]
    verdict = h.classify(AttemptFacts(0, None, events(h, lines(*failed_events)), ""))
    assert not verdict.succeeded  # exit 0, but every model call failed
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD


def test_codex_argv_and_events():
    h = CodexHarness("codex")
    assert h.work(TurnRequest(prompt="go", cwd="/w")).argv == [
        "codex",
        "exec",
        "--json",
        "-s",
        "workspace-write",
        "--skip-git-repo-check",
        "go",
    ]
    assert h.work(TurnRequest(prompt="go", cwd="/w", resume_id="th1")).argv[-3:] == ["resume", "th1", "go"]
    assert "read-only" in h.ask(TurnRequest(prompt="q", cwd="/w")).argv
    stream = [
        {"type": "thread.started", "thread_id": "th1"},
        {"type": "turn.started"},
        {"type": "item.started", "item": {"id": "i1", "type": "command_execution", "command": "ls"}},
        {
            "type": "item.completed",
            "item": {"id": "i1", "type": "command_execution", "command": "ls", "exit_code": 2, "status": "failed"},
        },
        {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 5}},
    ]
    parsed = events(h, lines(*stream))
    assert [e.kind for e in parsed] == ["session", "tool_start", "tool_end", "text", "result"]
    assert parsed[2].is_error
    verdict = h.classify(AttemptFacts(0, None, parsed, ""))
    assert verdict.succeeded and verdict.result_text == "done"
    failed = events(
        h,
        lines(
            {"type": "thread.started", "thread_id": "t"},
            {"type": "turn.failed", "error": {"message": "stream error: 503 Service Unavailable"}},
        ),
    )
    verdict = h.classify(AttemptFacts(1, None, failed, ""))
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD


def test_command_harness():
    h = CommandHarness("my-agent --fast")
    assert h.work(TurnRequest(prompt="p", cwd="/w")).argv == ["my-agent", "--fast"]  # the prompt: docs/harnesses.md
    parsed = events(h, [b"step one", b"", b"final words"])
    assert h.classify(AttemptFacts(0, None, parsed, "")).result_text == "step one\nfinal words"
    assert h.classify(AttemptFacts(127, None, [], "")).failure_class is FailureClass.FATAL_CONFIG


def test_unknown_harness_is_a_usage_error():
    with pytest.raises(UsageError):
        make_harness("gpt-magic", {})


def test_spawn_wrapper_refuses_a_nul_in_argv_with_an_actionable_error():
    with pytest.raises(ArgvError) as caught:
        check_argv(["claude", "-p", "bad\x00prompt"])
    assert "argument 2" in caught.value.message and "NUL" in caught.value.message


@pytest.mark.parametrize(
    "words",
    [
        "Claude AI usage limit reached|1767225600",
        "5-hour limit reached ∙ resets 2pm",
        "You've hit your limit · resets 3pm (Europe/Berlin)",
    ],
)
def test_claude_reports_its_accounts_usage_limit_as_a_wait_never_fatal(words):
    h = ClaudeHarness()
    verdict = h.classify(facts(h, [result(words)], exit_code=1))
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD
    assert verdict.code == "usage-limit" and verdict.usage_limit == words


def test_codex_reports_its_accounts_usage_limit():
    h = CodexHarness("codex")
    words = "You've hit your usage limit. Upgrade to Pro or try again in 2 hours 5 minutes."
    failed = events(
        h,
        lines({"type": "thread.started", "thread_id": "t"}, {"type": "turn.failed", "error": {"message": words}}),
    )
    verdict = h.classify(AttemptFacts(1, None, failed, ""))
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD and verdict.usage_limit == words
    plain = events(
        h,
        lines({"type": "thread.started", "thread_id": "t"}, {"type": "turn.failed", "error": {"message": "503"}}),
    )
    assert h.classify(AttemptFacts(1, None, plain, "")).usage_limit is None


def test_an_account_is_the_harness_and_a_digest_of_its_credentials(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-one")
    one = ClaudeHarness().account()
    assert one is not None and one.startswith("claude:") and "sk-ant" not in one
    assert ClaudeHarness().account() == one
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-two")
    assert ClaudeHarness().account() != one
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "/a")
    logged_in_a = ClaudeHarness().account()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "/b")
    assert ClaudeHarness().account() != logged_in_a  # another login, another account
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert (
        CodexHarness("codex", env={"OPENAI_API_KEY": "k", "HOME": "/h"}).account()
        != CodexHarness("codex", env={"OPENAI_API_KEY": "other", "HOME": "/h"}).account()
    )
    assert CommandHarness("run-it").account() is None


def test_pi_reports_its_providers_usage_limit():
    h = PiHarness("pi")
    words = "429 You've hit your usage limit. Try again in 40 minutes."
    line = {"type": "message_end", "message": {"role": "assistant", "stopReason": "error", "errorMessage": words}}
    parsed = events(h, lines(line))
    verdict = h.classify(AttemptFacts(1, None, parsed, ""))
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD
    assert verdict.code == "usage-limit" and verdict.usage_limit == words
