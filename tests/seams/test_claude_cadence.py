"""corral owns Claude Code's retry cadence: the real CLI at its default retry settings, through corral.

At its defaults Claude Code retries a failed model call ten times with its own backoff — a
401 too, for about three minutes — announcing each with an ``api_retry`` line. corral reads
that line live and ends the CLI at the first one: a fatal class parks the task at once, a
transient one is relaunched on corral's own ladder with ``--resume`` of the same session
(docs/harnesses.md, "Who owns the retry cadence"). Nothing here sets
``CLAUDE_CODE_MAX_RETRIES``: the CLI runs as a user has it installed.

The rig (the pinned binary behind a recording wrapper, a loopback Anthropic Messages server)
is the one of ``tests/seams/test_corral_claude.py``; the surfaces are read through the real
``corral`` CLI as a process.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from corral.adapters.harness.base import TurnRequest
from corral.adapters.harness.claude import ClaudeHarness
from corral.domain.actors import Actor
from corral.domain.clock import parse_time as proto_time
from corral.domain.posture import Posture
from corral.domain.status import Status
from corral.engine.operations import turns
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.attempts import AttemptRunner
from corral.engine.runtime.heartbeat import StatusReporter
from corral.engine.runtime.stopping import StopFlag
from tests.conftest import CLI
from tests.seams.conftest import claude, claude_home  # noqa: F401  (fixtures of the rig)
from tests.seams.test_corral_claude import (  # noqa: F401  (make_rig is a fixture)
    Rig,
    init_events,
    make_rig,
    resume_id,
    start,
)
from tests.support.claude import EXIT_ON_SIGTERM, claude_env
from tests.support.model_server import Error, ScriptedServer, Text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def retry_lines(rig: Rig, task: Any, sequence: int = 1) -> list[dict[str, Any]]:
    return [
        e for e in rig.output_events(task, sequence) if e.get("type") == "system" and e.get("subtype") == "api_retry"
    ]


def test_a_401_at_the_harness_defaults_parks_blocked_with_the_login_hint(make_rig, corral: CLI):  # noqa: F811
    rig = make_rig(auto_resume="0")
    assert "CLAUDE_CODE_MAX_RETRIES" not in rig.env
    # Every request would be refused: the CLI at its defaults would go on for ten retries.
    rig.script(*[Error(401)] * 11)
    task = rig.create()
    done = start(rig, task)

    assert done.status is Status.BLOCKED
    assert done.resting_cause is not None and done.resting_cause.code == "harness-not-authenticated"
    # corral ended the CLI at its first retry line: one request, one launch, no relaunch.
    assert rig.server.consumed == 1
    assert len(rig.launches()) == 1
    (line,) = retry_lines(rig, task)
    assert line["error_status"] == 401 and line["error"] == "authentication_failed"
    assert line["max_retries"] == 10  # the CLI's own default, untouched
    (agent_turn,) = rig.agent_turns(task)
    (attempt,) = agent_turn.attempts
    assert attempt.failure_class == "fatal_auth"
    assert attempt.failure is not None and attempt.failure.exit_code == EXIT_ON_SIGTERM

    shown = corral.ok("show", task.ref).stdout
    assert "Claude Code is not authenticated — log in through the harness." in shown
    doc = corral.json("show", task.ref)
    assert doc["task"]["status"] == "blocked"
    assert doc["resting_cause"]["code"] == "harness-not-authenticated"
    reason = doc["resting_cause"]["evidence"]["details"]["reason"]
    assert "HTTP 401 authentication_failed" in reason
    assert "Log in: run `claude` and type /login (or set ANTHROPIC_API_KEY)." in reason


def test_a_retry_line_reads_as_one_readable_line_in_logs(make_rig, corral: CLI):  # noqa: F811
    rig = make_rig(auto_resume="0")
    rig.script(Error(401))
    task = rig.create()
    start(rig, task)

    lines = corral.ok("logs", task.ref).stdout.splitlines()
    retried = [ln for ln in lines if ln.startswith("↻ ")]
    assert len(retried) == 1
    announced = "↻ harness retry: HTTP 401 authentication_failed (Claude Code's retry 1 of 10, due in "
    assert retried[0].startswith(announced)
    assert retried[0].endswith(" s)")
    assert not any("api_retry" in ln or '{"type"' in ln for ln in lines)


def poll(what: str, probe: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_an_overload_follows_corrals_ladder_with_the_live_state_on_every_surface(make_rig, corral: CLI):  # noqa: F811
    rig = make_rig(auto_resume="0")
    rig.script(Error(529), Text("through after the overload"))
    task = rig.create()
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN)

    def retrying_everywhere() -> tuple[str, str, dict[str, Any]] | None:
        """The substate in ``list`` and ``show --json`` and status.json's retry, once all say retrying."""
        status = rig.status_json(task)
        (row,) = [r for r in corral.json("list")["tasks"] if r["ref"] == task.ref]
        shown = corral.json("show", task.ref)["task"]
        subs = (row["substate"] or "", shown["substate"] or "")
        if status.get("phase") == "retrying" and all(sub.startswith("retrying:") for sub in subs):
            return subs[0], subs[1], status
        return None

    # corral's ladder waits 5 s before the relaunch: the state is live on every surface meanwhile.
    listed, shown, status = poll("list, show and status.json to show the retry", retrying_everywhere)
    expected = "retrying: attempt 1 (transient_overload): Claude Code's model call failed: HTTP 529 overloaded"
    assert listed == shown == expected
    schedule = {key: status["retry"].pop(key) for key in ("next_at", "gives_up_by", "at_most", "waits_left_ms")}
    # corral's schedule: the overload budget (6 h) from the first attempt, and the most attempts that fit in it
    # (5, 10, 20, 40 s, then 60 s steps: 363 if every attempt failed at once)
    assert schedule["at_most"] == 363 and schedule["waits_left_ms"] <= 6 * 3600 * 1000
    assert proto_time(schedule["gives_up_by"]) - proto_time(schedule["next_at"]) <= timedelta(hours=6)
    assert status["retry"] == {
        "attempt": 1,
        "failure_class": "transient_overload",
        "reason": "Claude Code's model call failed: HTTP 529 overloaded",
        "next_delay_ms": 5000,  # corral's first rung, not the CLI's half second
        "by": "corral",
        "attempts": None,  # an overload's ladder is bounded by time, not by a count of attempts
    }

    done = rig.wait(task)
    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert rig.server.remaining == []
    launches = rig.launches()
    assert len(launches) == 2
    (init, *_) = init_events(rig.output_events(task, 1))
    assert resume_id(launches[1]["argv"]) == init["session_id"]  # the same session, resumed
    (agent_turn,) = rig.agent_turns(task)
    assert [a.outcome.value for a in agent_turn.attempts] == ["failed", "succeeded"]
    assert agent_turn.content == "through after the overload"
    # The attempt corral ended and the wait between the two: the CLI's own retry never ran.
    assert len(retry_lines(rig, task)) == 1
    first, second = agent_turn.attempts
    assert first.ended_at is not None and (second.started_at - first.ended_at).total_seconds() >= 5.0


def test_an_unreachable_provider_stops_after_the_unreachable_cap(
    make_rig,  # noqa: F811
    corral: CLI,
    monkeypatch: pytest.MonkeyPatch,
):
    rig = make_rig(auto_resume="0", budget_unreachable="2")
    # Nothing listens there: no HTTP answer at all (the CLI says error "unknown", no status). The
    # supervisor is spawned at the start, with this environment.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    task = rig.create()
    done = start(rig, task)

    assert done.status is Status.BLOCKED
    assert done.resting_cause is not None and done.resting_cause.code == "retry-budget-exhausted"
    assert len(rig.launches()) == 2
    (agent_turn,) = rig.agent_turns(task)
    assert [a.failure_class for a in agent_turn.attempts] == ["transient_unreachable"] * 2
    assert all(a.failure is not None and a.failure.exit_code == EXIT_ON_SIGTERM for a in agent_turn.attempts)
    doc = corral.json("show", task.ref)
    assert "no HTTP answer: the connection failed" in json.dumps(doc["resting_cause"])


# -- the other way: a harness that keeps its own retries is shown live ------------------------


class KeepsItsRetries(ClaudeHarness):
    """Claude Code with its own retries left to it: what corral does for a harness that owns its cadence."""

    corral_owns_retries = False


class RecordingStatus(StatusReporter):
    """The real status.json writer, remembering every retry state it wrote."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.retries: list[proto.RetryState | None] = []

    def update(self, **changes: object) -> None:
        super().update(**changes)
        if "retry" in changes:
            self.retries.append(self.status.retry)


def test_a_harness_that_keeps_its_retries_has_each_shown_live_until_its_next_step(
    claude,  # noqa: F811
    claude_home,  # noqa: F811
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
):
    with ScriptedServer([Error(529), Text("through on its own retry")]) as server:
        for key, value in claude_env(server, claude_home, extra={"CLAUDE_CODE_MAX_RETRIES": None}).items():
            monkeypatch.setenv(key, value)
        dirs = {name: tmp_path / name for name in ("wt", "logs", "protocol")}
        for path in dirs.values():
            path.mkdir()
        harness = KeepsItsRetries(str(claude))
        status = RecordingStatus(dirs["protocol"], "cmd-keeps", "start")
        runner = AttemptRunner(
            harness,
            worktree=dirs["wt"],
            log_dir=dirs["logs"],
            command_id="cmd-keeps",
            secrets=[],
            status=status,
            stop=StopFlag(dirs["protocol"]),
            term_grace=1.0,
        )
        posture = Posture(permission_mode="acceptEdits")
        run = runner.run(1, lambda: harness.work(TurnRequest(prompt="hi", cwd=str(dirs["wt"]), posture=posture)), 60)

    assert run.harness_retry is None and not run.we_signalled  # corral let the CLI retry
    assert harness.classify(run.facts()).succeeded
    assert server.consumed == 2
    shown, cleared = status.retries
    assert shown is not None and cleared is None
    assert (shown.by, shown.attempt, shown.failure_class) == ("harness", 1, "transient_overload")
    assert shown.reason.startswith("HTTP 529 overloaded (Claude Code's retry 1 of 10, due in ")
    on_disk = proto.read_raw(dirs["protocol"] / proto.STATUS) or {}
    assert on_disk["retry"] is None


# -- an account's usage limit: waited for together, no budget spent ---------------------------


@pytest.mark.timeout(180)
def test_a_usage_limit_with_a_stated_reset_waits_for_it_and_resumes_the_same_session(
    make_rig: Any,  # noqa: F811
    corral: CLI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A subscription login (a long-lived token, as `claude setup-token` gives): Claude Code 2.1.332
    # does not retry a 429 that carries the unified rate-limit headers with status "rejected";
    # it prints a rate_limit_event line and ends with the reset as a clock time to the minute in
    # its local zone — for the "overage" claim "You've hit your usage limit · resets 2:13pm (UTC)".
    # (An API key gets none of that: api_retry lines with error "rate_limit", no reset.) The
    # rate_limit_event carries the reset to the second, which corral waits for: here 15 s ahead
    # and never on a minute boundary, so a wait read from the words' minute would end before it
    # (or not start: that minute may have begun already) and the second request would come early.
    rig = make_rig(auto_resume="0")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test-0000000000000000")
    monkeypatch.setenv("TZ", "UTC")
    reset = int(time.time()) + 15
    reset += 1 if reset % 60 == 0 else 0
    unified = {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(reset),
        "anthropic-ratelimit-unified-representative-claim": "overage",
    }
    rig.script(Error(429, headers=unified), Text("through after the reset"))
    task = rig.create()
    turns.start(rig.proj, task.ref, actor=Actor.HUMAN)

    def paused() -> str | None:
        """show's substate, once the task waits on the account"""
        shown = corral.json("show", task.ref)["task"]
        substate = str(shown["substate"])
        return substate if shown["status"] == "working" and substate.startswith("waiting: usage limit") else None

    substate = poll("the task to wait on the usage limit", paused)
    assert substate == f"waiting: usage limit (resets {time.strftime('%H:%M', time.gmtime(reset))})"
    assert "working(waiting: usage limit (resets " in corral.ok("list").stdout
    assert rig.status_json(task)["waiting"]["harness"] == "claude"
    [limit_line] = [e for e in rig.output_events(task, 1) if e.get("type") == "rate_limit_event"]
    assert limit_line["rate_limit_info"]["status"] == "rejected" and limit_line["rate_limit_info"]["resetsAt"] == reset
    assert rig.server.consumed == 1 and len(rig.launches()) == 1

    done = rig.wait(task, timeout=90)
    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert rig.server.remaining == []
    _first, second = rig.server.script_requests
    assert second.at >= reset, "no model request before the reset"
    launches = rig.launches()
    assert len(launches) == 2
    (init, *_) = init_events(rig.output_events(task, 1))
    assert resume_id(launches[1]["argv"]) == init["session_id"]  # the same session, resumed
    (agent_turn,) = rig.agent_turns(task)
    assert agent_turn.content == "through after the reset"
    assert [(a.outcome.value, a.failure_class) for a in agent_turn.attempts] == [
        ("failed", "transient_overload"),
        ("succeeded", None),
    ]
    assert retry_lines(rig, task) == []  # the CLI made no retry of its own
    doc = corral.json("show", task.ref)
    assert [c["to"] for c in doc["status_changes"]][-2:] == ["working", "blocked"]  # never interrupted
    assert "interrupted" not in [c["to"] for c in doc["status_changes"]]
    assert "You've hit your usage limit · resets " in doc["turns"][-1]["attempts"][0]["failure"]["details"]["reason"]
