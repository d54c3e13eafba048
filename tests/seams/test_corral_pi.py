"""Test seam 2 through corral's CLI: the real Pi binary, run by corral's own supervisor.

Pi is configured the way its users configure it: a custom provider in ``models.json`` under
``PI_CODING_AGENT_DIR`` pointing at a loopback :class:`ScriptedServer` (Anthropic Messages), its
API key in the variable the provider's ``apiKey`` names, no ``settings.json`` (Pi's own retry
settings at their defaults: the SDK's two silent retries, then three announced ones). The task's
model is ``<provider>/<model>``, as a Pi user writes it. Every step is the real ``corral`` command
as a process (``tests.conftest.CLI``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.pi import LOGIN_HINT, READ_ONLY_TOOLS
from tests.conftest import CLI, git
from tests.support.auto_resume import spawn_daemon, until_auto_resumed, until_substate
from tests.support.model_server import Error, Hang, ScriptedServer, Step, Text, ToolUse
from tests.support.pi import KEY_VARIABLE, MODEL, PROVIDER, TEST_API_KEY, pi_bin_or_skip, write_user_provider

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: Variables that would point Pi at a real account or another configuration.
_FOREIGN = ("ANTHROPIC_", "PI_", "OPENAI_", "GEMINI_", "GOOGLE_", "OPENROUTER_")


@dataclass
class Rig:
    """A repository whose tasks run the real Pi against a scripted server."""

    repo: Path
    corral: CLI
    server: ScriptedServer
    env: dict[str, str]
    agent_dir: Path

    def run(self, *args: str, **kw: Any) -> Any:
        return self.corral(*args, env=self.env, **kw)

    def create(self, goal: str, *args: str) -> str:
        created = self.corral.json(
            "create", goal, "--harness", "pi", "--model", f"{PROVIDER}/{MODEL}", *args, env=self.env
        )
        return str(created["task"]["ref"]) if "task" in created else str(created["ref"])

    def show(self, ref: str) -> Any:
        return self.corral.json("show", ref, env=self.env)

    def sessions_in_logs(self, ref: str) -> list[str]:
        return [line.split()[-1] for line in self.run("logs", ref).stdout.splitlines() if line.startswith("· session")]


@pytest.fixture
def make_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pi = pi_bin_or_skip()
    servers: list[ScriptedServer] = []
    rigs: list[Rig] = []

    def make(steps: list[Step], **settings: str) -> Rig:
        server = ScriptedServer(steps)
        servers.append(server)
        agent_dir = write_user_provider(tmp_path / "pi-agent", server)
        repo = tmp_path / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# demo\n")
        git(repo, "add", "README.md")
        git(repo, "commit", "-q", "-m", "initial")
        for key in [k for k in os.environ if k.startswith(_FOREIGN)]:
            monkeypatch.delenv(key)
        env = {
            "PI_CODING_AGENT_DIR": str(agent_dir),
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            KEY_VARIABLE: TEST_API_KEY,
            "CORRAL_PI_BIN": str(pi),
            "CORRAL_AUTO_RESUME": "0",
            **{f"CORRAL_{name.upper()}": value for name, value in settings.items()},
        }
        rig = Rig(repo, CLI(repo), server, env, agent_dir)
        rigs.append(rig)
        return rig

    try:
        yield make
    finally:
        for rig in rigs:
            with_tasks = rig.corral("list", "--json", env=rig.env)
            if with_tasks.returncode == 0:
                for task in with_tasks.json().get("tasks", []):
                    rig.corral("stop", str(task["ref"]), env=rig.env)
        for server in servers:
            server.close()


def _stored_session(rig: Rig, session: str) -> Path:
    [stored] = (rig.agent_dir / "sessions").glob(f"*/*_{session}.jsonl")
    return stored


def test_start_edits_and_commits_in_the_worktree_and_blocks_with_the_answer(make_rig: Any) -> None:
    commit = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt' && pwd"
    rig = make_rig([ToolUse("bash", {"command": commit}), Text("Done: hello.txt is committed.")])
    ref = rig.create("Add a greeting", "-m", "Write hello.txt and commit it.")
    rig.corral.ok("start", ref, env=rig.env)
    waited = rig.run("wait", ref, "--timeout", "45")
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout, rig.run("logs", ref).stdout)

    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    assert shown["turns"][-1]["content"] == "Done: hello.txt is committed."
    branch = f"corral/{ref}"
    assert git(rig.repo, "log", "-1", "--format=%s", branch) == "Add hello.txt"
    assert git(rig.repo, "show", f"{branch}:hello.txt") == "hello"
    assert git(rig.repo, "rev-parse", f"{branch}~1") == git(rig.repo, "rev-parse", "main")
    worktree = Path(rig.corral.json("paths", env=rig.env)["paths"]["worktrees"]) / ref
    assert git(worktree, "status", "--porcelain") == ""
    assert "Done: hello.txt is committed." in rig.run("show", ref).stdout
    # The tool call ran, and succeeded, in the task's worktree; the key came from the provider's variable.
    first, second = rig.server.script_requests
    assert first.headers["x-api-key"] == TEST_API_KEY
    [result] = second.tool_results()
    assert not result.get("is_error") and str(worktree) in json.dumps(result["content"]), result
    session = shown["session"]["harness_session_id"]
    assert session and _stored_session(rig, session).is_file()


def test_unblock_resumes_the_same_session_and_ask_is_read_only(make_rig: Any) -> None:
    rig = make_rig([Text("first answer")])
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    session = rig.show(ref)["session"]["harness_session_id"]
    assert session

    feedback = "Now say goodbye — in French: « au revoir »."
    rig.server.steps.append(Text("au revoir"))
    rig.corral.ok("unblock", ref, "-m", feedback, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    resumed = rig.server.script_requests[1]
    # The same Pi session, resumed (`--session`): the earlier exchange is sent again, then the feedback.
    assert "first answer" in resumed.texts(role="assistant")
    assert any(feedback in text for text in resumed.texts(role="user"))
    assert {t["name"] for t in resumed.body["tools"]} >= {"bash", "edit", "write"}
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked"
    assert shown["turns"][-1]["content"] == "au revoir"
    assert shown["session"]["harness_session_id"] == session
    assert rig.sessions_in_logs(ref)[-1] == session
    assert [t["feedback_delivery"] for t in shown["turns"] if t["role"] == "human"][-1] == "consumed"
    assert feedback in _stored_session(rig, session).read_text(encoding="utf-8")

    rig.server.steps.append(Text("It says au revoir."))
    asked = rig.run("ask", ref, "-m", "What did you say last?", "--timeout", "45")
    assert asked.returncode == 0, asked.stderr
    assert "It says au revoir." in asked.stdout
    question = rig.server.script_requests[2]
    # Pi's read-only tool set, and nothing else: no bash, edit or write tool.
    assert sorted(t["name"] for t in question.body["tools"]) == sorted(READ_ONLY_TOOLS.split(","))
    assert "au revoir" in question.texts(role="assistant")  # asked in the same session
    assert rig.show(ref)["task"]["status"] == "blocked"  # left as it was


def test_a_401_at_pi_defaults_parks_the_task_blocked_with_the_login_hint(make_rig: Any) -> None:
    rig = make_rig([Error(401)] * 10)
    ref = rig.create("Add a greeting")
    rig.corral.ok("start", ref, env=rig.env)
    # Pi does not retry a 401 (neither its SDK nor its own retry): the first refusal is the verdict.
    waited = rig.run("wait", ref, "--timeout", "10")
    assert waited.returncode == 1, (waited.returncode, waited.stderr)
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    assert len(rig.server.script_requests) == 1
    error_turn = shown["turns"][-1]
    assert error_turn["kind"] == "error"
    assert "HTTP 401 authentication failed: invalid x-api-key" in error_turn["content"]
    assert error_turn["content"].endswith(LOGIN_HINT)
    [attempt] = error_turn["attempts"]
    assert attempt["failure_class"] == "fatal_auth"
    assert "Pi is not authenticated" in rig.run("show", ref).stdout


def test_an_overload_is_retried_on_corrals_ladder_resuming_the_same_session(make_rig: Any) -> None:
    # At Pi's defaults its SDK retries a 529 twice without a word, then Pi announces its own retry
    # (auto_retry_start): the supervisor ends Pi there and corral's ladder (5 s) relaunches it.
    rig = make_rig([Error(529)] * 3 + [Text("done after the overload")])
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.server.wait_for_requests(3, timeout=30)
    deadline = time.monotonic() + 10
    substates: set[str] = set()
    while time.monotonic() < deadline and not any(s.startswith("retrying") for s in substates):
        substates.add(str(rig.show(ref)["task"]["substate"]))
        time.sleep(0.2)
    retrying = [s for s in substates if s.startswith("retrying: attempt 1 (transient_overload)")]
    assert retrying and "HTTP 529 overloaded" in retrying[0], substates
    assert len(rig.server.script_requests) == 3  # Pi's own 2-4-8 s retries never ran
    waited = rig.run("wait", ref, "--timeout", "45")
    assert waited.returncode == 0, waited.stderr
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked"
    turn = shown["turns"][-1]
    assert turn["content"] == "done after the overload"
    assert [(a["outcome"], a["failure_class"]) for a in turn["attempts"]] == [
        ("failed", "transient_overload"),
        ("succeeded", None),
    ]
    first = turn["attempts"][0]
    assert first["failure"]["details"]["reason"] == "Pi's model call failed: HTTP 529 overloaded"
    assert len(rig.server.script_requests) == 4
    # The relaunch resumed the first attempt's session (`--session`), and `logs` shows Pi's retry line.
    session = shown["session"]["harness_session_id"]
    assert rig.sessions_in_logs(ref) == [session, session]
    logs = rig.run("logs", ref).stdout
    assert "↻ harness retry: HTTP 529 overloaded (Pi's retry 1 of 3, due in 2.0 s)" in logs, logs


def test_a_sigkilled_pi_is_auto_resumed_by_the_daemon_in_the_same_session(make_rig: Any) -> None:
    rig = make_rig([Text("first turn done")], watchdog_timeout="60")
    ref = rig.create("Write notes")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    shown = rig.show(ref)
    session, task_id = shown["session"]["harness_session_id"], shown["task"]["id"]

    daemon_env = {**os.environ, **rig.env, "CORRAL_AUTO_RESUME": "1"}
    daemon = spawn_daemon(rig.repo, daemon_env)
    try:
        feedback = "Add notes.txt with one line — «crash-safe» — then stop."
        rig.server.steps.extend(
            [ToolUse("bash", {"command": "echo crash-safe > notes.txt"}), Hang(), Text("resumed and finished")]
        )
        rig.corral.ok("unblock", ref, "-m", feedback, env=rig.env)
        # Real work happened (the file is written), then the model stream stalls: kill Pi there.
        assert rig.server.wait_for_requests(3, timeout=30), "Pi never reached the stalled request"
        paths = rig.corral.json("paths", env=rig.env)["paths"]
        status = json.loads((Path(paths["tasks"]) / task_id / "protocol" / "status.json").read_text())
        worktree = Path(paths["worktrees"]) / ref
        assert (worktree / "notes.txt").read_text() == "crash-safe\n"
        agent_pid = status.get("agent_pid")
        assert isinstance(agent_pid, int) and agent_pid > 1
        assert "pi" in Path(f"/proc/{agent_pid}/cmdline").read_text()  # the launched `pi` (node) itself
        os.kill(agent_pid, signal.SIGKILL)

        shown = until_auto_resumed(lambda: rig.show(ref))
        assert daemon.poll() is None, "the daemon died"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)

    kinds = [(t["role"], t["kind"]) for t in shown["turns"]]
    assert kinds[-3:] == [("agent", "error"), ("human", "auto-resume"), ("agent", "auto-resume")], kinds
    assert "SIGKILL" in shown["turns"][-3]["content"], shown["turns"][-3]
    assert shown["turns"][-1]["content"] == "resumed and finished"
    assert shown["session"]["harness_session_id"] == session and shown["session"]["auto_resumed"] is True
    assert rig.sessions_in_logs(ref)[-1] == session
    last = rig.server.script_requests[-1]
    # The same Pi session, resumed: the killed turn's tool call and its result are in it, and the
    # feedback is delivered again.
    [tool_use] = last.blocks("tool_use", role="assistant")
    assert tool_use["input"] == {"command": "echo crash-safe > notes.txt"}
    assert [r["tool_use_id"] for r in last.tool_results()] == [tool_use["id"]]
    assert any(feedback in text for text in last.texts(role="user"))
    assert rig.server.remaining == []


def test_a_usage_limit_with_a_stated_reset_waits_for_it_and_resumes_the_same_session(make_rig: Any) -> None:
    # At Pi's defaults its SDK retries a 429 twice without a word, then Pi announces its own retry
    # with the provider's words: auto_retry_start's errorMessage is `429 {"type":"error","error":
    # {"type":"rate_limit_error","message":"You've hit your usage limit. Try again in 8 seconds."}}`.
    # The supervisor ends Pi there; the account waits for the reset those words state.
    words = "You've hit your usage limit. Try again in 8 seconds."
    rig = make_rig([Error(429, words)] * 3 + [Text("done after the reset")])
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.server.wait_for_requests(3, timeout=30)

    paused = until_substate(lambda: rig.show(ref), "waiting: usage limit (resets ", timeout=20)
    assert paused["task"]["status"] == "working"
    assert "working(waiting: usage limit (resets " in rig.run("list").stdout
    pauses = json.loads((Path(os.environ["CORRAL_HOME"]) / "usage-limits.json").read_text())
    [record] = pauses["accounts"].values()
    assert record["harness"] == "pi" and words in record["reason"]
    reset = datetime.fromisoformat(record["resets_at"].replace("Z", "+00:00")).timestamp()
    assert 0 < reset - rig.server.script_requests[2].at <= 10
    assert len(rig.server.script_requests) == 3  # Pi's own 2-4-8 s retries never ran

    waited = rig.run("wait", ref, "--timeout", "45")
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout)
    requests = rig.server.script_requests
    assert len(requests) == 4 and requests[3].at >= reset, "no model request before the reset"
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked"
    assert [c["to"] for c in shown["status_changes"]][-2:] == ["working", "blocked"]  # never interrupted
    assert "interrupted" not in [c["to"] for c in shown["status_changes"]]
    turn = shown["turns"][-1]
    assert turn["content"] == "done after the reset"
    assert [(a["outcome"], a["failure_class"]) for a in turn["attempts"]] == [
        ("failed", "transient_overload"),
        ("succeeded", None),
    ]
    assert words in turn["attempts"][0]["failure"]["details"]["reason"]
    session = shown["session"]["harness_session_id"]
    assert rig.sessions_in_logs(ref) == [session, session]  # the relaunch resumed the same session
    assert rig.server.remaining == []
    pauses = json.loads((Path(os.environ["CORRAL_HOME"]) / "usage-limits.json").read_text())
    assert pauses["accounts"] == {}  # the relaunch got through: the pause is over
