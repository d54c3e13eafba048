"""A task's own settings through the real CLI: recorded at launch, reused by an auto-resume, set by `edit --set`.

The environment applies only to the process that reads it, so a task started with
``CORRAL_WATCHDOG_TIMEOUT=10`` keeps that value on record and a later ``corral wait`` (run
without it) auto-resumes the task with 10 s, not the default 1800 s.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import state_paths, store_of
from tests.cli.test_cli_turns import OK, calls, fake_env

HANG = [{"init": True}, {"text": "working on it"}, {"sleep": 60}, {"result": "never"}]


def command_of(corral: Any, ref: str) -> dict[str, Any]:
    """The command.json of the task's latest turn, as its supervisor read it."""
    with store_of(corral) as store, store.read() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        task_id = task.id
    path = Path(state_paths(corral)["tasks"]) / task_id / "protocol" / "command.json"
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def own_settings(corral: Any, ref: str) -> dict[str, Any]:
    with store_of(corral) as store, store.read() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        return task.settings


def agent_started(tmp_path: Path, n: int) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while len(calls(tmp_path)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    found = calls(tmp_path)
    assert len(found) >= n, found
    return found[n - 1]


@pytest.mark.slow
def test_an_auto_resume_by_a_later_wait_keeps_the_watchdog_the_task_was_started_with(corral, tmp_path):
    env = fake_env(tmp_path, HANG, OK)
    corral.ok("create", "Slow task", "--ref", "slow", env=env)
    corral.ok("start", "slow", env={**env, "CORRAL_WATCHDOG_TIMEOUT": "10"})
    first = command_of(corral, "slow")
    assert first["kind"] == "start" and first["watchdog"]["timeout_seconds"] == 10.0
    recorded = own_settings(corral, "slow")["watchdog_timeout"]
    assert (recorded["value"], recorded["source"], recorded["origin"]) == (10.0, "env", "CORRAL_WATCHDOG_TIMEOUT")

    os.kill(agent_started(tmp_path, 1)["pid"], signal.SIGKILL)  # the agent dies: the turn is interrupted
    waited = corral("wait", "slow", "--json", "--timeout", "60", env=env)  # no CORRAL_WATCHDOG_TIMEOUT here
    assert waited.returncode == 0, (waited.stdout, waited.stderr)
    assert waited.json()["task"]["status"] == "blocked"

    assert len(calls(tmp_path)) == 2  # the crashed turn, then the auto-resume
    resumed = command_of(corral, "slow")
    assert resumed["kind"] == "auto-resume"
    assert resumed["watchdog"]["timeout_seconds"] == 10.0  # the task's, not this process's 1800
    with store_of(corral) as store, store.read() as tx:
        task = tx.task_by_ref("slow")
        assert task is not None
        launched = [t for t in tx.turns(task.id) if t.role.value == "human"]
    assert [(t.kind, t.actor.value if t.actor else None) for t in launched] == [
        ("start", "human"),
        ("auto-resume", "system"),
    ]
    # each turn's command stays on record beside its logs, with the settings it ran with
    turns_dir = Path(state_paths(corral)["tasks"]) / task.id / "turns"
    kept = [json.loads((turns_dir / str(t.sequence) / "command.json").read_text()) for t in launched]
    assert [(c["kind"], c["watchdog"]["timeout_seconds"]) for c in kept] == [("start", 10.0), ("auto-resume", 10.0)]


@pytest.mark.slow
def test_edit_set_is_applied_at_start_over_the_environment_and_unset_drops_it(corral, tmp_path):
    env = fake_env(tmp_path, OK, OK)
    corral.ok("create", "Task", "--ref", "t", env=env)
    edited = corral("edit", "t", "--set", "watchdog_timeout=42", "--set", "budget_unknown=2", env=env)
    assert edited.returncode == 0, edited.stderr
    assert {k: (v["value"], v["source"]) for k, v in own_settings(corral, "t").items()} == {
        "watchdog_timeout": (42.0, "task"),
        "budget_unknown": (2, "task"),
    }
    # the person's word for this task wins over the environment the turn is launched with
    corral.ok("start", "t", "--wait", env={**env, "CORRAL_WATCHDOG_TIMEOUT": "10", "CORRAL_BUDGET_NETWORK": "77"})
    command = command_of(corral, "t")
    assert command["watchdog"]["timeout_seconds"] == 42.0
    assert command["budgets"]["unknown_attempts"] == 2
    assert command["budgets"]["network_seconds"] == 77.0
    # the environment's value for a key the task did not set is kept on record too
    assert own_settings(corral, "t")["budget_network"]["source"] == "env"

    corral.ok("edit", "t", "--unset", "watchdog_timeout", env=env)
    assert "watchdog_timeout" not in own_settings(corral, "t")
    corral.ok("unblock", "t", "-m", "again", "--wait", env=env)
    assert command_of(corral, "t")["watchdog"]["timeout_seconds"] == 1800.0


def test_edit_set_checks_the_key_and_the_value(corral, tmp_path):
    corral.ok("create", "Task", "--ref", "t")
    typo = corral("edit", "t", "--set", "watchdog_timout=5", "--json")
    assert typo.returncode == 2
    error = typo.json()["error"]
    assert error["code"] == "unknown-setting" and "watchdog_timeout" in error["hint"]

    wrong = corral("edit", "t", "--set", "watchdog_timeout=soon", "--json")
    assert wrong.returncode == 2 and wrong.json()["error"]["code"] == "config-invalid"
    assert "watchdog_timeout" in wrong.json()["error"]["message"]

    repository_wide = corral("edit", "t", "--set", "remote=upstream", "--json")
    assert repository_wide.returncode == 2 and repository_wide.json()["error"]["code"] == "not-a-task-setting"
    field = corral("edit", "t", "--set", "model=opus", "--json")
    assert field.returncode == 2 and "--model" in field.json()["error"]["hint"]
    no_value = corral("edit", "t", "--set", "watchdog_timeout", "--json")
    assert no_value.returncode == 2 and no_value.json()["error"]["code"] == "bad-setting"
    unknown_unset = corral("edit", "t", "--unset", "watchdog", "--json")
    assert unknown_unset.returncode == 2 and unknown_unset.json()["error"]["code"] == "unknown-setting"
    assert own_settings(corral, "t") == {}  # nothing refused was kept

    # a setting that makes corral execute something is taken from a person only
    agent = corral("edit", "t", "--set", "claude_bin=/tmp/evil", "--json", env={"CORRAL_ACTOR": "agent"})
    assert agent.returncode == 3 and agent.json()["error"]["code"] == "setting-needs-person"
    assert own_settings(corral, "t") == {}


# -- the preflight at start: the harness the task's turns would run, refused before anything --------


def nothing_recorded(corral: Any, ref: str) -> None:
    """The task is as it was: backlog, no session, no turn, no worktree."""
    with store_of(corral) as store, store.read() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        assert task.status.value == "backlog" and task.session_id is None
        assert tx.turns(task.id) == [] and tx.sessions(task.id) == []
    assert not (Path(state_paths(corral)["worktrees"]) / ref).exists()


def test_start_refuses_a_harness_missing_from_path_at_once(corral, tmp_path):
    corral.ok("create", "Task", "--ref", "t")
    bare = {"PATH": "/usr/bin:/bin"}  # no claude here, and no claude_bin setting
    refused = corral("start", "t", "--json", env=bare)
    assert refused.returncode == 1, refused.stdout
    error = refused.json()["error"]
    assert error["code"] == "harness-missing" and "claude" in error["message"]
    assert "npm install" in error["hint"]
    nothing_recorded(corral, "t")


@pytest.mark.slow
def test_start_refuses_with_the_tasks_own_harness_setting_over_the_environment(corral, tmp_path):
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Task", "--ref", "t", env=env)
    corral.ok("edit", "t", "--set", f"claude_bin={tmp_path / 'no-such-claude'}", env=env)
    refused = corral("start", "t", "--json", env=env)  # the environment's CORRAL_CLAUDE_BIN would run
    assert refused.returncode == 1 and refused.json()["error"]["code"] == "harness-missing"
    nothing_recorded(corral, "t")
    corral.ok("edit", "t", "--unset", "claude_bin", env=env)
    corral.ok("start", "t", "--wait", env=env)  # back to the environment's: it runs


@pytest.mark.slow
def test_start_refuses_an_unreadable_harness_config_and_the_command_harness_without_a_command(corral, tmp_path):
    env = fake_env(tmp_path, OK)
    corral.ok("create", "Task", "--ref", "t", env=env)
    settings = Path(os.environ["HOME"]) / ".claude" / "settings.json"
    settings.mkdir(parents=True)  # a directory where the file belongs (root reads any file, mode or not)
    refused = corral("start", "t", "--json", env=env)
    assert refused.returncode == 1, refused.stdout
    error = refused.json()["error"]
    assert error["code"] == "harness-config-unreadable" and str(settings) in error["message"]
    nothing_recorded(corral, "t")
    settings.rmdir()

    unset = corral("create", "Commanded", "--ref", "c", "--harness", "command", "--json", env=env)
    assert unset.returncode == 1 and unset.json()["error"]["code"] == "harness-command-unset"
    corral.ok("create", "Commanded", "--ref", "c", "--harness", "command", env={**env, "CORRAL_COMMAND": "true"})
    emptied = corral("edit", "c", "--set", "command=", "--json", env=env)
    assert emptied.returncode == 1 and emptied.json()["error"]["code"] == "harness-command-unset"
    refused = corral("start", "c", "--json", env=env)  # the command came from the environment of create only
    assert refused.returncode == 1 and refused.json()["error"]["code"] == "harness-command-unset"
    nothing_recorded(corral, "c")


@pytest.mark.slow
def test_show_of_a_working_task_says_how_long_it_ran_its_last_line_and_its_own_settings(corral, tmp_path):
    env = fake_env(tmp_path, HANG, OK)
    corral.ok("create", "Slow task", "--ref", "watched", env=env)
    corral.ok("edit", "watched", "--set", "breaker_threshold=5", env=env)
    corral.ok("start", "watched", env={**env, "CORRAL_WATCHDOG_TIMEOUT": "30"})
    agent_started(tmp_path, 1)
    deadline = time.monotonic() + 20
    doc = corral.json("show", "watched", env=env)
    while not (doc["live"] or {}).get("last_line") and time.monotonic() < deadline:
        time.sleep(0.1)
        doc = corral.json("show", "watched", env=env)
    assert doc["task"]["status"] == "working"
    live = doc["live"]
    assert live["last_line"] == "› working on it" and live["elapsed_s"] >= 0  # as logs shows it
    settings = doc["task"]["settings"]
    assert settings["breaker_threshold"] == {"value": 5, "source": "task", "origin": "corral edit --set"}
    assert settings["watchdog_timeout"]["value"] == 30.0 and settings["watchdog_timeout"]["source"] == "env"
    text = corral.ok("show", "watched", "--details", env=env).stdout
    running = next(line for line in text.splitlines() if line.startswith("Running:"))
    assert "working on it" in running
    assert "breaker_threshold = 5  (from corral edit --set)" in text
    assert "watchdog_timeout = 30.0  (from CORRAL_WATCHDOG_TIMEOUT at a launch)" in text
    corral.ok("stop", "watched", env=env)
    assert corral.json("show", "watched", env=env)["live"] is None  # resting: nothing runs


def test_a_stored_task_setting_out_of_range_is_not_applied(tmp_path: Path) -> None:
    """A value kept before ranges were checked, or another host's row: the schema's range still holds."""
    from datetime import UTC, datetime

    from corral.domain.records import TASK_SETTINGS, Task
    from corral.domain.status import Status
    from corral.engine.config import load_config
    from corral.engine.resolve import task_config

    config = load_config(user_file=None, project_file=None, env={})
    when = datetime.now(UTC)
    task = Task(
        id="0123456789abcdef",
        ref="t",
        goal="g",
        prompt="",
        parent_id=None,
        status=Status.BACKLOG,
        harness=None,
        model=None,
        target_branch="main",
        protected=(),
        metadata={
            TASK_SETTINGS: {
                "watchdog_timeout": {"value": float("nan"), "source": "task"},
                "breaker_threshold": {"value": 7, "source": "task"},
            }
        },
        resting_cause=None,
        session_id=None,
        created_at=when,
        updated_at=when,
        last_interaction_at=when,
    )
    own = task_config(config, task)
    assert own["watchdog_timeout"] == config["watchdog_timeout"]  # nan: refused, the default holds
    assert own["breaker_threshold"] == 7  # in range: the task's own
