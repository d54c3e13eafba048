"""A model provider that answers HTTP 500: the real Claude Code CLI against the scripted model server.

corral ends the CLI at its first ``api_retry`` line and waits on its own ladder (see
test_claude_cadence.py). While it waits, ``show`` tells corral's schedule — when the next attempt
starts, how many the ladder allows at most, and by when it stops retrying — never the CLI's own
"retry due in 0.6 s" of the attempt corral already ended; a 5xx is a server error of the provider,
in its own words, not a lost network connection.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import turns
from tests.conftest import CLI
from tests.seams.conftest import claude, claude_home  # noqa: F401  (fixtures of the rig)
from tests.seams.test_corral_claude import Rig, make_rig  # noqa: F401  (make_rig is a fixture)
from tests.support.model_server import Error

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: The network budget of the rig: the first attempt's failure (~1 s), corral's first wait (5 s),
#: the second attempt; the next wait (10 s) would pass 12 s, so the ladder allows two attempts.
BUDGET = "12"


def poll(what: str, probe: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def running_line(text: str) -> str:
    (line,) = [ln for ln in text.splitlines() if ln.startswith("Running:")]
    return line


def test_while_corral_waits_show_tells_its_own_schedule_not_the_clis(make_rig, corral: CLI) -> None:  # noqa: F811
    rig = make_rig(auto_resume="0", budget_network=BUDGET)
    rig.script(*[Error(500)] * 6)
    task = rig.create()
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN)

    status = poll("corral's wait after the first 500", lambda: (s := rig.status_json(task)).get("retry") and s)
    retry = status["retry"]
    assert retry["by"] == "corral" and retry["attempt"] == 1 and retry["next_delay_ms"] == 5000
    # corral's schedule in the live state: the next attempt's start, the ladder's end and its bound
    next_at = datetime.fromisoformat(retry["next_at"])
    gives_up_by = datetime.fromisoformat(retry["gives_up_by"])
    assert 0 < (gives_up_by - next_at).total_seconds() <= float(BUDGET)
    assert retry["at_most"] == 2

    doc = corral.json("show", task.ref)
    live = doc["live"]
    assert live["retry_by"] == "corral" and live["last_line"] is None  # the ended attempt's CLI line is not news
    assert live["schedule"].startswith("next attempt at ")
    shown = corral.ok("show", task.ref).stdout
    line = running_line(shown)
    assert "attempt 2 of at most 2" in line
    assert "next attempt at " in line and "corral stops retrying by " in line
    assert "harness retry" not in shown and "due in" not in shown  # the CLI's own retry, which corral ended
    assert "lost its network connection" not in shown
    assert "server error" in line

    done = rig.wait(task)
    assert done.status is Status.BLOCKED and done.resting_cause is not None
    assert done.resting_cause.code == "retry-budget-exhausted"
    (agent_turn,) = rig.agent_turns(task)
    assert [(a.failure_class, a.failure.code) for a in agent_turn.attempts if a.failure] == [
        ("transient_network", "harness-server-error"),
        ("transient_network", "harness-server-error"),
    ]
    assert rig.server.consumed == 2  # one model request per attempt: corral, not the CLI, retried

    at_rest = corral.ok("show", task.ref).stdout
    assert "lost its network connection" not in at_rest
    assert "Attempt 1 of 2 failed: Claude Code's model provider answered with a server error" in at_rest
    (stopped,) = [ln for ln in at_rest.splitlines() if ln.startswith("Stopped because:")]
    assert "retry budget ran out" in stopped and "server error" in stopped
