"""The shared usage-limit pause through the real CLI and supervisors, the fake agent speaking
Claude Code's words for its account's limit (``Claude AI usage limit reached|<reset epoch>``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI, FakeAgent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

THROUGH_AFTER = 1.5  # the relaunch's first model response comes this long after it starts


def _limit(reset: int) -> list[dict[str, Any]]:
    return [{"init": True}, {"result": f"Claude AI usage limit reached|{reset}", "is_error": True}]


THROUGH = [{"init": True}, {"sleep": THROUGH_AFTER}, {"text": "back at it"}, {"sleep": 0.3}, {"result": "Done."}]


def _rows(corral: CLI) -> dict[str, dict[str, Any]]:
    return {t["ref"]: t for t in corral.json("list", "--all")["tasks"]}


def _until(what: Any, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what.__doc__ or what}")


def test_three_tasks_on_one_account_wait_for_the_reset_and_follow_the_first_through(
    agent: FakeAgent, corral: CLI, isolated_env: Path
) -> None:
    reset = int(time.time()) + 10  # time for all three to start and join the pause, even on a busy machine
    agent.script(_limit(reset), default=THROUGH)
    for ref in ("one", "two", "three"):
        corral.ok("create", f"Task {ref}", "--ref", ref)
    corral.ok("start", "one")

    def one_waits() -> bool:
        """one waiting on the usage limit"""
        return str(_rows(corral)["one"]["substate"]).startswith("waiting: usage limit (resets ")

    _until(one_waits)
    # Tasks about to launch on a paused account join the pause: no harness call before the reset.
    corral.ok("start", "two")
    corral.ok("start", "three")

    def all_wait() -> bool:
        """every task waiting"""
        rows = _rows(corral)
        return all(str(rows[r]["substate"]).startswith("waiting: usage limit") for r in ("one", "two", "three"))

    _until(all_wait)
    assert len(agent.calls()) == 1
    shown = corral.ok("list").stdout
    assert "working(waiting: usage limit (resets " in shown

    def all_blocked() -> bool:
        """every task blocked"""
        return all(t["status"] == "blocked" for r, t in _rows(corral).items())

    _until(all_blocked)
    calls = agent.calls()
    assert len(calls) == 4  # the one that hit the limit, then one relaunch or launch each
    after = sorted(calls[1:], key=lambda c: c["at"])
    assert all(c["at"] >= reset for c in after), "nobody called the harness before the reset"
    first, rest = after[0], after[1:]
    assert all(c["at"] >= first["at"] + THROUGH_AFTER for c in rest), "the rest went only after the first got through"
    for ref in ("one", "two", "three"):
        doc = corral.json("show", ref)
        assert [c["to"] for c in doc["status_changes"]][-2:] == ["working", "blocked"]  # never interrupted
        agent_turns = [t for t in doc["turns"] if t["role"] == "agent"]
        assert agent_turns[-1]["content"] == "Done."
        attempts = agent_turns[-1]["attempts"]
        # one's limit attempt is on record, and spent no retry budget: the next attempt is not a retry
        assert len(attempts) == (2 if ref == "one" else 1)
    pauses = json.loads((isolated_env / "corral-home" / "usage-limits.json").read_text())
    assert pauses["accounts"] == {}


def test_a_reset_beyond_the_retry_budget_parks_the_task_blocked_with_the_date(agent: FakeAgent, corral: CLI) -> None:
    reset = int(time.time()) + 3 * 86400
    agent.script(_limit(reset))
    corral.ok("create", "Far away", "--ref", "far")
    started = time.monotonic()
    corral.ok("start", "far")

    def blocked() -> bool:
        """far blocked"""
        return _rows(corral)["far"]["status"] == "blocked"

    _until(blocked, timeout=20)
    assert time.monotonic() - started < 15
    doc = corral.json("show", "far")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(reset))
    assert when in json.dumps(doc["resting_cause"]) or when in json.dumps(doc)
    assert len(agent.calls()) == 1
    text = corral.ok("show", "far").stdout
    assert when in text


def test_a_reset_already_past_is_an_overload_on_the_ladder_not_a_loop(agent: FakeAgent, corral: CLI) -> None:
    agent.script(default=_limit(1_000_000_000))  # a reset in 2001: a skewed clock, a limit outliving its words
    corral.ok("create", "Past reset", "--ref", "past")
    corral.ok("start", "past")
    time.sleep(4)
    assert len(agent.calls()) <= 2  # the overload ladder's first wait is 5 s: no relaunch in a tight loop
    substate = str(_rows(corral)["past"]["substate"])
    assert substate.startswith("retrying: attempt 1 (transient_overload)"), substate
    corral.ok("stop", "past")
