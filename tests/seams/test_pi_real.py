"""Test seam 2 for Pi: the real ``pi`` binary against the scripted Anthropic server, through corral's adapter.

Each real-binary test runs exactly the argv :class:`PiHarness` builds (``work()``), in a temporary
git repository, with a temporary HOME whose ``.pi/agent/models.json`` points a provider at a
loopback :class:`ScriptedServer`; its stdout is read with ``PiHarness.parse`` and judged with
``PiHarness.classify``. The parse tests at the end read outputs recorded from those runs
(``tests/fixtures/pi/*.jsonl``; re-record with ``CORRAL_RECORD_FIXTURES=1``) and run without the
binary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import AttemptFacts, Event, TurnRequest, Verdict
from corral.adapters.harness.pi import LOGIN_HINT, PiHarness
from corral.domain.failures import TRANSIENT, FailureClass
from tests.support.model_server import Error, Step, Text, ToolUse, scripted_server
from tests.support.pi import (
    BASH_EXIT_SUFFIX,
    DEFAULT_MAX_ATTEMPTS,
    ERROR_MESSAGE_401,
    ERROR_MESSAGE_500,
    ERROR_MESSAGE_529,
    MODEL,
    OTHER_PROJECT_PROMPT,
    PI_VERSION,
    PROVIDER,
    UNKNOWN_SESSION_STDERR,
    VERSION_LINE,
    HarnessRun,
    fixture_lines,
    parse_all,
    pi_bin_or_skip,
    pi_env,
    pi_version,
    record_fixture,
    run_launch,
    run_turn,
    write_pi_config,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pi() -> Path:
    """The pinned Pi binary; fails under CI when missing, skips with the reason locally."""
    return pi_bin_or_skip()


@pytest.fixture
def pi_home(tmp_path: Path) -> Path:
    home = tmp_path / "pi-home"
    home.mkdir()
    return home


def harness_for(pi: Path) -> PiHarness:
    return PiHarness(executable=str(pi), provider=PROVIDER)


def request(repo: Path, prompt: str, **kw: Any) -> TurnRequest:
    return TurnRequest(prompt=prompt, cwd=str(repo), model=MODEL, **kw)


def assert_clean_exit(run: HarnessRun) -> None:
    assert run.returncode == 0, run.describe()
    assert run.stderr == "", run.describe()


# ---------------------------------------------------------------------------------------------
# The real binary


@pytest.mark.slow
def test_pinned_version(pi: Path) -> None:
    assert pi_version(pi) == VERSION_LINE == PI_VERSION


def test_argv_is_what_the_harness_builds(pi: Path, repo: Path) -> None:
    launch = harness_for(pi).work(request(repo, "do it"))
    assert launch.argv == [
        str(pi), "-p", "--mode", "json", "--provider", PROVIDER, "--model", MODEL, "--no-extensions", "do it",
    ]  # fmt: skip
    assert launch.stdin is None


def test_bash_tool_runs_in_the_workspace_and_the_turn_succeeds(pi: Path, repo: Path, pi_home: Path) -> None:
    steps: list[Step] = [ToolUse("bash", {"command": "echo hi > made.txt && pwd"}), Text("all done")]
    harness = harness_for(pi)
    with scripted_server(steps) as server:
        write_pi_config(pi_home, server)
        run = run_turn(harness, request(repo, "make a file", system="Corral says: stay on task."), env=pi_env(pi_home))
    record_fixture("pi", "bash_tool_turn.jsonl", run.stdout)
    assert_clean_exit(run)
    # The tool really ran, in the workspace.
    assert (repo / "made.txt").read_text() == "hi\n"
    # Corral's view of it.
    verdict = run.verdict()
    assert verdict.succeeded, (verdict, run.describe())
    assert verdict.result_text == "all done"
    [session] = run.of("session")
    assert session.session_id and session.session_id == run.lines[0]["id"]
    [start] = run.of("tool_start")
    [end] = run.of("tool_end")
    assert start.name == "bash" and start.tool_id and end.tool_id == start.tool_id
    assert end.is_error is False
    [result] = run.of("result")
    assert result.text == "all done" and result.usage and result.usage["totalTokens"] == 110
    assert not run.of("model_error")
    # The raw stream: the tool's output and the final message.
    [tool_end] = [e for e in run.lines if e["type"] == "tool_execution_end"]
    assert tool_end["toolName"] == "bash" and tool_end["result"]["content"][0]["text"] == f"{repo}\n"
    assert run.lines[-1]["type"] == "agent_end"
    # What the server saw: the prompt, the system addition, and the tool result for the call.
    assert server.remaining == []
    first, second = server.script_requests
    assert first.texts(role="user") == ["make a file"]
    assert {t["name"] for t in first.body["tools"]} >= {"bash", "read", "edit", "write"}
    assert "Corral says: stay on task." in json.dumps(first.body["system"])
    assert first.headers["x-api-key"].startswith("sk-ant-test")
    [tool_use] = second.blocks("tool_use", role="assistant")
    [tool_result] = second.tool_results()
    assert tool_result["tool_use_id"] == tool_use["id"] == start.tool_id
    assert not tool_result.get("is_error")


def test_failing_bash_is_a_tool_error(pi: Path, repo: Path, pi_home: Path) -> None:
    steps: list[Step] = [ToolUse("bash", {"command": "echo oops >&2; exit 3"}), Text("saw it")]
    harness = harness_for(pi)
    with scripted_server(steps) as server:
        write_pi_config(pi_home, server)
        run = run_turn(harness, request(repo, "fail"), env=pi_env(pi_home))
    record_fixture("pi", "bash_tool_error.jsonl", run.stdout)
    assert_clean_exit(run)
    [end] = run.of("tool_end")
    assert end.is_error is True
    [raw] = [e for e in run.lines if e["type"] == "tool_execution_end"]
    assert raw["isError"] is True
    assert raw["result"]["content"][0]["text"] == "oops\n" + BASH_EXIT_SUFFIX.format(code=3)
    assert server.script_requests[1].tool_results()[0]["is_error"] is True
    assert run.verdict().succeeded  # a tool failure is not a turn failure


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        pytest.param(529, ERROR_MESSAGE_529, FailureClass.TRANSIENT_OVERLOAD, id="529"),
        pytest.param(500, ERROR_MESSAGE_500, FailureClass.TRANSIENT_NETWORK, id="500"),
    ],
)
def test_every_model_call_failing_exits_0_but_is_classified(
    pi: Path, repo: Path, pi_home: Path, status: int, message: str, expected: FailureClass
) -> None:
    harness = harness_for(pi)
    with scripted_server([Error(status)] * 10) as server:
        write_pi_config(pi_home, server)
        run = run_turn(harness, request(repo, "hi"), env=pi_env(pi_home))
    record_fixture("pi", f"error_{status}.jsonl", run.stdout)
    # Pi itself says nothing is wrong ...
    assert_clean_exit(run)
    # ... it tried once and retried DEFAULT_MAX_ATTEMPTS times (SDK retries are off in the tests).
    assert len(server.script_requests) == 1 + DEFAULT_MAX_ATTEMPTS
    retries = [e for e in run.lines if e["type"] == "auto_retry_start"]
    assert [e["attempt"] for e in retries] == [1, 2, 3]
    assert all(e["maxAttempts"] == DEFAULT_MAX_ATTEMPTS and e["errorMessage"] == message for e in retries)
    [final] = [e for e in run.lines if e["type"] == "auto_retry_end"]
    assert final == {"type": "auto_retry_end", "success": False, "attempt": 3, "finalError": message}
    failed = [e["message"] for e in run.lines if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
    assert all(m["stopReason"] == "error" and m["errorMessage"] == message and m["content"] == [] for m in failed)
    # ... and corral still sees the failure, as a transient one.
    assert not run.of("result")
    assert len(run.of("retry")) == DEFAULT_MAX_ATTEMPTS
    verdict = run.verdict()
    assert not verdict.succeeded
    assert verdict.failure_class is expected and expected in TRANSIENT
    assert verdict.reason == message


@pytest.mark.slow
def test_401_is_not_retried_and_is_fatal_auth(pi: Path, repo: Path, pi_home: Path) -> None:
    harness = harness_for(pi)
    with scripted_server([Error(401)] * 3) as server:
        write_pi_config(pi_home, server)
        run = run_turn(harness, request(repo, "hi"), env=pi_env(pi_home))
    record_fixture("pi", "error_401.jsonl", run.stdout)
    assert_clean_exit(run)
    assert len(server.script_requests) == 1
    assert not [e for e in run.lines if e["type"].startswith("auto_retry")]
    verdict = run.verdict()
    assert not verdict.succeeded and verdict.failure_class is FailureClass.FATAL_AUTH
    assert verdict.reason == REFUSED_401


@pytest.mark.slow
def test_session_flag_resumes_the_session(pi: Path, repo: Path, pi_home: Path) -> None:
    harness = harness_for(pi)
    with scripted_server([Text("first answer"), Text("second answer")]) as server:
        write_pi_config(pi_home, server)
        env = pi_env(pi_home)
        first = run_turn(harness, request(repo, "first prompt"), env=env)
        assert_clean_exit(first)
        session = first.session_id
        assert session
        resumed = harness.work(request(repo, "second prompt", resume_id=session))
        assert resumed.argv[resumed.argv.index("--session") + 1] == session
        second = run_launch(harness, resumed, cwd=repo, env=env)
    record_fixture("pi", "resumed_turn.jsonl", second.stdout)
    assert_clean_exit(second)
    assert second.session_id == session  # the same session, not a new one
    assert second.verdict().result_text == "second answer"
    _, request2 = server.script_requests
    assert [m["role"] for m in request2.messages] == ["user", "assistant", "user"]
    assert request2.texts(role="user") == ["first prompt", "second prompt"]
    assert request2.texts(role="assistant") == ["first answer"]
    # The session file lives under HOME, keyed by the cwd.
    [stored] = (pi_home / ".pi" / "agent" / "sessions").glob(f"*/*_{session}.jsonl")
    assert stored.parent.name == "--" + str(repo).strip("/").replace("/", "-") + "--"


def test_unknown_session_fails_on_stderr(pi: Path, repo: Path, pi_home: Path) -> None:
    missing = "0000dead-beef-7000-8000-000000000000"
    harness = harness_for(pi)
    with scripted_server([Text("unused")]) as server:
        write_pi_config(pi_home, server)
        run = run_turn(harness, request(repo, "hi", resume_id=missing), env=pi_env(pi_home))
    assert run.returncode == 1, run.describe()
    assert run.stdout == ""
    assert run.stderr.strip() == UNKNOWN_SESSION_STDERR.format(id=missing)
    assert server.requests == []
    verdict = run.verdict()
    assert not verdict.succeeded and verdict.failure_class is FailureClass.UNKNOWN


@pytest.mark.slow
def test_session_from_another_directory_asks_and_does_nothing(
    pi: Path, repo: Path, pi_home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    harness = harness_for(pi)
    with scripted_server([Text("first answer"), Text("unused")]) as server:
        write_pi_config(pi_home, server)
        env = pi_env(pi_home)
        first = run_turn(harness, request(repo, "first prompt"), env=env)
        assert first.session_id
        run = run_turn(harness, request(elsewhere, "again", resume_id=first.session_id), env=env)
    # With stdin at EOF the fork question is answered "no": exit 0, no output, no model call.
    assert run.returncode == 0, run.describe()
    assert run.stdout == ""
    assert OTHER_PROJECT_PROMPT in run.stderr
    assert len(server.script_requests) == 1
    assert not run.verdict().succeeded


def test_long_prompt_goes_on_stdin(pi: Path, repo: Path, pi_home: Path) -> None:
    prompt = "x" * (100 * 1024)
    harness = harness_for(pi)
    with scripted_server([Text("read it")]) as server:
        write_pi_config(pi_home, server)
        launch = harness.work(request(repo, prompt))
        assert launch.stdin is not None and launch.argv[-1] == "--no-extensions"
        run = run_launch(harness, launch, cwd=repo, env=pi_env(pi_home))
    assert_clean_exit(run)
    assert run.verdict().result_text == "read it"
    assert server.script_requests[0].texts(role="user") == [prompt]


# ---------------------------------------------------------------------------------------------
# Recorded outputs (no binary needed)

HARNESS = PiHarness(executable="pi", provider=PROVIDER)
#: The verdict's reason for a 401: readable, with how a Pi user logs in.
REFUSED_401 = (
    f"the model server refused Pi's credentials (HTTP 401 authentication failed: invalid x-api-key). {LOGIN_HINT}"
)


def recorded(name: str) -> list[bytes]:
    return fixture_lines("pi", name)


def judge(name: str, exit_code: int = 0) -> tuple[list[Event], Verdict]:
    events = parse_all(HARNESS, recorded(name))
    return events, HARNESS.classify(AttemptFacts(exit_code, None, events, ""))


def test_recorded_bash_turn_parses_to_a_success() -> None:
    lines = recorded("bash_tool_turn.jsonl")
    first = json.loads(lines[0])
    assert first["type"] == "session" and first["version"] == 3
    events, verdict = judge("bash_tool_turn.jsonl")
    kinds = [e.kind for e in events if e.kind != "keepalive"]
    assert kinds == ["session", "usage", "tool_start", "tool_end", "text", "result"]
    assert events[0].session_id == first["id"]
    start = next(e for e in events if e.kind == "tool_start")
    end = next(e for e in events if e.kind == "tool_end")
    assert (start.name, start.tool_id) == ("bash", end.tool_id) and not end.is_error
    assert verdict.succeeded and verdict.result_text == "all done"
    # Every line is one JSON object with a type, and each parses to at least one event.
    for line in lines:
        assert "type" in json.loads(line)
        assert HARNESS.parse(line)


def test_recorded_tool_error_is_flagged() -> None:
    events, verdict = judge("bash_tool_error.jsonl")
    [end] = [e for e in events if e.kind == "tool_end"]
    assert end.is_error is True
    assert verdict.succeeded and verdict.result_text == "saw it"


@pytest.mark.parametrize(
    ("name", "message", "expected"),
    [
        pytest.param("error_529.jsonl", ERROR_MESSAGE_529, FailureClass.TRANSIENT_OVERLOAD, id="529"),
        pytest.param("error_500.jsonl", ERROR_MESSAGE_500, FailureClass.TRANSIENT_NETWORK, id="500"),
        pytest.param("error_401.jsonl", ERROR_MESSAGE_401, FailureClass.FATAL_AUTH, id="401"),
    ],
)
def test_recorded_failures_classify_despite_exit_0(name: str, message: str, expected: FailureClass) -> None:
    events, verdict = judge(name)
    assert not any(e.kind == "result" for e in events)
    assert [e.text for e in events if e.kind == "model_error"][-1] == message
    assert not verdict.succeeded
    assert verdict.failure_class is expected
    assert verdict.reason == (REFUSED_401 if expected is FailureClass.FATAL_AUTH else message)


def test_recorded_retries_become_retry_events() -> None:
    events, _ = judge("error_529.jsonl")
    retries = [e for e in events if e.kind == "retry"]
    # Each of Pi's announcements as one readable line (what `logs` shows), its status and raw error kept.
    assert [e.text for e in retries] == [
        "HTTP 529 overloaded (Pi's retry 1 of 3, due in 0.1 s)",
        "HTTP 529 overloaded (Pi's retry 2 of 3, due in 0.1 s)",
        "HTTP 529 overloaded (Pi's retry 3 of 3, due in 0.2 s)",
    ]
    assert all(e.status == 529 and e.name == ERROR_MESSAGE_529 for e in retries)
    # One model_error per failed call, and one more for auto_retry_end.
    assert len([e for e in events if e.kind == "model_error"]) == DEFAULT_MAX_ATTEMPTS + 2


@pytest.mark.parametrize(
    ("name", "expected", "reason"),
    [
        pytest.param("error_529.jsonl", FailureClass.TRANSIENT_OVERLOAD, "HTTP 529 overloaded", id="529"),
        pytest.param(
            "error_500.jsonl", FailureClass.TRANSIENT_NETWORK, "HTTP 500 server error: Internal server error", id="500"
        ),
    ],
)
def test_an_attempt_ended_at_the_first_retry_line_is_classified_from_it(
    name: str, expected: FailureClass, reason: str
) -> None:
    # What the supervisor has when it ended Pi at its first auto_retry_start (corral owns the cadence).
    assert HARNESS.corral_owns_retries is True
    lines = recorded(name)
    first_retry = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "auto_retry_start")
    events = parse_all(HARNESS, lines[: first_retry + 1])
    verdict = HARNESS.classify(AttemptFacts(143, None, events, ""))
    assert not verdict.succeeded
    assert (verdict.failure_class, verdict.code) == (
        expected,
        f"harness-{'overloaded' if expected is FailureClass.TRANSIENT_OVERLOAD else 'network'}",
    )
    assert verdict.reason == f"Pi's model call failed: {reason}"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param("Connection error.", FailureClass.TRANSIENT_UNREACHABLE, id="unreachable"),
        pytest.param(ERROR_MESSAGE_401, FailureClass.FATAL_AUTH, id="401"),
        pytest.param(
            '403 {"type":"error","error":{"type":"permission_error","message":"no"}}', FailureClass.FATAL_AUTH, id="403"
        ),
        pytest.param("429 status code (no body)", FailureClass.TRANSIENT_OVERLOAD, id="429"),
        pytest.param("502 Bad Gateway", FailureClass.TRANSIENT_NETWORK, id="502"),
    ],
)
def test_a_retry_line_classifies_by_its_error(message: str, expected: FailureClass) -> None:
    line = {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": message}
    events = parse_all(HARNESS, [b'{"type":"session","id":"s1"}', json.dumps(line).encode()])
    verdict = HARNESS.classify(AttemptFacts(143, None, events, ""))
    assert verdict.failure_class is expected
    if expected is FailureClass.FATAL_AUTH:
        assert verdict.reason.endswith(LOGIN_HINT) and "refused Pi's credentials" in verdict.reason
    else:
        assert LOGIN_HINT not in verdict.reason


def test_a_result_after_a_retry_line_is_a_success() -> None:
    retry = {
        "type": "auto_retry_start",
        "attempt": 1,
        "maxAttempts": 3,
        "delayMs": 2000,
        "errorMessage": ERROR_MESSAGE_529,
    }
    done = {
        "type": "message_end",
        "message": {"role": "assistant", "stopReason": "stop", "content": [{"type": "text", "text": "ok"}]},
    }
    # Pi got through on its own retry before corral's stop took effect: the result is the last word.
    events = parse_all(HARNESS, [json.dumps(retry).encode(), json.dumps(done).encode()])
    assert HARNESS.classify(AttemptFacts(0, None, events, "")).succeeded


def test_recorded_resumed_turn_keeps_its_session() -> None:
    events, verdict = judge("resumed_turn.jsonl")
    assert verdict.succeeded and verdict.result_text == "second answer"
    [session] = [e for e in events if e.kind == "session"]
    assert session.session_id == json.loads(recorded("resumed_turn.jsonl")[0])["id"]


def test_recorded_success_killed_by_a_signal_is_not_a_success() -> None:
    events = parse_all(HARNESS, recorded("bash_tool_turn.jsonl"))
    verdict = HARNESS.classify(AttemptFacts(None, 15, events, ""))
    assert not verdict.succeeded
