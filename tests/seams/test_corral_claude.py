"""Test seam 2 through corral: the real Claude Code CLI, run by corral's own supervisor.

Each test opens a :class:`~corral.engine.project.Project` whose ``claude_bin`` is the pinned
binary (behind a recording wrapper, below), with the CLI's environment (``claude_env``) set
before the project is opened, so the detached supervisor and the CLI it launches inherit it;
the model is a loopback :class:`ScriptedServer`. Turns are driven with the engine functions
(``tasks.create``, ``turns.start/unblock``, ``control.wait``) exactly as the CLI drives them,
and the test looks at what corral recorded (turns, attempts, sessions, resting causes), at
git, at the requests the server received, and at every argv the CLI was launched with.

The recording wrapper is a tiny Python script that appends its pid and argv to a JSON-lines
file and then ``execv``s the real binary: the process corral watches (its pid, its signals,
its exit status, its output) is the real CLI's, only the launch is noted on the way.

Seen with Claude Code 2.1.332 through corral (what the recorded requests show):

- corral's retry relaunch after a 529 (``--resume`` of the failed attempt's session) sends the
  turn's prompt again, so the model sees it twice in one user message (the failed attempt's copy
  is in the transcript);
- a relaunch after the watchdog killed a stalled stream replays the prompt, a synthetic assistant
  "No response requested." and the prompt again;
- after a SIGKILL right after a tool call, ``--resume`` replays the ``tool_use`` but its
  ``tool_result`` as "[Tool call interrupted: the session ended before this call's result was
  recorded, …]", then "No response requested.", then corral's crash-resume prompt — so the
  agent is told to verify, which is what ``prompts.resume_after_crash`` asks of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.records import FeedbackDelivery, Session, Task, Turn
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.read.projection import show
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from tests.conftest import git
from tests.support.claude import EXIT_ON_SIGTERM, claude_env, parse_stream
from tests.support.model_server import Error, Hang, ScriptedServer, Step, Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

WRAPPER = """#!{python}
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as fh:
    fh.write(json.dumps({{"pid": os.getpid(), "argv": sys.argv[1:]}}) + "\\n")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def write_wrapper(path: Path, real: Path, log: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(WRAPPER.format(python=sys.executable, log=str(log), real=str(real)))
    path.chmod(0o755)
    return path


@dataclass
class Rig:
    """A project whose harness is the real Claude Code, pointed at a scripted model server."""

    server: ScriptedServer
    proj: Project
    launch_log: Path
    env: dict[str, str]
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def script(self, *steps: Step) -> None:
        """Append to the server's script (steps are consumed one per model request)."""
        self.server.steps.extend(steps)

    def launches(self) -> list[dict[str, Any]]:
        """Every launch of the CLI, in order: ``{"pid", "argv"}``."""
        if not self.launch_log.exists():
            return []
        return [json.loads(line) for line in self.launch_log.read_text().splitlines() if line.strip()]

    def create(self, goal: str = "Add a greeting", **kw: Any) -> Task:
        return tasks.create(self.proj, goal, actor=Actor.HUMAN, **kw)

    def worktree(self, task: Task) -> Path:
        return self.proj.paths.worktree(task.ref)

    def wait(self, task: Task, timeout: float = 45) -> Task:
        result = control.wait(self.proj, task.ref, timeout=timeout)
        assert not result.timed_out, f"{task.ref} still {result.task.status.value} after {timeout} s"
        return result.task

    def task(self, task: Task) -> Task:
        with self.proj.store.read() as tx:
            current = tx.get_task(task.id)
        assert current is not None
        return current

    def session(self, task: Task) -> Session:
        with self.proj.store.read() as tx:
            current = tx.get_task(task.id)
            assert current is not None and current.session_id is not None
            session = tx.get_session(current.session_id)
        assert session is not None
        return session

    def turns(self, task: Task) -> list[Turn]:
        with self.proj.store.read() as tx:
            return list(tx.turns(task.id))

    def agent_turns(self, task: Task) -> list[Turn]:
        return [t for t in self.turns(task) if t.role is Role.AGENT]

    def output_events(self, task: Task, sequence: int) -> list[dict[str, Any]]:
        """The stream-json events of one turn's ``output.log`` (every attempt, appended)."""
        log = self.proj.paths.turn_dir(task.id, sequence) / "output.log"
        return parse_stream(log.read_text(encoding="utf-8", errors="replace"))

    def status_json(self, task: Task) -> dict[str, Any]:
        return proto.read_raw(self.proj.paths.protocol_dir(task.id) / proto.STATUS) or {}


@pytest.fixture
def make_rig(
    claude: Path, claude_home: Path, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Rig]]:
    """``make_rig(**CORRAL_settings)``: the server, the environment, the project.

    The CLI runs at its own retry settings, as a user has it (no ``CLAUDE_CODE_MAX_RETRIES``);
    ``max_retries=N`` sets that variable, for a test about how corral meets a changed setting.
    """
    rigs: list[Rig] = []

    def make(*, max_retries: int | None = None, **settings: str) -> Rig:
        server = ScriptedServer([])
        launch_log = tmp_path / "claude-launches.jsonl"
        wrapper = write_wrapper(tmp_path / "bin" / "claude", claude, launch_log)
        if max_retries is None:
            env = claude_env(server, claude_home, extra={"CLAUDE_CODE_MAX_RETRIES": None})
        else:
            env = claude_env(server, claude_home, max_retries=max_retries)
        env["CORRAL_CLAUDE_BIN"] = str(wrapper)
        env.setdefault("CORRAL_GRACE_PERIOD", "1")
        for name, value in settings.items():
            env[f"CORRAL_{name.upper()}"] = value
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        rig = Rig(server, Project.open(repo), launch_log, env)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        for cleanup in rig.cleanups:
            cleanup()
        # Whatever a failed test left running (a supervisor, a hung CLI) is stopped by its recorded pid.
        with rig.proj.store.read() as tx:
            ids = [t.id for t in tx.tasks()]
        for task_id in ids:
            reap_turn(rig.proj, task_id)
        rig.proj.close()
        rig.server.close()


def start(rig: Rig, task: Task, **kw: Any) -> Task:
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN, **kw)
    return rig.wait(task)


def init_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "system" and e.get("subtype") == "init"]


def resume_id(argv: list[str]) -> str | None:
    return argv[argv.index("--resume") + 1] if "--resume" in argv else None


def prompt_of(argv: list[str]) -> str:
    assert argv[0] == "-p"
    return argv[1]


# -- 1. a work turn that writes and commits ---------------------------------------------------


def test_work_turn_writes_commits_and_blocks_with_the_final_text(make_rig, repo):
    rig = make_rig(auto_resume="0")
    task = rig.create(prompt="Write hello.txt and commit it.")
    wt = rig.worktree(task)
    final = "Done: hello.txt is written and committed."
    rig.script(
        ToolUse("Write", {"file_path": str(wt / "hello.txt"), "content": "hello, world\n"}),
        ToolUse("Bash", {"command": "git add hello.txt && git commit -q -m 'Add hello.txt'", "description": "commit"}),
        Text(final),
    )
    done = start(rig, task)

    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert rig.server.remaining == []
    branch = f"corral/{task.ref}"
    tip = git(repo, "rev-parse", branch)
    assert git(repo, "log", "-1", "--format=%s", branch) == "Add hello.txt"
    assert git(repo, "show", f"{branch}:hello.txt") == "hello, world"
    assert git(repo, "rev-parse", f"{branch}~1") == git(repo, "rev-parse", "main")
    assert git(wt, "status", "--porcelain") == ""

    (agent_turn,) = rig.agent_turns(task)
    assert agent_turn.kind == "start"
    assert agent_turn.content == final
    assert agent_turn.details["commits"] == [tip]
    assert [a.outcome.value for a in agent_turn.attempts] == ["succeeded"]

    # The session id corral keeps for resuming is the one the CLI announced in its init event.
    (init,) = init_events(rig.output_events(task, 1))
    session = rig.session(task)
    assert session.harness_session_id == init["session_id"]
    assert all(r.headers["x-claude-code-session-id"] == init["session_id"] for r in rig.server.script_requests)
    assert session.git_start_sha == tip

    # What reached the model: corral's first-turn prompt, and the real tool round trips.
    (launch,) = rig.launches()
    expected_prompt = prompts.first_turn(task.goal, task.prompt)
    assert prompt_of(launch["argv"]) == expected_prompt
    assert resume_id(launch["argv"]) is None
    first, _second, third = rig.server.script_requests
    assert first.texts(role="user")[-1] == expected_prompt
    system = first.body["system"]
    system_texts = [system] if isinstance(system, str) else [b.get("text", "") for b in system]
    assert any(prompts.system_text(str(wt), branch) in text for text in system_texts)
    results = third.tool_results()
    assert [bool(r.get("is_error")) for r in results] == [False, False]


# -- 2. a second turn resumes the same harness session ----------------------------------------


def test_unblock_resumes_the_harness_session_and_delivers_feedback_verbatim(make_rig):
    rig = make_rig(auto_resume="0")
    task = rig.create(prompt="Say hello.")
    rig.script(Text("first answer"))
    first_done = start(rig, task)
    assert first_done.status is Status.BLOCKED
    sid = rig.session(task).harness_session_id
    assert sid

    feedback = "Now say goodbye — in French, please: « au revoir ». Keep `hello` as it is.\nThanks!"
    rig.script(Text("au revoir"))
    turns.unblock(rig.proj, task.ref, actor=Actor.HUMAN, message=feedback)
    done = rig.wait(task)

    assert done.status is Status.BLOCKED and done.resting_cause is None
    first_launch, second_launch = rig.launches()
    assert resume_id(first_launch["argv"]) is None
    assert resume_id(second_launch["argv"]) == sid
    # Nothing new upstream: the prompt is the feedback alone, exactly as the prompt module builds it.
    assert prompt_of(second_launch["argv"]) == prompts.feedback_block([feedback]) == feedback

    first_request, resumed = rig.server.script_requests
    assert resumed.headers["x-claude-code-session-id"] == sid
    first_prompt = prompts.first_turn(task.goal, task.prompt)
    assert first_prompt in resumed.texts(role="user")
    assert "first answer" in resumed.texts(role="assistant")
    assert resumed.texts(role="user")[-1] == feedback
    assert [m["role"] for m in resumed.messages if m["role"] != "system"] == ["user", "assistant", "user"]
    # The earlier request is replayed as it was sent.
    assert first_request.texts(role="user")[-1] == first_prompt

    assert rig.session(task).harness_session_id == sid
    unblock_turn = next(t for t in rig.turns(task) if t.kind == "unblock" and t.role is Role.HUMAN)
    assert unblock_turn.content == feedback
    assert unblock_turn.feedback_delivery is FeedbackDelivery.CONSUMED
    assert rig.agent_turns(task)[-1].content == "au revoir"


def test_ask_runs_read_only_in_plan_mode_and_restores_the_status(make_rig):
    rig = make_rig(auto_resume="0")
    task = rig.create(prompt="Say hello.")
    rig.script(Text("first answer"))
    assert start(rig, task).status is Status.BLOCKED
    sid = rig.session(task).harness_session_id
    before = git(rig.worktree(task), "rev-parse", "HEAD")

    rig.script(Text("Because the API said so."))
    started = turns.ask(rig.proj, task.ref, actor=Actor.HUMAN, question="Why 30 s?")
    answer = control.wait_answer(rig.proj, started, timeout=45)
    assert answer is not None and answer.content == "Because the API said so."

    asked = rig.launches()[-1]["argv"]
    assert asked[asked.index("--permission-mode") + 1] == "plan"
    assert resume_id(asked) == sid  # the question is asked in the task's own session
    request = rig.server.script_requests[-1]
    assert request.texts(role="user")[-1] == prompts.ask("Why 30 s?")
    tools = {t.get("name") for t in request.body.get("tools", [])}
    worked = {t.get("name") for t in rig.server.script_requests[0].body.get("tools", [])}
    assert {"Write", "Edit", "Bash"} <= worked  # the work turn had them
    assert not tools & {"Write", "Edit", "Bash", "NotebookEdit"}  # the ask has the harness's read-only set
    assert rig.task(task).status is Status.BLOCKED
    assert git(rig.worktree(task), "rev-parse", "HEAD") == before
    assert not [t for t in rig.turns(task) if t.kind == "ask" and t.feedback_delivery is FeedbackDelivery.PENDING]


# -- 3. 401: not authenticated, parked at once ------------------------------------------------


def test_401_parks_blocked_not_authenticated_without_a_relaunch(make_rig):
    rig = make_rig(auto_resume="0")
    # At its defaults the CLI would retry a 401 ten times; corral ends it at its first retry line,
    # so only the first request is made, and a relaunch by corral would show up as a second one.
    rig.script(*[Error(401)] * 4)
    task = rig.create()
    done = start(rig, task)

    assert done.status is Status.BLOCKED
    assert done.resting_cause is not None and done.resting_cause.code == "harness-not-authenticated"
    assert len(rig.launches()) == 1
    assert rig.server.consumed == 1
    parked = rig.task(task)
    with rig.proj.store.read() as tx:
        doc = show(tx, parked)
    assert "not authenticated — log in through the harness" in doc["stopped_because"]
    assert doc["resting_cause"]["code"] == "harness-not-authenticated"
    assert doc["task"]["status"] == "blocked"
    (agent_turn,) = rig.agent_turns(task)
    (attempt,) = agent_turn.attempts
    assert attempt.outcome.value == "failed"
    assert attempt.failure_class == "fatal_auth"
    assert attempt.failure is not None and attempt.failure.code == "harness-not-authenticated"
    assert attempt.failure.exit_code == EXIT_ON_SIGTERM  # corral ended it; it handles SIGTERM and exits
    assert "refused Claude Code's credentials (HTTP 401 authentication_failed)" in agent_turn.content
    assert "/login" in agent_turn.content  # the harness's login hint


# -- 4. 529: corral's overload ladder relaunches it, not the CLI's own retries ----------------


def test_529_is_retried_on_the_overload_ladder_then_completes(make_rig):
    rig = make_rig(auto_resume="0")
    rig.script(Error(529), Text("recovered after the overload"))
    task = rig.create()
    began = time.monotonic()
    done = start(rig, task)
    elapsed = time.monotonic() - began

    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert rig.server.remaining == []
    assert elapsed >= 5.0  # the first rung of the transient ladder is a real 5 s wait
    (agent_turn,) = rig.agent_turns(task)
    assert agent_turn.content == "recovered after the overload"
    first, last = agent_turn.attempts
    assert first.outcome.value == "failed"
    assert first.failure_class == "transient_overload"
    assert first.failure is not None and first.failure.code == "harness-overloaded"
    assert first.failure.exit_code == EXIT_ON_SIGTERM  # ended at its first retry line, not after its own retries
    assert last.outcome.value == "succeeded"

    launches = rig.launches()
    assert len(launches) == 2
    # The relaunch continues the CLI session the failed attempt opened.
    (init, *_rest) = init_events(rig.output_events(task, 1))
    assert resume_id(launches[0]["argv"]) is None
    assert resume_id(launches[1]["argv"]) == init["session_id"] == rig.session(task).harness_session_id
    assert prompt_of(launches[1]["argv"]) == prompt_of(launches[0]["argv"])


# -- 5. the watchdog on a stalled stream ------------------------------------------------------


def test_watchdog_kills_a_stalled_stream_and_a_zero_work_relaunch_completes(make_rig):
    rig = make_rig(auto_resume="0", watchdog_timeout="2")
    hang = Hang()
    rig.script(hang, Text("finished on the relaunch"))
    task = rig.create()
    done = start(rig, task)

    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert rig.server.remaining == []
    first_launch, second_launch = rig.launches()
    # The stalled CLI was killed by the watchdog (it is gone), and relaunched in the same turn.
    with pytest.raises(ProcessLookupError):
        os.kill(first_launch["pid"], 0)
    (agent_turn,) = rig.agent_turns(task)
    assert agent_turn.content == "finished on the relaunch"
    assert [a.outcome.value for a in agent_turn.attempts] == ["failed", "succeeded"]
    killed = agent_turn.attempts[0]
    assert killed.failure is not None and killed.failure.code == "watchdog-no-progress"
    assert killed.failure.exit_code == EXIT_ON_SIGTERM  # the CLI handles the watchdog's SIGTERM and exits
    assert killed.started_at is not None and killed.ended_at is not None
    assert (killed.ended_at - killed.started_at).total_seconds() >= 2.0
    sid = rig.session(task).harness_session_id
    assert resume_id(second_launch["argv"]) == sid
    assert prompt_of(second_launch["argv"]) == prompt_of(first_launch["argv"])


def test_watchdog_relaunches_a_zero_work_stall_once_then_interrupts(make_rig):
    rig = make_rig(auto_resume="0", watchdog_timeout="2")
    rig.script(*[Hang() for _ in range(4)])
    task = rig.create()
    done = start(rig, task)

    assert done.status is Status.INTERRUPTED
    assert done.resting_cause is not None and done.resting_cause.code == "watchdog-no-progress"
    launches = rig.launches()
    assert len(launches) == 2  # the first launch and one relaunch (issue 29: a second kill ends the turn)
    sid = rig.session(task).harness_session_id
    assert sid and [resume_id(launch["argv"]) for launch in launches] == [None, sid]
    assert rig.server.consumed == 2
    for launch in rig.launches():
        with pytest.raises(ProcessLookupError):
            os.kill(launch["pid"], 0)
    (agent_turn,) = rig.agent_turns(task)
    assert [a.failure.code for a in agent_turn.attempts if a.failure] == ["watchdog-no-progress"] * 2
    session = rig.session(task)
    assert session.interrupt_reason is not None and "relaunched it 1 time with no work" in session.interrupt_reason


# -- 6. crash recovery: SIGKILL mid-turn, the daemon auto-resumes -----------------------------


def start_daemon(rig: Rig, repo: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = open(rig.proj.paths.root / "test-daemon.out", "ab")  # noqa: SIM115 (closed in cleanup)
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "daemon", "run", "--tick", "0.5"],  # the home's daemon: it serves repo
        env=env,
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()

    rig.cleanups.append(stop)
    return proc


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_sigkilled_cli_is_auto_resumed_by_the_daemon_with_the_session_and_the_feedback(make_rig, repo):
    # In this process nothing may auto-resume (so the daemon is what does it); the daemon may.
    rig = make_rig(auto_resume="0", watchdog_timeout="60")
    daemon_env = {**os.environ, "CORRAL_AUTO_RESUME": "1"}
    task = rig.create(prompt="Write notes.")
    wt = rig.worktree(task)
    rig.script(Text("first turn done"))
    assert start(rig, task).status is Status.BLOCKED
    sid = rig.session(task).harness_session_id
    assert sid

    daemon = start_daemon(rig, repo, daemon_env)
    feedback = "Add notes.txt with one line — «crash-safe» — then stop.\nDo not touch README.md."
    hang = Hang()
    rig.script(
        ToolUse("Write", {"file_path": str(wt / "notes.txt"), "content": "crash-safe\n"}),
        hang,
        Text("resumed and finished"),
    )
    turns.unblock(rig.proj, task.ref, actor=Actor.HUMAN, message=feedback)
    # Real work happened (the file is written), then the model stream stalls.
    assert rig.server.wait_for_requests(3, timeout=30), "the CLI never reached the stalled request"
    assert (wt / "notes.txt").read_text() == "crash-safe\n"
    agent_pid = rig.status_json(task).get("agent_pid")
    assert isinstance(agent_pid, int) and agent_pid > 1
    launches = rig.launches()
    assert launches[-1]["pid"] == agent_pid  # the process corral watches is the real CLI
    os.kill(agent_pid, signal.SIGKILL)

    def rested() -> bool:
        current = rig.task(task)
        return current.status is Status.BLOCKED and len(rig.agent_turns(task)) == 3

    wait_for(rested, 45, "the daemon to auto-resume and the resumed turn to complete")
    assert daemon.poll() is None, "the daemon died"
    # The daemon saw the crashed turn's supervisor exit (pidfd) and reconciled it.
    assert "supervisor-exited" in (rig.proj.paths.root / "test-daemon.out").read_text()

    done = rig.task(task)
    assert done.resting_cause is None
    kinds = [(t.role, t.kind) for t in rig.turns(task)]
    assert kinds == [
        (Role.HUMAN, "start"),
        (Role.AGENT, "start"),
        (Role.HUMAN, "unblock"),
        (Role.AGENT, "error"),
        (Role.HUMAN, "auto-resume"),
        (Role.AGENT, "auto-resume"),
    ]
    crashed = rig.agent_turns(task)[1]
    assert crashed.failure is not None and crashed.failure.signal == signal.SIGKILL
    resumed_by = next(t for t in rig.turns(task) if t.kind == "auto-resume" and t.role is Role.HUMAN)
    assert resumed_by.actor is Actor.SYSTEM
    changes = [(c.to_status, c.actor) for c in _status_changes(rig, task)]
    assert (Status.INTERRUPTED, Actor.SYSTEM) in changes
    assert changes[-2:] == [(Status.WORKING, Actor.SYSTEM), (Status.BLOCKED, Actor.SYSTEM)]

    # The relaunch continues the same CLI session and redelivers the feedback verbatim.
    *_, relaunch = rig.launches()
    assert len(rig.launches()) == 3
    assert resume_id(relaunch["argv"]) == sid
    expected = prompts.resume_after_crash(True, [feedback])  # the written file leaves the worktree dirty
    assert feedback in expected
    assert prompt_of(relaunch["argv"]) == expected
    last = rig.server.script_requests[-1]
    assert last.headers["x-claude-code-session-id"] == sid
    assert last.texts(role="user")[-1] == expected
    assert feedback in last.texts(role="user")  # the original delivery, replayed from the transcript
    assert rig.server.remaining == []

    unblock_turn = next(t for t in rig.turns(task) if t.kind == "unblock")
    assert unblock_turn.feedback_delivery is FeedbackDelivery.CONSUMED
    assert rig.agent_turns(task)[-1].content == "resumed and finished"
    session = rig.session(task)
    assert session.harness_session_id == sid
    assert session.auto_resumed is True
    assert session.consecutive_interruptions == 0


def _status_changes(rig: Rig, task: Task) -> list[Any]:
    with rig.proj.store.read() as tx:
        return list(tx.status_changes(task.id))
