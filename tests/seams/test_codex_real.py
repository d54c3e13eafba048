"""Test seam 2 for Codex: the real ``codex`` binary against the scripted Responses API server.

Each real-binary test runs the argv :class:`CodexHarness` builds (``work()``, with the ``-c``
options of :func:`codex_config_args` as ``extra``) in a temporary git repository, with HOME in the
temporary directory and CODEX_HOME outside it (under ``~/.cache``, as a user's ``~/.codex`` is:
Codex will not make its bubblewrap helper under the temporary directory), against a loopback
:class:`ResponsesServer`; its stdout is read with ``CodexHarness.parse`` and judged with
``CodexHarness.classify``. The tests "as users configure it" put the provider in
``$CODEX_HOME/config.toml`` with no retry settings and add nothing to corral's argv: Codex at
its defaults, corral turning its retries off. The server is also
checked on its own, and the parse tests at the end read outputs recorded from the real runs
(``tests/fixtures/codex/*.jsonl``; re-record with ``CORRAL_RECORD_FIXTURES=1``) — those two
groups run without the binary.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import AttemptFacts, Event, Launch, TurnRequest, Verdict
from corral.adapters.harness.codex import LOGIN_HINT, CodexHarness
from corral.domain.failures import TRANSIENT, FailureClass
from tests.conftest import git
from tests.support.codex import (
    CODEX_VERSION,
    COMMAND_FORMAT,
    ERROR_401,
    ERROR_429,
    ERROR_500,
    ERROR_503,
    ERROR_MISSING_KEY,
    ERROR_QUOTA,
    ERROR_STREAM_PREFIX,
    EXIT_USAGE,
    KEY_VARIABLE,
    MODEL,
    MODEL_METADATA_WARNING,
    RECONNECTING_PREFIX,
    RESUME_SANDBOX_ERROR,
    TEST_API_KEY,
    VERSION_LINE,
    closed_port_url,
    codex_bin_or_skip,
    codex_config_args,
    codex_env,
    codex_home_outside_tmp,
    codex_version,
    path_without_bwrap,
    write_provider_config,
)
from tests.support.pi import HarnessRun, fixture_lines, parse_all, record_fixture, run_launch, run_turn
from tests.support.responses_server import (
    USAGE,
    Error,
    ExecCommand,
    Failed,
    Message,
    ResponsesServer,
    Step,
    error_body,
    responses_server,
)

pytestmark = pytest.mark.timeout(60)

#: How corral's CodexHarness should build a resumed work turn: `exec`'s options before `resume`.
RESUME_FIX = (
    "CodexHarness._argv (src/corral/adapters/harness/codex.py:29-35) puts -s after `exec resume <id>`, which "
    "`codex exec resume` rejects (exit 2); build [codex, exec, --json, -s, SANDBOX, --skip-git-repo-check, "
    "*extra, -m MODEL, resume, ID, PROMPT|-] instead"
)


@pytest.fixture
def codex() -> Path:
    """The pinned Codex binary; fails under CI when missing, skips with the reason locally."""
    return codex_bin_or_skip()


@pytest.fixture
def codex_homes(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """HOME in the test's temporary directory; CODEX_HOME outside it, where Codex will make its
    sandbox helper (see tests/support/codex.py)."""
    with codex_home_outside_tmp() as codex_home:
        yield tmp_path / "home", codex_home


def harness_for(codex: Path, server: ResponsesServer, **options: Any) -> CodexHarness:
    return CodexHarness(executable=str(codex), extra=codex_config_args(server, **options))


def request(repo: Path, prompt: str, **kw: Any) -> TurnRequest:
    return TurnRequest(prompt=prompt, cwd=str(repo), model=MODEL, **kw)


def env_for(homes: tuple[Path, Path], **kw: Any) -> dict[str, str]:
    return codex_env(*homes, **kw)


def metadata(req: Any) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(req.headers["x-codex-turn-metadata"])
    return value


def assert_succeeded(run: HarnessRun) -> Verdict:
    assert run.returncode == 0, run.describe()
    verdict = run.verdict()
    assert verdict.succeeded, (verdict, run.describe())
    return verdict


def with_hint(message: str, verdict: Verdict) -> str:
    """A refused key's reason carries Codex's login step; any other reason is Codex's message."""
    return f"{message} — {LOGIN_HINT}" if verdict.failure_class is FailureClass.FATAL_AUTH else message


def line_types(run: HarnessRun) -> list[str]:
    return [e["type"] for e in run.lines]


# ---------------------------------------------------------------------------------------------
# The real binary


def test_pinned_version(codex: Path) -> None:
    assert codex_version(codex) == VERSION_LINE == f"codex-cli {CODEX_VERSION}"


def test_exec_command_runs_in_the_workspace_and_the_turn_succeeds(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    with responses_server([ExecCommand("echo hi > made.txt && pwd"), Message("all done")]) as server:
        harness = harness_for(codex, server)
        launch = harness.work(request(repo, "make a file"))
        assert launch.argv[:6] == [str(codex), "exec", "--json", "-s", "workspace-write", "--skip-git-repo-check"]
        run = run_launch(harness, launch, cwd=repo, env=env_for(codex_homes))
    record_fixture("codex", "exec_command_turn.jsonl", run.stdout)
    verdict = assert_succeeded(run)
    assert verdict.result_text == "all done"
    assert (repo / "made.txt").read_text() == "hi\n"
    # The raw stream.
    assert line_types(run) == [
        "thread.started", "item.completed", "turn.started", "item.started", "item.completed", "item.completed",
        "turn.completed",
    ]  # fmt: skip
    thread_id = run.lines[0]["thread_id"]
    warning, started, done, message = (e["item"] for e in run.lines[1:6] if "item" in e)
    assert warning == {"id": "item_0", "type": "error", "message": MODEL_METADATA_WARNING.format(model=MODEL)}
    command = COMMAND_FORMAT.format(cmd="echo hi > made.txt && pwd")
    assert started == {
        "id": "item_1", "type": "command_execution", "command": command, "aggregated_output": "",
        "exit_code": None, "status": "in_progress",
    }  # fmt: skip
    assert done == {**started, "aggregated_output": f"{repo}\n", "exit_code": 0, "status": "completed"}
    assert message == {"id": "item_2", "type": "agent_message", "text": "all done"}
    assert run.lines[-1]["usage"]["input_tokens"] == 2 * USAGE["input_tokens"]
    # Corral's view of it.
    assert run.session_id == thread_id
    [start] = run.of("tool_start")
    [end] = run.of("tool_end")
    assert (start.tool_id, start.name) == ("item_1", command) and end.tool_id == "item_1" and not end.is_error
    [result] = run.of("result")
    assert result.usage == run.lines[-1]["usage"]
    # What the server saw.
    assert server.remaining == []
    first, second = server.script_requests
    assert first.path == "/v1/responses" and first.model == MODEL and first.body["stream"] is True
    assert first.headers["authorization"] == f"Bearer {TEST_API_KEY}"
    assert first.headers["originator"] == "codex_exec"
    assert first.headers["user-agent"].startswith(f"codex_exec/{CODEX_VERSION} ")
    assert first.headers["session-id"] == first.headers["thread-id"] == thread_id
    assert metadata(first)["sandbox_mode"] == "workspace-write"
    exec_tool = first.tool("exec_command")
    assert exec_tool is not None and exec_tool["type"] == "function"
    assert exec_tool["parameters"]["required"] == ["cmd"]
    assert first.texts(role="user")[-1] == "make a file"
    [call] = second.items("function_call")
    [output] = second.function_call_outputs()
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "echo hi > made.txt && pwd"}
    assert output["call_id"] == call["call_id"]
    assert "Process exited with code 0" in output["output"] and output["output"].endswith(f"Output:\n{repo}\n")


def test_failing_command_is_a_tool_error(codex: Path, repo: Path, codex_homes: tuple[Path, Path]) -> None:
    with responses_server([ExecCommand("echo oops >&2; exit 3"), Message("saw it")]) as server:
        harness = harness_for(codex, server)
        run = run_turn(harness, request(repo, "fail"), env=env_for(codex_homes))
    record_fixture("codex", "command_error.jsonl", run.stdout)
    assert assert_succeeded(run).result_text == "saw it"
    done = [e["item"] for e in run.lines if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert [(i["exit_code"], i["status"], i["aggregated_output"]) for i in done] == [(3, "failed", "oops\n")]
    [end] = run.of("tool_end")
    assert end.is_error is True
    assert "Process exited with code 3" in server.script_requests[1].function_call_outputs()[0]["output"]


def _error_cases() -> list[Any]:
    return [
        pytest.param(Error(401), FailureClass.FATAL_AUTH, "error_401.jsonl", id="401"),
        pytest.param(Error(503), FailureClass.TRANSIENT_OVERLOAD, "error_503.jsonl", id="503"),
        pytest.param(Error(429), FailureClass.TRANSIENT_OVERLOAD, "error_429.jsonl", id="429"),
        # Codex hides the status of a 500 behind its own "high demand" text: corral must still call it
        # transient. FAILS with CodexHarness as it is (unknown): see the report.
        pytest.param(Error(500), TRANSIENT, "error_500.jsonl", id="500"),
        # A stream that fails after it began. FAILS with CodexHarness as it is (unknown).
        pytest.param(Failed(), FailureClass.TRANSIENT_NETWORK, "response_failed.jsonl", id="response.failed"),
    ]


def _expected_message(step: Error | Failed, server: ResponsesServer) -> str:
    request_id = "req_000000000000000000000001"
    if isinstance(step, Failed):
        return ERROR_STREAM_PREFIX + step.message
    message = error_body(step.status)["error"]["message"]
    return {
        401: ERROR_401.format(message=message, base_url=server.base_url, request_id=request_id),
        503: ERROR_503.format(message=message, base_url=server.base_url, request_id=request_id),
        429: ERROR_429.format(request_id=request_id),
        500: ERROR_500,
    }[step.status]


@pytest.mark.parametrize(("step", "expected", "fixture"), _error_cases())
def test_error_reply_fails_the_turn_with_a_class(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path], step: Error | Failed, expected: Any, fixture: str
) -> None:
    with responses_server([step] * 3) as server:
        harness = harness_for(codex, server)
        run = run_turn(harness, request(repo, "hi"), env=env_for(codex_homes))
        message = _expected_message(step, server)
    record_fixture("codex", fixture, run.stdout)
    assert run.returncode == 1, run.describe()
    assert len(server.script_requests) == 1  # retries are off (codex_config_args)
    assert line_types(run) == ["thread.started", "item.completed", "turn.started", "error", "turn.failed"]
    assert run.lines[-2] == {"type": "error", "message": message}
    assert run.lines[-1] == {"type": "turn.failed", "error": {"message": message}}
    verdict = run.verdict()
    assert not verdict.succeeded
    assert verdict.reason == with_hint(message, verdict)
    if isinstance(expected, FailureClass):
        assert verdict.failure_class is expected, f"{verdict}"
    else:
        assert verdict.failure_class in expected, f"{verdict}"


def test_insufficient_quota_fails(codex: Path, repo: Path, codex_homes: tuple[Path, Path]) -> None:
    quota = Error(
        429, "You exceeded your current quota, please check your plan.", "insufficient_quota", "insufficient_quota"
    )
    with responses_server([quota] * 3) as server:
        run = run_turn(harness_for(codex, server), request(repo, "hi"), env=env_for(codex_homes))
    record_fixture("codex", "error_quota.jsonl", run.stdout)
    assert run.returncode == 1, run.describe()
    assert run.lines[-1] == {"type": "turn.failed", "error": {"message": ERROR_QUOTA}}
    assert not run.verdict().succeeded


def test_corral_owns_the_cadence_even_where_a_user_set_codex_retries(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    # A user's provider with stream_max_retries=2: corral's own settings come after it and win,
    # so the failed stream is one request and corral's ladder decides what follows. (What
    # Codex prints when it does reconnect by itself is tests/fixtures/codex/reconnect_recovered.jsonl.)
    with responses_server([Failed(), Message("recovered")]) as server:
        harness = harness_for(codex, server, stream_max_retries=2)
        launch = harness.work(request(repo, "hi"))
        run = run_turn(harness, request(repo, "hi"), env=env_for(codex_homes))
    user = launch.argv.index(next(a for a in launch.argv if a.startswith("model_providers.scripted={")))
    ours = launch.argv.index("model_providers.scripted.stream_max_retries=0")
    assert ours > user
    assert len(server.script_requests) == 1
    assert not run.verdict().succeeded
    assert not any(str(line.get("message", "")).startswith(RECONNECTING_PREFIX) for line in run.lines)


def _first_turn(codex: Path, repo: Path, env: dict[str, str], server: ResponsesServer) -> HarnessRun:
    first = run_turn(harness_for(codex, server), request(repo, "first prompt"), env=env)
    assert assert_succeeded(first).result_text == "first answer"
    assert first.session_id
    return first


def test_resume_as_the_harness_builds_it(codex: Path, repo: Path, codex_homes: tuple[Path, Path]) -> None:
    env = env_for(codex_homes)
    with responses_server([Message("first answer"), Message("second answer")]) as server:
        first = _first_turn(codex, repo, env, server)
        harness = harness_for(codex, server)
        second = run_turn(harness, request(repo, "second prompt", resume_id=first.session_id), env=env)
    assert RESUME_SANDBOX_ERROR not in second.stderr, RESUME_FIX
    assert second.returncode == 0, f"{RESUME_FIX}\n{second.describe()}"
    assert second.session_id == first.session_id
    assert second.verdict().result_text == "second answer"


def test_resume_with_exec_options_before_the_subcommand(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    env = env_for(codex_homes)
    steps: list[Step] = [Message("first answer"), ExecCommand("touch resumed.txt"), Message("second answer")]
    with responses_server(steps) as server:
        first = _first_turn(codex, repo, env, server)
        thread = first.session_id
        assert thread
        extra = codex_config_args(server)
        # Options after `resume <id>`: rejected by clap, nothing runs.
        wrong = [str(codex), "exec", "resume", thread, "--json", "-s", "workspace-write", "hi"]
        rejected = run_launch(CodexHarness(str(codex)), Launch(wrong), cwd=repo, env=env)
        assert rejected.returncode == EXIT_USAGE and RESUME_SANDBOX_ERROR in rejected.stderr
        assert rejected.stdout == ""
        # The same options before the subcommand: accepted, and they apply to the resumed turn.
        argv = [str(codex), "exec", "--json", "-s", "workspace-write", "--skip-git-repo-check", *extra]
        argv += ["-m", MODEL, "resume", thread, "second prompt"]
        harness = CodexHarness(str(codex))
        second = run_launch(harness, Launch(argv), cwd=repo, env=env)
    record_fixture("codex", "resume_first.jsonl", first.stdout)
    record_fixture("codex", "resume_second.jsonl", second.stdout)
    assert assert_succeeded(second).result_text == "second answer"
    assert second.session_id == thread  # thread.started repeats the resumed thread's id
    assert (repo / "resumed.txt").exists()  # workspace-write applied
    assert len(server.script_requests) == 3
    resumed = server.script_requests[1]
    assert metadata(resumed)["sandbox_mode"] == "workspace-write"
    assert metadata(resumed)["history_initialization"] == "cold_resume"
    assert metadata(resumed)["thread_id"] == thread
    assert [t for t in resumed.texts(role="user") if "prompt" in t] == ["first prompt", "second prompt"]
    assert resumed.texts(role="assistant") == ["first answer"]


def test_long_prompt_goes_on_stdin(codex: Path, repo: Path, codex_homes: tuple[Path, Path]) -> None:
    prompt = "x" * (100 * 1024)
    with responses_server([Message("read it")]) as server:
        harness = harness_for(codex, server)
        launch = harness.work(request(repo, prompt))
        assert launch.argv[-1] == "-" and launch.stdin == prompt.encode()
        run = run_launch(harness, launch, cwd=repo, env=env_for(codex_homes))
    assert assert_succeeded(run).result_text == "read it"
    assert server.script_requests[0].texts(role="user")[-1] == prompt


def test_missing_api_key_fails_before_any_request(codex: Path, repo: Path, codex_homes: tuple[Path, Path]) -> None:
    with responses_server([Message("unused")]) as server:
        harness = harness_for(codex, server)
        run = run_turn(harness, request(repo, "hi"), env=env_for(codex_homes, api_key=None))
    assert run.returncode == 1, run.describe()
    assert server.requests == []
    assert run.lines[-1] == {
        "type": "turn.failed",
        "error": {"message": ERROR_MISSING_KEY.format(variable=KEY_VARIABLE)},
    }
    assert not run.verdict().succeeded


# ---------------------------------------------------------------------------------------------
# The real binary as users configure it: a provider in $CODEX_HOME/config.toml, Codex's defaults


def at_defaults(codex: Path, codex_home: Path) -> CodexHarness:
    """The harness as corral makes it (no options of the test's own), reading ``codex_home``."""
    return CodexHarness(executable=str(codex), env={"CODEX_HOME": str(codex_home)})


def test_bubblewrap_is_installed() -> None:
    # CI installs it (.ci/run) so that every test here meets Codex's bubblewrap sandbox, as many
    # Linux machines do; on a machine without it Codex falls back to its own sandbox.
    assert shutil.which("bwrap"), "bubblewrap is not installed: apt-get install bubblewrap"


@pytest.mark.parametrize("bubblewrap", ["installed", "absent"])
def test_a_commit_from_a_task_worktree_lands_on_its_branch_and_nothing_else_is_writable(
    codex: Path, codex_homes: tuple[Path, Path], tmp_path: Path, bubblewrap: str
) -> None:
    path = os.environ["PATH"] if bubblewrap == "installed" else path_without_bwrap(tmp_path / "bin")
    # Outside the temporary directory, which the sandbox leaves writable as a whole (like a
    # user's project under their home).
    with codex_home_outside_tmp("corral-test-codex-repo-") as place:
        _commit_from_a_worktree(codex, codex_homes, place, path)


def _commit_from_a_worktree(codex: Path, codex_homes: tuple[Path, Path], place: Path, path: str) -> None:
    repo, worktree = place / "repo", place / "worktree"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "initial")
    git(repo, "worktree", "add", "-q", "-b", "corral/t1", str(worktree))
    main_before = git(repo, "rev-parse", "main")
    commit = "echo hi > hello.txt && git add hello.txt && git commit -q -m 'add hello' && git log --format=%s -1"
    beyond = (
        f"git update-ref refs/heads/main HEAD; echo main=$?; git config corral.probe yes; echo config=$?; "
        f"touch {repo}/.git/probe; echo touch=$?; git update-ref refs/heads/elsewhere HEAD; echo elsewhere=$?"
    )
    with responses_server([ExecCommand(commit), ExecCommand(beyond), Message("committed")]) as server:
        write_provider_config(codex_homes[1], server)
        env = env_for(codex_homes, extra={"PATH": path})
        run = run_turn(at_defaults(codex, codex_homes[1]), request(worktree, "commit hello"), env=env)
    assert assert_succeeded(run).result_text == "committed"
    committed, refused = run.of("tool_end")
    assert not committed.is_error and (committed.text or "").strip() == "add hello", committed
    assert git(repo, "log", "--format=%s", "-1", "corral/t1") == "add hello"
    assert git(repo, "show", "--name-only", "--format=", "corral/t1") == "hello.txt"
    assert git(worktree, "status", "--porcelain") == ""
    # Nothing beyond what the commit needs: another branch, the repository's config, its .git.
    codes = dict(line.split("=") for line in (refused.text or "").splitlines() if "=" in line)
    assert codes.keys() == {"main", "config", "touch", "elsewhere"} and "0" not in codes.values(), refused
    assert "Read-only file system" in (refused.text or ""), refused
    assert git(repo, "rev-parse", "main") == main_before
    assert subprocess.run(["git", "config", "--get", "corral.probe"], cwd=repo).returncode == 1
    assert not (repo / ".git" / "probe").exists()
    assert not (repo / ".git" / "refs" / "heads" / "elsewhere").exists()


def test_a_sandbox_that_cannot_run_is_fatal_config_not_a_success(codex: Path, repo: Path, tmp_path: Path) -> None:
    # CODEX_HOME under the temporary directory, bubblewrap installed: Codex will not make its
    # sandbox helper, and every command fails while the model carries on to a "successful" turn.
    homes = (tmp_path / "home", tmp_path / "codex-home-in-tmp")
    with responses_server([ExecCommand("echo hi > made.txt"), Message("all done")]) as server:
        write_provider_config(homes[1], server)
        run = run_turn(at_defaults(codex, homes[1]), request(repo, "make a file"), env=env_for(homes))
    assert run.returncode == 0 and run.of("result"), run.describe()  # Codex calls it a success
    assert not (repo / "made.txt").exists()
    verdict = run.verdict()
    assert not verdict.succeeded
    assert verdict.failure_class is FailureClass.FATAL_CONFIG
    assert "Refusing to create helper binaries under temporary dir" in verdict.reason
    assert "set CODEX_HOME to a directory outside the temporary directory" in verdict.reason
    # What the model was told: the command never ran (Codex's stream may not even show it).
    [output] = server.script_requests[1].function_call_outputs()
    assert "bwrap: execvp codex-linux-sandbox: No such file or directory" in output["output"]
    # Read live, Codex's stderr is enough to end the attempt before it runs anything.
    assert at_defaults(codex, homes[1]).stop_now([], run.stderr) == verdict


def test_the_helper_warning_without_bubblewrap_is_no_failure(codex: Path, repo: Path, tmp_path: Path) -> None:
    # The same temporary CODEX_HOME on a machine without bubblewrap: Codex's own sandbox runs
    # the command, and its warning on stderr is only a warning.
    homes = (tmp_path / "home", tmp_path / "codex-home-in-tmp")
    path = path_without_bwrap(tmp_path / "bin")
    with responses_server([ExecCommand("echo hi > made.txt"), Message("all done")]) as server:
        write_provider_config(homes[1], server)
        harness = CodexHarness(str(codex), env={"CODEX_HOME": str(homes[1]), "PATH": path})
        run = run_turn(harness, request(repo, "make a file"), env=env_for(homes, extra={"PATH": path}))
    assert "Refusing to create helper binaries under temporary dir" in run.stderr
    assert assert_succeeded(run).result_text == "all done"
    assert (repo / "made.txt").read_text() == "hi\n"


def test_a_sandbox_failure_in_a_command_is_fatal_config() -> None:
    # What a command's output looks like when bwrap itself fails (recorded shapes, no binary).
    harness = CodexHarness("codex", env={"PATH": ""})
    for output in ("bwrap: Creating new namespace failed: Operation not permitted\n",
                   "bwrap: execvp codex-linux-sandbox: No such file or directory\n"):  # fmt: skip
        end = Event("tool_end", tool_id="item_1", is_error=True, text=output)
        facts = AttemptFacts(0, None, [end, Event("text", text="done"), Event("result")], "")
        verdict = harness.classify(facts)
        assert verdict.failure_class is FailureClass.FATAL_CONFIG, verdict
        assert verdict.reason == f"Codex's sandbox could not run a command: {output.strip()}"
    # The same words from a command the agent ran on purpose, mid-output, are not the sandbox's.
    end = Event("tool_end", tool_id="item_1", is_error=True, text="grep found: see bwrap: docs\n")
    assert harness.classify(AttemptFacts(0, None, [end, Event("text", text="ok"), Event("result")], "")).succeeded


def test_a_401_at_codex_defaults_fails_at_once_with_the_login_hint(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    with responses_server([Error(401)] * 5) as server:
        write_provider_config(codex_homes[1], server)
        run = run_turn(at_defaults(codex, codex_homes[1]), request(repo, "hi"), env=env_for(codex_homes), timeout=10)
        message = _expected_message(Error(401), server)
    assert run.returncode == 1, run.describe()
    assert len(server.script_requests) == 1
    verdict = run.verdict()
    assert verdict.failure_class is FailureClass.FATAL_AUTH
    assert verdict.code == "harness-not-authenticated"
    assert verdict.reason == f"{message} — {LOGIN_HINT}"


def test_corral_turns_off_the_configured_providers_retries(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    retries_off = [
        "-c", "model_providers.scripted.request_max_retries=0",
        "-c", "model_providers.scripted.stream_max_retries=0",
    ]  # fmt: skip
    env = env_for(codex_homes)
    with responses_server([Error(500), Error(500), Message("rescued")]) as server:
        write_provider_config(codex_homes[1], server)
        launch = at_defaults(codex, codex_homes[1]).work(request(repo, "hi"))
        assert launch.argv[6:10] == retries_off
        run = run_launch(at_defaults(codex, codex_homes[1]), launch, cwd=repo, env=env)
        assert len(server.script_requests) == 1  # the ladder retries, not Codex
        assert run.verdict().failure_class in TRANSIENT
        # The same argv without those options: Codex retries on its own, silently, and rescues the turn.
        bare = Launch([a for i, a in enumerate(launch.argv) if not 6 <= i < 10], launch.env, launch.stdin)
        own = run_launch(at_defaults(codex, codex_homes[1]), bare, cwd=repo, env=env)
    assert assert_succeeded(own).result_text == "rescued"
    assert len(server.script_requests) == 3
    assert not any(e["type"] == "error" for e in own.lines)


def test_an_unreachable_provider_is_stopped_as_unreachable(
    codex: Path, repo: Path, codex_homes: tuple[Path, Path]
) -> None:
    write_provider_config(codex_homes[1], closed_port_url())
    harness = at_defaults(codex, codex_homes[1])
    launch = harness.work(request(repo, "hi"))
    proc = subprocess.Popen(
        launch.argv, cwd=repo, env=env_for(codex_homes), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    events: list[Any] = []
    verdict = None
    deadline = time.monotonic() + 40
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # Codex never ends by itself here: corral has to
            events += harness.parse(line)
            verdict = harness.stop_now(events)
            if verdict is not None or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert verdict is not None, events
    assert verdict.failure_class is FailureClass.TRANSIENT_UNREACHABLE
    assert verdict.reason.startswith("Reconnecting... waiting for network")
    assert harness.classify(AttemptFacts(proc.returncode, 9, events, "")) == verdict


# ---------------------------------------------------------------------------------------------
# The server on its own (no binary)


def post(server: ResponsesServer, body: Any, path: str = "/v1/responses") -> tuple[int, dict[str, str], bytes]:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def sse(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for record in data.decode().split("\n\n"):
        if not record.strip():
            continue
        fields = dict(line.split(": ", 1) for line in record.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_server_streams_a_message_then_a_function_call() -> None:
    with responses_server([Message("hello"), ExecCommand("ls", call_id="call_x", workdir="/w")]) as server:
        status, headers, data = post(server, {"model": "m", "input": [{"role": "user", "content": "hi"}]})
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = sse(data)
        assert [name for name, _ in events] == [
            "response.created", "response.output_item.added", "response.output_text.delta",
            "response.output_item.done", "response.completed",
        ]  # fmt: skip
        assert all(name == payload["type"] for name, payload in events)
        assert [payload["sequence_number"] for _, payload in events] == list(range(5))
        assert events[2][1]["delta"] == "hello"
        item = events[3][1]["item"]
        assert item["role"] == "assistant" and item["content"][0] == {
            "type": "output_text",
            "text": "hello",
            "annotations": [],
        }
        done = events[-1][1]["response"]
        assert done["status"] == "completed" and done["usage"] == USAGE and done["output"] == [item]
        assert done["id"] == events[0][1]["response"]["id"]

        status, _, data = post(server, {"model": "m", "input": []})
        call = sse(data)[2][1]["item"]
        assert call["type"] == "function_call" and call["call_id"] == "call_x" and call["name"] == "exec_command"
        assert json.loads(call["arguments"]) == {"cmd": "ls", "workdir": "/w"}
        # Exhausted: a placeholder message rather than a hang.
        _, _, data = post(server, {"model": "m", "input": []})
        assert sse(data)[2][1]["delta"] == "(script exhausted)"
    assert [r.kind for r in server.requests] == ["script"] * 3
    assert [r.step for r in server.requests] == [0, 1, None]
    assert server.requests[0].texts(role="user") == ["hi"]


def test_server_error_replies_and_failed_streams() -> None:
    with responses_server(
        [Error(401), Error(503, headers={"retry-after": "1"}), Failed("rate_limit_exceeded", "slow")]
    ) as server:
        status, _, data = post(server, {"model": "m"})
        assert status == 401
        assert json.loads(data) == error_body(401)
        assert json.loads(data)["error"]["code"] == "invalid_api_key"
        status, headers, data = post(server, {"model": "m"})
        assert status == 503 and headers["retry-after"] == "1" and headers["x-request-id"]
        status, _, data = post(server, {"model": "m"})
        events = sse(data)
        assert [name for name, _ in events] == ["response.created", "response.failed"]
        assert events[1][1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "slow"}
        # Other paths are not model calls.
        status, _, _ = post(server, {"model": "m"}, path="/v1/chat/completions")
        assert status == 404
    assert [r.kind for r in server.requests] == ["script", "script", "script", "other"]
    assert server.remaining == []


# ---------------------------------------------------------------------------------------------
# Recorded outputs (no binary needed)

HARNESS = CodexHarness(executable="codex")


def judge(name: str, exit_code: int) -> tuple[list[Any], Verdict]:
    events = parse_all(HARNESS, fixture_lines("codex", name))
    return events, HARNESS.classify(AttemptFacts(exit_code, None, events, ""))


def test_recorded_exec_turn_parses_to_a_success() -> None:
    lines = fixture_lines("codex", "exec_command_turn.jsonl")
    events, verdict = judge("exec_command_turn.jsonl", 0)
    assert verdict.succeeded and verdict.result_text == "all done"
    kinds = [e.kind for e in events if e.kind != "keepalive"]
    # The "model metadata not found" warning item is a non-fatal warning, not a model error.
    assert kinds == ["session", "tool_start", "tool_end", "text", "result"]
    assert events[0].session_id == json.loads(lines[0])["thread_id"]
    start = next(e for e in events if e.kind == "tool_start")
    assert start.name == COMMAND_FORMAT.format(cmd="echo hi > made.txt && pwd")
    assert next(e for e in events if e.kind == "result").usage["output_tokens"] == 2 * USAGE["output_tokens"]
    # The same output with a non-zero exit is not a success.
    assert not HARNESS.classify(AttemptFacts(1, None, events, "")).succeeded


def test_recorded_failing_command_is_flagged() -> None:
    events, verdict = judge("command_error.jsonl", 0)
    [end] = [e for e in events if e.kind == "tool_end"]
    assert end.is_error is True
    assert verdict.succeeded and verdict.result_text == "saw it"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("error_401.jsonl", FailureClass.FATAL_AUTH, id="401"),
        pytest.param("error_503.jsonl", FailureClass.TRANSIENT_OVERLOAD, id="503"),
        pytest.param("error_429.jsonl", FailureClass.TRANSIENT_OVERLOAD, id="429"),
        # FAIL with CodexHarness as it is (classified unknown): see the report.
        pytest.param("error_500.jsonl", TRANSIENT, id="500"),
        pytest.param("response_failed.jsonl", FailureClass.TRANSIENT_NETWORK, id="response.failed"),
    ],
)
def test_recorded_error_turns_classify(name: str, expected: Any) -> None:
    events, verdict = judge(name, 1)
    assert not verdict.succeeded
    assert not any(e.kind == "result" for e in events)
    final = json.loads(fixture_lines("codex", name)[-1])
    assert final["type"] == "turn.failed" and verdict.reason == with_hint(final["error"]["message"], verdict)
    if isinstance(expected, FailureClass):
        assert verdict.failure_class is expected, f"{verdict}"
    else:
        assert verdict.failure_class in expected, f"{verdict}"


def test_recorded_quota_turn_fails() -> None:
    _, verdict = judge("error_quota.jsonl", 1)
    assert not verdict.succeeded and verdict.reason == f"{ERROR_QUOTA} — {LOGIN_HINT}"


def test_recorded_reconnect_then_success_is_a_success() -> None:
    events, verdict = judge("reconnect_recovered.jsonl", 0)
    assert verdict.succeeded and verdict.result_text == "recovered"
    assert any((e.text or "").startswith(RECONNECTING_PREFIX) for e in events)


def test_recorded_resume_keeps_the_thread() -> None:
    first, _ = judge("resume_first.jsonl", 0)
    second, verdict = judge("resume_second.jsonl", 0)
    [a] = [e.session_id for e in first if e.kind == "session"]
    [b] = [e.session_id for e in second if e.kind == "session"]
    assert a == b
    assert verdict.succeeded and verdict.result_text == "second answer"
    assert [e.kind for e in second if e.kind in ("tool_start", "tool_end")] == ["tool_start", "tool_end"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(f"{RECONNECTING_PREFIX}1/5 ({ERROR_401})", FailureClass.FATAL_AUTH, id="401"),
        pytest.param(f"{RECONNECTING_PREFIX}1/5 ({ERROR_500})", FailureClass.TRANSIENT_OVERLOAD, id="500"),
        pytest.param(
            f"{RECONNECTING_PREFIX}1/5 ({ERROR_STREAM_PREFIX}boom)", FailureClass.TRANSIENT_NETWORK, id="stream"
        ),
        pytest.param(
            "Reconnecting... waiting for network (Connection failed: error sending request)",
            FailureClass.TRANSIENT_UNREACHABLE,
            id="waiting-for-network",
        ),
    ],
)
def test_an_attempt_ended_at_a_retry_line_is_classified_from_it(line: str, expected: FailureClass) -> None:
    # corral ends Codex at its first retry line (corral_owns_retries): SIGTERM, no turn.failed.
    assert HARNESS.corral_owns_retries is True
    events = [*HARNESS.parse(json.dumps({"type": "thread.started", "thread_id": "t"}).encode())]
    events += HARNESS.parse(json.dumps({"type": "error", "message": line}).encode())
    assert events[-1].kind == "retry"
    verdict = HARNESS.classify(AttemptFacts(143, 15, events, ""))
    assert verdict.failure_class is expected, verdict
    assert not verdict.succeeded
