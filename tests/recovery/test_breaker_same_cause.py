"""The same-cause breaker through the real CLI: one cause twice in a row stops auto-resume, and `show` says why.

An agent that fails the same way at once (the same exit status, no commit) is not run again
and again: ``breaker_same_cause`` (default 2) interruptions with one cause, no new commit
between them and within ten minutes stop auto-resume, before the three consecutive
interruptions of ``breaker_threshold`` would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.domain.breaker import (
    SAME_CAUSE_WINDOW_SECONDS,
    Interruption,
    same_cause,
    same_cause_run,
    same_cause_tripped,
)
from tests.cli.test_cli_turns import calls, fake_env

SELF_KILL = [{"init": True}, {"kill": "KILL"}]
EXIT_1 = [{"stderr": "boom\n"}, {"exit": 1}]


def wait_json(corral: Any, ref: str, env: dict[str, str]) -> dict[str, Any]:
    waited = corral("wait", ref, "--json", "--timeout", "400", env=env, timeout=450)
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    doc: dict[str, Any] = waited.json()
    return doc


@pytest.mark.slow
def test_a_crash_repeated_the_same_way_stops_auto_resume_after_two(corral, tmp_path):
    env = fake_env(tmp_path, SELF_KILL, SELF_KILL, SELF_KILL, SELF_KILL)
    corral.ok("create", "Crashes", "--ref", "crashy", env=env)
    corral.ok("start", "crashy", env=env)
    doc = wait_json(corral, "crashy", env)
    assert doc["task"]["status"] == "interrupted"
    assert len(calls(tmp_path)) == 2  # not 3 (the consecutive breaker) nor more
    assert doc["resting_cause"]["details"]["same_cause_breaker"]["run"] == 2
    assert "same-cause breaker" in doc["stopped_because"]
    shown = corral.ok("show", "crashy", env=env).stdout
    assert "interrupted twice in a row the same way" in shown and "same-cause breaker" in shown
    # a later look neither resumes it nor counts the interruption again
    again = corral.json("show", "crashy", env=env)
    assert again["resting_cause"]["details"]["same_cause_breaker"]["run"] == 2
    assert len(calls(tmp_path)) == 2
    # a person resuming it starts the count again: one more auto-resume, then the breaker again
    corral.ok("resume", "crashy", env=env)
    doc = wait_json(corral, "crashy", env)
    assert len(calls(tmp_path)) == 4
    assert doc["resting_cause"]["details"]["same_cause_breaker"]["run"] == 2


@pytest.mark.slow
def test_the_setting_raises_the_count_and_the_consecutive_breaker_still_applies(corral, tmp_path):
    env = fake_env(tmp_path, SELF_KILL, SELF_KILL, SELF_KILL, SELF_KILL, SELF_KILL)
    corral.ok("create", "Crashes", "--ref", "crashy", "--json", env=env)
    corral.ok("edit", "crashy", "--set", "breaker_same_cause=5", env=env)
    corral.ok("start", "crashy", env=env)
    doc = wait_json(corral, "crashy", env)
    assert doc["task"]["status"] == "interrupted"
    assert len(calls(tmp_path)) == 3  # the three consecutive interruptions of breaker_threshold
    assert "same_cause_breaker" not in doc["resting_cause"]["details"]
    assert "circuit breaker" in doc["stopped_because"]


@pytest.mark.slow
def test_a_new_commit_between_two_crashes_is_not_the_same_cause(corral, tmp_path):
    commit_then_crash = [
        [
            {"init": True},
            {"write": {"path": f"step{i}.txt", "content": f"{i}\n"}},
            {"commit": f"step {i}"},
            {"kill": "KILL"},
        ]
        for i in range(5)
    ]
    env = fake_env(tmp_path, *commit_then_crash)
    corral.ok("create", "Progresses then crashes", "--ref", "progress", env=env)
    corral.ok("start", "progress", env=env)
    doc = wait_json(corral, "progress", env)
    assert doc["task"]["status"] == "interrupted"
    assert len(calls(tmp_path)) == 3  # each crash followed new work: only the consecutive breaker stops it
    assert "same_cause_breaker" not in doc["resting_cause"]["details"]


def test_the_rule_one_code_one_exit_status_no_commit_within_ten_minutes():
    before = Interruption("turn-crashed", 137, "abc", 1000.0)
    assert same_cause(before, Interruption("turn-crashed", 137, "abc", 1000.0 + SAME_CAUSE_WINDOW_SECONDS))
    assert not same_cause(before, Interruption("turn-crashed", 137, "abc", 1001.0 + SAME_CAUSE_WINDOW_SECONDS))
    assert not same_cause(before, Interruption("turn-crashed", 1, "abc", 1010.0))
    assert not same_cause(before, Interruption("crash-loop", 137, "abc", 1010.0))
    assert not same_cause(before, Interruption("turn-crashed", 137, "def", 1010.0))
    now = Interruption("turn-crashed", 137, "abc", 1010.0)
    assert same_cause_run(before, 1, now, in_a_row=True) == 2
    assert same_cause_run(before, 1, now, in_a_row=False) == 1  # a turn ended well, or a person resumed it
    assert same_cause_run(None, 4, now, in_a_row=True) == 1
    assert Interruption.from_json(now.to_json()) == now and Interruption.from_json({"code": 3}) is None
    assert same_cause_tripped(2, 2) and not same_cause_tripped(1, 2) and not same_cause_tripped(9, 0)


@pytest.mark.slow
def test_an_agent_that_exits_1_at_once_is_not_run_nine_times(corral, tmp_path, monkeypatch):
    # The person's unclassified-failure ladder at milliseconds (the defaults wait 15 s, then 30 s, in each
    # turn); its crash-loop window stays the default's 10 s, which each attempt is far within.
    monkeypatch.setenv("CORRAL_RETRY_DELAY_UNKNOWN", "0.01")
    env = fake_env(tmp_path)
    (tmp_path / "scenario.json").write_text(json.dumps({"invocations": [], "default": EXIT_1}))
    corral.ok("create", "Exits at once", "--ref", "exits", env=env)
    corral.ok("start", "exits", env=env)
    doc = wait_json(corral, "exits", env)
    assert doc["task"]["status"] == "interrupted"
    # two turns of three fast failures each (the crash-loop detector ends a turn), then no more
    assert len(calls(tmp_path)) == 6
    assert doc["resting_cause"]["code"] == "crash-loop"
    same = doc["resting_cause"]["details"]["same_cause_breaker"]
    assert (same["run"], same["code"], same["exit_code"]) == (2, "crash-loop", 1)
    assert "same-cause breaker" in doc["stopped_because"] and "exit status 1" in doc["stopped_because"]
    assert "corral resume exits" in doc["next"]
