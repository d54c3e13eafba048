"""Notices: corral wait prints each one on stderr once; the daemon logs them and runs the user's hook."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.engine.operations import notify
from corral.engine.project import Project
from corral.testing.fake_runner import FakeRunner
from tests.conftest import CLI, FakeAgent

pytestmark = pytest.mark.timeout(90)

FAILING = {"tool": "Bash", "input": {"command": "pytest -q"}, "is_error": True, "output": "FAILED test_y"}


def _thrice(agent: FakeAgent, corral: CLI, ref: str) -> None:
    agent.script([{"init": True}, FAILING, FAILING, FAILING, {"result": "Done, I think."}])
    corral.ok("create", f"Task {ref}", "--ref", ref)


def test_wait_prints_the_turns_notice_on_stderr_once_and_keeps_its_exit_code(agent: FakeAgent, corral: CLI) -> None:
    _thrice(agent, corral, "noisy")
    started = corral("start", "noisy", "--wait", "--timeout", "60")
    assert started.returncode == 0  # blocked with no resting cause: incidents never change the exit code
    lines = [line for line in started.stderr.splitlines() if "turn ended with" in line]
    assert lines == ["noisy: turn ended with: Action required: Bash failed: FAILED test_y"]
    again = corral("wait", "noisy", "--timeout", "10")
    assert again.returncode == 0 and "turn ended with" not in again.stderr  # told once
    as_json = corral("wait", "noisy", "--json")
    json.loads(as_json.stdout)  # stdout stays one document


def test_the_daemon_logs_each_notice_and_hands_it_to_the_users_hook_once(
    agent: FakeAgent, corral: CLI, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _thrice(agent, corral, "hooked")
    corral.ok("start", "hooked", "--wait", "--timeout", "60")
    monkeypatch.setenv("CORRAL_NOTIFY_COMMAND", "notify-me --urgent")
    hook = FakeRunner().on("notify-me")
    project = Project.open(repo, runner=hook)
    try:
        logged: list[dict[str, Any]] = []
        delivered = notify.from_daemon(project, logged.append)
        assert [task.ref for task, _ in delivered] == ["hooked"]
        (doc,) = logged
        assert doc["event"] == "notice" and doc["task"]["ref"] == "hooked"
        assert doc["notice"]["kind"] == "completion"
        assert doc["notice"]["incidents"][0]["label"] == "Action required"
        (call,) = hook.calls
        assert call.argv == ("notify-me", "--urgent") and call.timeout == notify.HOOK_TIMEOUT_SECONDS
        assert json.loads(call.input or "")["notice"]["key"] == doc["notice"]["key"]
        assert notify.from_daemon(project, logged.append) == [] and len(hook.calls) == 1  # once
    finally:
        project.close()


def test_a_repositorys_corral_toml_cannot_set_the_hook(agent: FakeAgent, corral: CLI, repo: Path) -> None:
    (repo / "corral.toml").write_text(f'notify_command = "{sys.executable} -c pass"\n')
    _thrice(agent, corral, "untrusted")
    corral.ok("start", "untrusted", "--wait", "--timeout", "60")
    hook = FakeRunner().on(sys.executable)
    project = Project.open(repo, runner=hook)
    try:
        logged: list[dict[str, Any]] = []
        notify.from_daemon(project, logged.append)
        assert [d["event"] for d in logged] == ["notice"]  # still logged
        assert hook.calls == []  # never run: a repository may only propose it
    finally:
        project.close()
