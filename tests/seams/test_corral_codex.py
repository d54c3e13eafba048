"""Test seam 2 through corral's CLI: the real Codex binary, run by corral's own supervisor.

Codex is configured the way its users configure it: a custom model provider in
``$CODEX_HOME/config.toml`` pointing at a loopback :class:`ResponsesServer`, its API key in the
provider's ``env_key`` variable, no retry settings (Codex's defaults) — and ``CODEX_HOME``
outside the temporary directory, as a user's ``~/.codex`` is. The repository is outside it too,
so the only writable parts of its ``.git`` are the ones corral gives a Codex turn. Every step is
the real ``corral`` command as a process (``tests.conftest.CLI``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.codex import LOGIN_HINT, WAITING_FOR_NETWORK
from tests.conftest import CLI, git
from tests.support.auto_resume import spawn_daemon, until_auto_resumed, until_substate
from tests.support.codex import (
    KEY_VARIABLE,
    TEST_API_KEY,
    closed_port_url,
    codex_bin_or_skip,
    codex_home_outside_tmp,
    write_provider_config,
)
from tests.support.responses_server import Error, ExecCommand, Hang, Message, ResponsesServer, Step

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@dataclass
class Rig:
    """A repository whose tasks run the real Codex against a scripted server."""

    repo: Path
    corral: CLI
    server: ResponsesServer
    env: dict[str, str]

    def run(self, *args: str, **kw: Any) -> Any:
        return self.corral(*args, env=self.env, **kw)

    def create(self, goal: str, *args: str) -> str:
        created = self.corral.json("create", goal, "--harness", "codex", *args, env=self.env)
        return str(created["task"]["ref"]) if "task" in created else str(created["ref"])

    def show(self, ref: str) -> Any:
        return self.corral.json("show", ref, env=self.env)


@pytest.fixture
def make_rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    codex = codex_bin_or_skip()
    with (
        codex_home_outside_tmp() as codex_home,
        codex_home_outside_tmp("corral-test-codex-repo-") as place,
    ):
        servers: list[ResponsesServer] = []
        rigs: list[Rig] = []

        def make(steps: list[Step], *, base_url: str | None = None, **settings: str) -> Rig:
            server = ResponsesServer(steps)
            servers.append(server)
            write_provider_config(codex_home, base_url or server)
            repo = place / "repo"
            repo.mkdir()
            git(repo, "init", "-q", "-b", "main")
            (repo / "README.md").write_text("# demo\n")
            git(repo, "add", "README.md")
            git(repo, "commit", "-q", "-m", "initial")
            for key in [k for k in os.environ if k.startswith(("OPENAI_", "CODEX_"))]:
                monkeypatch.delenv(key)
            env = {
                "CODEX_HOME": str(codex_home),
                KEY_VARIABLE: TEST_API_KEY,
                "CORRAL_CODEX_BIN": str(codex),
                "CORRAL_AUTO_RESUME": "0",
                **{f"CORRAL_{name.upper()}": value for name, value in settings.items()},
            }
            rig = Rig(repo, CLI(repo), server, env)
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


def test_start_edits_and_commits_in_the_worktree_and_blocks_with_the_answer(make_rig: Any) -> None:
    commit = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt'"
    rig = make_rig([ExecCommand(commit), Message("Done: hello.txt is committed.")])
    ref = rig.create("Add a greeting", "-m", "Write hello.txt and commit it.")
    rig.corral.ok("start", ref, env=rig.env)
    waited = rig.run("wait", ref, "--timeout", "45")
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout, rig.run("logs", ref).stdout)

    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    branch = f"corral/{ref}"
    assert git(rig.repo, "log", "-1", "--format=%s", branch) == "Add hello.txt"
    assert git(rig.repo, "show", f"{branch}:hello.txt") == "hello"
    assert git(rig.repo, "rev-parse", f"{branch}~1") == git(rig.repo, "rev-parse", "main")
    worktree = Path(git(rig.repo, "worktree", "list", "--porcelain").split("worktree ")[2].splitlines()[0])
    assert git(worktree, "status", "--porcelain") == ""
    assert "Done: hello.txt is committed." in rig.run("show", ref).stdout
    # The tool call the model made ran, and succeeded, in the task's worktree.
    [output] = rig.server.script_requests[1].function_call_outputs()
    assert "Process exited with code 0" in output["output"], output


def test_a_401_at_codex_defaults_parks_the_task_blocked_with_the_login_hint(make_rig: Any) -> None:
    rig = make_rig([Error(401)] * 10)
    ref = rig.create("Add a greeting")
    rig.corral.ok("start", ref, env=rig.env)
    # Codex at its defaults would retry a 401 five times; corral turned that off, so the
    # first refusal is the verdict.
    waited = rig.run("wait", ref, "--timeout", "10")
    assert waited.returncode == 1, (waited.returncode, waited.stderr)
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    assert len(rig.server.script_requests) == 1
    error_turn = shown["turns"][-1]
    assert error_turn["kind"] == "error"
    assert "401 Unauthorized" in error_turn["content"] and error_turn["content"].endswith(LOGIN_HINT)
    assert "Codex is not authenticated" in rig.run("show", ref).stdout


def test_an_unreachable_provider_stops_after_corrals_attempt_cap(make_rig: Any) -> None:
    # Codex alone would print "Reconnecting... waiting for network" for ever.
    rig = make_rig([], base_url=closed_port_url(), budget_unreachable="2")
    ref = rig.create("Add a greeting")
    rig.corral.ok("start", ref, env=rig.env)
    waited = rig.run("wait", ref, "--timeout", "50")
    assert waited.returncode == 1, (waited.returncode, waited.stderr)
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    turn = shown["turns"][-1]
    assert turn["failure"]["code"] == "retry-budget-exhausted"
    assert turn["failure"]["details"]["stop"] == "budget-exhausted"
    assert [(a["number"], a["failure_class"]) for a in turn["attempts"]] == [
        (1, "transient_unreachable"),
        (2, "transient_unreachable"),
    ]
    assert all(a["failure"]["details"]["reason"].startswith(WAITING_FOR_NETWORK) for a in turn["attempts"])
    # corral ended each attempt (Codex never ends by itself) and the second resumed the first's thread.
    assert all(a["failure"]["native"]["signal"] == 15 for a in turn["attempts"])
    sessions = [line.split()[-1] for line in rig.run("logs", ref).stdout.splitlines() if line.startswith("· session")]
    assert len(sessions) == 2 and sessions[0] == sessions[1] == shown["session"]["harness_session_id"]


def _thread(request: Any) -> str:
    return str(json.loads(request.headers["x-codex-turn-metadata"])["thread_id"])


def test_unblock_resumes_the_same_thread_and_ask_is_read_only(make_rig: Any) -> None:
    rig = make_rig([Message("first answer")])
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    thread = rig.show(ref)["session"]["harness_session_id"]
    assert thread and _thread(rig.server.script_requests[0]) == thread

    feedback = "Now say goodbye — in French: « au revoir »."
    rig.server.steps.append(Message("au revoir"))
    rig.corral.ok("unblock", ref, "-m", feedback, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    resumed = rig.server.script_requests[1]
    assert _thread(resumed) == thread  # the same Codex thread, resumed
    assert json.loads(resumed.headers["x-codex-turn-metadata"])["sandbox_mode"] == "workspace-write"
    assert "first answer" in resumed.texts(role="assistant")  # the earlier items sent again
    assert any(feedback in text for text in resumed.texts(role="user"))
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked"
    assert [t["feedback_delivery"] for t in shown["turns"] if t["role"] == "human"][-1] == "consumed"

    rig.server.steps.append(Message("It says au revoir."))
    asked = rig.run("ask", ref, "-m", "What did you say last?", "--timeout", "45")
    assert asked.returncode == 0, asked.stderr
    assert "It says au revoir." in asked.stdout
    question = rig.server.script_requests[2]
    assert json.loads(question.headers["x-codex-turn-metadata"])["sandbox_mode"] == "read-only"
    assert rig.show(ref)["task"]["status"] == "blocked"  # left as it was


def test_an_overload_is_retried_on_corrals_ladder_resuming_the_same_thread(make_rig: Any) -> None:
    rig = make_rig([Error(503), Message("done after the overload")])
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    # corral's ladder waits 5 s before the relaunch: the live retry state shows it meanwhile, from the moment
    # Codex has exited on the 503 (which, on a loaded machine, can be a while after the server answered it).
    assert rig.server.wait_for_requests(1, timeout=30)
    retrying = until_substate(lambda: rig.show(ref), "retrying: attempt 1 (transient_overload)")
    assert "503 Service Unavailable" in str(retrying["task"]["substate"]), retrying["task"]
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
    # Two model calls in all: Codex made no retry of its own, corral's relaunch resumed its thread.
    first, second = rig.server.script_requests
    assert _thread(first) == _thread(second) == shown["session"]["harness_session_id"]
    assert json.loads(second.headers["x-codex-turn-metadata"])["history_initialization"] == "cold_resume"


def test_a_sigkilled_codex_is_auto_resumed_by_the_daemon_in_the_same_thread(make_rig: Any) -> None:
    # Also the daemon's store left its locks to a health check, so CLIs deleted its -wal under it
    # and never saw what it wrote (tests/store/test_sqlite_faults.py has the store's own test).
    rig = make_rig([Message("first turn done")], watchdog_timeout="60")
    ref = rig.create("Write notes")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "45").returncode == 0
    shown = rig.show(ref)
    thread, task_id = shown["session"]["harness_session_id"], shown["task"]["id"]

    daemon_env = {**os.environ, **rig.env, "CORRAL_AUTO_RESUME": "1"}
    daemon = spawn_daemon(rig.repo, daemon_env)
    try:
        feedback = "Add notes.txt with one line — «crash-safe» — then stop."
        rig.server.steps.extend([ExecCommand("echo crash-safe > notes.txt"), Hang(), Message("resumed and finished")])
        rig.corral.ok("unblock", ref, "-m", feedback, env=rig.env)
        # Real work happened (the file is written), then the model stream stalls: kill Codex there.
        assert rig.server.wait_for_requests(3, timeout=30), "Codex never reached the stalled request"
        paths = rig.corral.json("paths", env=rig.env)["paths"]
        status = json.loads((Path(paths["tasks"]) / task_id / "protocol" / "status.json").read_text())
        worktree = Path(paths["worktrees"]) / ref
        assert (worktree / "notes.txt").read_text() == "crash-safe\n"
        agent_pid = status.get("agent_pid")
        assert isinstance(agent_pid, int) and agent_pid > 1
        # The launched `codex` is npm's node wrapper; the agent itself is its native child.
        [native] = [pid for pid in _children(agent_pid) if "codex" in Path(f"/proc/{pid}/cmdline").read_text()]
        os.kill(native, signal.SIGKILL)

        shown = until_auto_resumed(lambda: rig.show(ref))
        assert daemon.poll() is None, "the daemon died"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)

    kinds = [(t["role"], t["kind"]) for t in shown["turns"]]
    assert kinds[-3:] == [("agent", "error"), ("human", "auto-resume"), ("agent", "auto-resume")], kinds
    assert shown["turns"][-1]["content"] == "resumed and finished"
    assert shown["session"]["harness_session_id"] == thread and shown["session"]["auto_resumed"] is True
    last = rig.server.script_requests[-1]
    assert _thread(last) == thread  # the same Codex thread, resumed
    assert any(feedback in text for text in last.texts(role="user"))  # the feedback, delivered again
    assert rig.server.remaining == []


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.timeout(180)
def test_a_usage_limit_with_a_stated_reset_waits_for_it_and_resumes_the_same_thread(make_rig: Any) -> None:
    # ChatGPT's 429 for an account's usage limit. Codex 0.171 does not retry it and prints the
    # reset as a clock time to the minute: "You’ve hit your usage limit. Try again at 2:09 PM."
    # (local time, the zone corral reads a clock time in). So the reset is on a minute boundary of
    # the local zone, 12 s ahead: TZ pins a zone whose offset from UTC, in seconds, puts one there
    # (a POSIX zone may be any whole number of seconds off), rather than waiting up to a minute
    # for UTC's next.
    reset = int(time.time()) + 12
    offset = -reset % 60  # the local time at the reset is a whole minute
    limit = {
        "error": {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": None,
            "resets_at": reset,
            "resets_in_seconds": reset - int(time.time()),
        }
    }
    rig = make_rig([Error(429, body=limit), Message("done after the reset")])
    rig.env["TZ"] = f"<+0000>-00:00:{offset:02d}"  # POSIX: the local time is UTC plus the offset
    ref = rig.create("Say hello")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.server.wait_for_requests(1, timeout=30)

    paused = until_substate(lambda: rig.show(ref), "waiting: usage limit", timeout=30)
    assert paused["task"]["status"] == "working"
    local = time.strftime("%H:%M", time.gmtime(reset + offset))
    assert paused["task"]["substate"] == f"waiting: usage limit (resets {local})"
    assert "working(waiting: usage limit (resets " in rig.run("list").stdout
    pauses = json.loads((Path(os.environ["CORRAL_HOME"]) / "usage-limits.json").read_text())
    [record] = pauses["accounts"].values()
    assert record["harness"] == "codex" and "hit your usage limit" in record["reason"]

    waited = rig.run("wait", ref, "--timeout", "90", timeout=120)
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout)
    first, second = rig.server.script_requests
    assert second.at >= reset, "no model request before the reset"
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
    assert "hit your usage limit" in turn["attempts"][0]["failure"]["details"]["reason"]
    assert _thread(first) == _thread(second) == shown["session"]["harness_session_id"]
    assert json.loads(second.headers["x-codex-turn-metadata"])["history_initialization"] == "cold_resume"
    pauses = json.loads((Path(os.environ["CORRAL_HOME"]) / "usage-limits.json").read_text())
    assert pauses["accounts"] == {}  # the relaunch got through: the pause is over
