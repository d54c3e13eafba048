"""One story on every surface (issue 29): a child's non-zero exit, a crash loop, a watchdog kill and a lost
turn are journal incidents that need action, one per cause with its count, and ``show``, ``failures`` and
``list`` read them from the one reduced state; a person closes one with ``failures --dismiss``.

Real turns of the ``command`` harness (real processes), the supervisor's journal read back through the
same queries every surface uses.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from corral.domain.actors import Actor
from corral.domain.incidents import FailureState, Label, dismissal_event, reduce
from corral.domain.status import Status
from corral.engine.operations import control, queries, tasks, turns
from corral.engine.operations.refresh import settle
from corral.errors import NotFoundError, UsageError
from tests.conftest import CLI
from tests.recovery.test_stale_heartbeat import running_status
from tests.turns.conftest import reopen


def command_project(proj, monkeypatch, command: str, **settings: str):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", command)
    monkeypatch.setenv("CORRAL_RETRY_DELAY_UNKNOWN", "0.01")
    for name, value in settings.items():
        monkeypatch.setenv(f"CORRAL_{name.upper()}", value)
    return reopen(proj)


def _walk(doc: object):  # type: ignore[no-untyped-def]
    """Every (key, value) of a JSON document, depth first."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _walk(value)


def story(proj, ref: str) -> tuple[dict[str, object], dict[str, int], dict[str, int]]:  # type: ignore[no-untyped-def]
    """What ``show`` says (its resting cause and incidents) and the counts of what needs action per
    incident, as ``show`` and as ``failures`` read them."""
    shown = queries.show_task(proj, ref).doc
    listed = queries.failures(proj, ref).doc
    in_show = {r["id"]: r["failures"] for r in shown["incidents"]["rows"] if r["label"] == Label.ACTION_REQUIRED}
    in_failures = {r["id"]: r["failures"] for r in listed["rows"] if r["label"] == Label.ACTION_REQUIRED}
    return shown, in_show, in_failures


def test_a_crash_loop_and_its_exits_are_incidents_show_and_failures_agree_on(proj, monkeypatch) -> None:
    proj = command_project(proj, monkeypatch, "sh -c 'echo broken >&2; exit 1'")
    task = tasks.create(proj, "Fail at once", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=60)
    assert result.task.status is Status.INTERRUPTED and result.task.resting_cause.code == "crash-loop"
    shown, in_show, in_failures = story(proj, task.ref)
    # one row per cause, with its count: three exits with status 1, one crash loop
    assert in_show == in_failures == {"exit:status-1": 3, "supervision:crash-loop": 1}
    assert shown["incidents"]["needs_action"] == 2
    assert shown["incidents"]["line"] == "2 failures need action"
    proj.close()


def test_a_watchdog_kill_is_one_incident_counted_per_kill(proj, monkeypatch) -> None:
    hang = f"{sys.executable} -c 'import time; time.sleep(600)'"
    proj = command_project(proj, monkeypatch, hang, watchdog_timeout="1", term_grace="0.2")
    task = tasks.create(proj, "Hang", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    result = control.wait(proj, task.ref, timeout=60)
    assert result.task.resting_cause.code == "watchdog-no-progress"
    _shown, in_show, in_failures = story(proj, task.ref)
    assert in_show == in_failures == {"supervision:watchdog": 2}  # killed, relaunched once, killed again
    shown = queries.show_task(proj, task.ref).doc
    because = next(v for k, v in _walk(shown) if k == "stopped_because")
    assert "It hung again after corral relaunched it once, so corral does not resume it by itself." in because
    proj.close()


def lose_turn(proj, task_id: str):  # type: ignore[no-untyped-def]
    """Kill the running turn's supervisor and agent together, then settle until the task is no longer working
    (30 s at most): the task as the reconciler left it."""
    status = running_status(proj, task_id)
    os.kill(status.pid, signal.SIGKILL)
    os.kill(status.agent_pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        settle(proj)
        with proj.store.read() as tx:
            after = tx.get_task(task_id)
        if after.status is not Status.WORKING or time.monotonic() > deadline:
            return after
        time.sleep(0.1)


def test_a_lost_turn_is_an_incident_show_and_failures_agree_on(proj, monkeypatch) -> None:
    hang = f"{sys.executable} -c 'import time; time.sleep(600)'"
    proj = command_project(proj, monkeypatch, hang)
    task = tasks.create(proj, "Lose its supervisor", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    after = lose_turn(proj, task.id)
    assert after.status is Status.INTERRUPTED and after.resting_cause.code == "turn-lost"
    _shown, in_show, in_failures = story(proj, task.ref)
    assert in_show == in_failures == {"supervision:lost": 1}
    proj.close()


def test_dismiss_closes_one_incident_as_a_persons_disposition_kept_in_history(
    corral: CLI, monkeypatch, tmp_path
) -> None:
    env = {
        "CORRAL_HARNESS": "command",
        "CORRAL_COMMAND": "sh -c 'exit 1'",
        "CORRAL_RETRY_DELAY_UNKNOWN": "0.01",
        "CORRAL_AUTO_RESUME": "0",
    }
    ref = corral.json("create", "Fail at once", env=env)["task"]["ref"]
    corral.ok("start", ref, env=env)
    assert corral("wait", ref, env=env).returncode == 1  # it rests interrupted
    rows = corral.json("failures", ref)["failures"]["rows"]
    assert sorted(r["id"] for r in rows) == ["exit:status-1", "supervision:crash-loop"]
    text = corral("failures", ref).stdout.splitlines()
    assert f"Dismiss one you have dealt with: corral failures {ref} --dismiss exit:status-1 -m 'why'" in text
    closed = corral.json("failures", ref, "--dismiss", "exit:status-1", "-m", "the script is meant to fail")
    assert closed["dismissed"]["label"] == "Dismissed"
    assert closed["dismissed"]["reason"] == "the script is meant to fail"
    after = corral.json("failures", ref)["failures"]
    assert [r["id"] for r in after["rows"]] == ["supervision:crash-loop"]
    assert "1 dismissed" in after["line"]
    history = {r["id"]: r for r in corral.json("failures", ref, "--history")["failures"]["rows"]}
    assert history["exit:status-1"]["label"] == "Dismissed" and history["exit:status-1"]["failures"] == 3
    assert corral.json("show", ref)["incidents"]["needs_action"] == 1
    # an incident already closed, or none of that id, is not found; no reason is a usage error
    again = corral("failures", ref, "--dismiss", "exit:status-1", "-m", "again", "--json")
    assert again.returncode == NotFoundError.exit_code and "supervision:crash-loop" in again.stderr + again.stdout
    bare = corral("failures", ref, "--dismiss", "supervision:crash-loop", "--json")
    assert bare.returncode == UsageError.exit_code


def test_only_a_persons_dismissal_closes_an_incident() -> None:
    failure = {"kind": "failure", "id": "supervision:watchdog", "category": "supervision", "summary": "hung"}
    agents = {**dismissal_event("d1", "supervision:watchdog", "not mine", None), "actor": "agent"}
    state = reduce(FailureState(), [failure, agents])
    assert state.incidents["supervision:watchdog"].label is Label.ACTION_REQUIRED
    state = reduce(state, [dismissal_event("d2", "supervision:watchdog", "known", None), failure])
    closed, reopened = state.incidents.values()
    assert (closed.label, closed.reason, closed.failures) == (Label.DISMISSED, "known", 1)
    assert reopened.label is Label.ACTION_REQUIRED  # the cause again after a dismissal: a new incident
