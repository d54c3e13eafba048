"""Bounded time to rest with the real Claude Code (issue 29), against the scripted model server.

The rig is tests/seams/test_corral_claude.py's (the pinned CLI behind a recording wrapper, its own
retry settings), with auto-resume on. A model that answers every request with HTTP 404 makes the
CLI exit 1 at once, unclassified: a crash loop, auto-resumed once, stopped by the same-cause
breaker. A model that never answers is a hang: the watchdog kills it, relaunches it once, kills it
again, and the task rests without auto-resume. Counts and order come from corral's own records.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.explain import SAME_CAUSE_BREAKER
from corral.domain.incidents import Label
from corral.domain.status import Status
from corral.engine.operations import queries, turns
from corral.engine.operations.auto_resume import maybe_auto_resume
from corral.engine.operations.refresh import settle
from tests.seams import test_corral_claude as rig_module
from tests.support.model_server import Error, Hang

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

make_rig = rig_module.make_rig


def at_rest(rig: Any, task_id: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        settle(rig.proj)
        with rig.proj.store.read() as tx:
            task = tx.get_task(task_id)
        if task.status is not Status.WORKING and not maybe_auto_resume(rig.proj, task.id):
            return task
        time.sleep(0.1)
    raise AssertionError(f"{task_id} was not at rest within {timeout} s")


def records(rig: Any, task_id: str) -> tuple[list[Any], list[Any]]:
    with rig.proj.store.read() as tx:
        return [t for t in tx.turns(task_id) if t.role is Role.AGENT], tx.status_changes(task_id)


def action_rows(rig: Any, ref: str) -> tuple[dict[str, int], dict[str, int]]:
    """What needs action, per corral's own incident, as ``show`` and as ``failures`` read it."""
    shown = queries.show_task(rig.proj, ref).doc["incidents"]["rows"]
    listed = queries.failures(rig.proj, ref).doc["rows"]

    def own(rows: list[dict[str, Any]]) -> dict[str, int]:
        return {
            r["id"]: r["failures"]
            for r in rows
            if r["label"] == Label.ACTION_REQUIRED and r["id"].startswith(("exit:", "supervision:"))
        }

    return own(shown), own(listed)


def test_claude_failing_at_once_is_a_crash_loop_resumed_once_then_at_rest(make_rig) -> None:
    rig = make_rig(auto_resume="1")
    rig.script(*[Error(404, "no such model")] * 40)  # the CLI does not retry a 404: it exits 1 at once
    task = rig.create(prompt="Say hello.")
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN)
    rested = at_rest(rig, task.id)
    assert rested.status is Status.INTERRUPTED and rested.resting_cause.code == "crash-loop"
    assert rested.resting_cause.details[SAME_CAUSE_BREAKER]["run"] == 2
    agent, changes = records(rig, task.id)
    assert len(agent) == 2  # the start and one auto-resume
    for turn in agent:
        assert [(a.number, a.failure_class) for a in turn.attempts] == [(1, "unknown"), (2, "unknown"), (3, "unknown")]
    assert [(c.to_status, c.actor) for c in changes] == [
        (Status.BACKLOG, Actor.HUMAN),
        (Status.WORKING, Actor.HUMAN),
        (Status.INTERRUPTED, Actor.SYSTEM),
        (Status.WORKING, Actor.SYSTEM),
        (Status.INTERRUPTED, Actor.SYSTEM),
    ]
    assert len(rig.launches()) == 6
    in_show, in_failures = action_rows(rig, task.ref)
    assert in_show == in_failures == {"exit:status-1": 6, "supervision:crash-loop": 2}


def test_claude_whose_model_never_answers_is_relaunched_once_then_at_rest(make_rig) -> None:
    rig = make_rig(auto_resume="1", watchdog_timeout="3", term_grace="0.5")
    rig.script(*[Hang(started=False) for _ in range(4)])
    task = rig.create(prompt="Say hello.")
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN)
    rested = at_rest(rig, task.id)
    assert rested.status is Status.INTERRUPTED and rested.resting_cause.code == "watchdog-no-progress"
    assert rested.resting_cause.evidence.details["relaunches"] == 1
    agent, changes = records(rig, task.id)
    assert len(agent) == 1  # never auto-resumed
    assert [a.failure.code for a in agent[0].attempts] == ["watchdog-no-progress"] * 2
    assert [c.to_status for c in changes] == [Status.BACKLOG, Status.WORKING, Status.INTERRUPTED]
    assert len(rig.launches()) == 2
    in_show, in_failures = action_rows(rig, task.ref)
    assert in_show == in_failures == {"supervision:watchdog": 2}
