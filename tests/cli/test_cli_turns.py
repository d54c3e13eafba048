"""Turn commands through the real entry point: start/unblock/wait/ask/logs/demo, --json and exit codes."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from corral.domain.sanitize import sanitize_prose
from corral.testing.fake_agent import wrapper_script


def fake_env(tmp_path, *invocations):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [list(i) for i in invocations]}))
    return {
        "CORRAL_CLAUDE_BIN": str(wrapper_script(tmp_path / "bin")),
        "CORRAL_FAKE_SCENARIO": str(scenario),
        "CORRAL_FAKE_RECORD": str(tmp_path / "record"),
    }


def calls(tmp_path):
    path = tmp_path / "record" / "invocations.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


OK = [
    {"init": True},
    {"text": "hi"},
    {"tool": "Bash", "input": {"command": "ls"}, "output": "README.md"},
    {"result": "All done."},
]


def test_start_returns_once_the_supervisor_runs_then_wait_reports(corral, tmp_path):
    env = fake_env(tmp_path, [{"init": True}, {"text": "waiting"}, {"sleep": 60}, {"result": "never"}])
    corral.ok("create", "Slow task", "--ref", "slow", env=env)
    started = corral.process.json("start", "slow", env=env)  # a process of its own, which has exited
    assert started["task"]["status"] == "working" and started["supervisor_pid"] > 0
    os.kill(started["supervisor_pid"], 0)  # the supervisor runs on after the CLI returned
    deadline = time.monotonic() + 10
    while not calls(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(calls(tmp_path)[0]["pid"], 0)  # and so does its agent
    listed = corral.json("list", "--active", env=env)["tasks"]
    assert [(r["ref"], r["status"]) for r in listed] == [("slow", "working")]
    assert listed[0]["substate"] in ("agent", "harness:work")
    corral.ok("stop", "slow", env=env)
    waited = corral("wait", "slow", "--json", env=env)
    assert waited.returncode == 1  # it rests, with a cause: stopped
    doc = waited.json()
    assert doc["task"]["status"] == "blocked" and doc["resting_cause"]["code"] == "stopped"


def test_a_turn_runs_to_the_end_and_wait_exits_0(corral, tmp_path):
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Quick task", "--ref", "quick", env=env)
    corral.ok("start", "quick", env=env)
    waited = corral("wait", "quick", "--json", env=env)
    assert waited.returncode == 0, waited.stderr
    doc = waited.json()
    assert doc["task"]["status"] == "blocked" and doc["exit_code"] == 0 and doc["resting_cause"] is None


def test_unblock_from_stdin_with_nul_is_escaped_and_delivered(corral, tmp_path):
    env = fake_env(tmp_path, OK, OK)
    corral.ok("create", "Task", "--ref", "t", env=env)
    corral.ok("start", "t", "--wait", env=env)
    feedback = "line one\x00 and \x07 bell\nline two"
    result = corral("unblock", "t", "--wait", input=feedback, env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    second = calls(tmp_path)[1]
    assert sanitize_prose(feedback) in second["prompt"]
    assert "\x00" not in second["prompt"]
    shown = corral.json("show", "t", env=env)
    human = next(t for t in shown["turns"] if t["kind"] == "unblock" and t["role"] == "human")
    assert human["content"] == sanitize_prose(feedback)
    assert human["actor"] == "human" and human["feedback_delivery"] == "consumed"


@pytest.mark.slow
def test_wait_exit_codes_and_timeout(corral, tmp_path):
    env = fake_env(
        tmp_path,
        [{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}],
        [{"init": True}, {"sleep": 20}],
    )
    corral.ok("create", "Will fail", "--ref", "bad", env=env)
    assert corral("start", "bad", "--wait", env=env).returncode == 1  # rests with a cause
    shown = corral("show", "bad", env=env)
    assert "Stopped because:" in shown.stdout and "Next:" in shown.stdout
    corral.ok("create", "Will hang", "--ref", "hang", env=env)
    corral.ok("start", "hang", env=env)
    timed = corral("wait", "hang", "--timeout", "0.5", "--json", env=env)
    assert timed.returncode == 124 and timed.json()["timed_out"] is True
    corral.ok("stop", "hang", env=env)


def test_ask_prints_the_answer_and_leaves_the_status(corral, tmp_path):
    env = fake_env(tmp_path, OK, [{"init": True}, {"result": "Forty-two."}])
    corral.ok("create", "Question time", "--ref", "q", env=env)
    corral.ok("start", "q", "--wait", env=env)
    answered = corral("ask", "q", "-m", "What is the answer?", env=env)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "Forty-two."
    assert corral.json("show", "q", env=env)["task"]["status"] == "blocked"


def test_illegal_turn_commands_exit_3_and_unknown_tasks_exit_4(corral, tmp_path):
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Never started", "--ref", "idle", env=env)
    refused = corral("unblock", "idle", "-m", "x", "--json", env=env)
    assert refused.returncode == 3
    error = refused.json()["error"]
    assert error["code"] == "illegal-transition" and "backlog" in error["message"]
    assert corral("resume", "idle", env=env).returncode == 3
    missing = corral("start", "nope", "--json", env=env)
    assert missing.returncode == 4 and missing.json()["error"]["code"] == "task-not-found"


def test_logs_render_and_raw(corral, tmp_path):
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Logged", "--ref", "lg", env=env)
    corral.ok("start", "lg", "--wait", env=env)
    rendered = corral.ok("logs", "lg", env=env).stdout
    assert "› hi" in rendered and "⚙ Bash" in rendered and "= All done." in rendered
    raw = corral.ok("logs", "lg", "--raw", env=env).stdout
    assert json.loads(raw.splitlines()[-1])["type"] == "result"
    assert corral("logs", "lg", "--turn", "9", env=env).returncode == 4


def test_demo_runs_the_lifecycle_and_cleans_up_when_asked(corral, monkeypatch):
    # As a new user runs it: corral's defaults, not the test isolation's (sandbox auto, agent tools on).
    monkeypatch.delenv("CORRAL_SANDBOX")
    monkeypatch.delenv("CORRAL_AGENT_TOOLS")
    result = corral("demo", "--json", "--clean", timeout=60)
    assert result.returncode == 0, result.stderr
    doc = result.json()
    assert doc["ok"] is True
    lines = [e["line"] for e in doc["events"]]
    assert any("working → blocked" in line for line in lines)
    assert any("2 commits beyond main" in line for line in lines)


# -- Ctrl-C in a real process ---------------------------------------------------------------------

SLOW = [{"init": True}, {"text": "waiting"}, {"sleep": 60}, {"result": "never"}]


def _spawn(corral, *args, env):
    return subprocess.Popen(
        [sys.executable, "-m", "corral", *args],
        cwd=corral.cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _first_line(proc, within=30.0):
    ready, _, _ = select.select([proc.stdout], [], [], within)
    assert ready, "no output"
    return proc.stdout.readline()


def _has_open(pid, name):
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}").endswith(name):
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_while_following_logs_is_the_interrupted_error(corral, tmp_path):
    env = fake_env(tmp_path, SLOW)
    corral.ok("create", "Slow task", "--ref", "slow", env=env)
    corral.ok("start", "slow", env=env)
    proc = _spawn(corral, "logs", "-f", "slow", "--json", env=env)
    try:
        first = json.loads(_first_line(proc))
        assert first["event"] == "turn" and first["turn"] == 1  # logs --json is JSON Lines of events
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    last = json.loads(rest.splitlines()[-1])
    assert set(last) == {"event", "error"} and last["error"]["code"] == "interrupted"
    corral.ok("stop", "slow", env=env)


@pytest.mark.slow
def test_ctrl_c_while_waiting_leaves_the_turn_running(corral, tmp_path):
    env = fake_env(tmp_path, SLOW)
    corral.ok("create", "Slow task", "--ref", "slow", env=env)
    corral.ok("start", "slow", env=env)
    proc = _spawn(corral, "wait", "slow", env=env)
    try:
        deadline = time.monotonic() + 30
        while not _has_open(proc.pid, "corral.db") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # well inside the wait loop, which polls until the turn ends
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert out == b""
    assert b"Stopped waiting; the turn goes on." in err and b"error:" not in err and b"Traceback" not in err
    assert corral.json("show", "slow", env=env)["task"]["status"] == "working"
    corral.ok("stop", "slow", env=env)
