"""`corral list` and `corral show`: one projection, rendered as text and as JSON."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import SCHEMA_VERSION, AttemptOutcome, FailureEvidence, FeedbackDelivery, RestingCause
from tests.cli.helpers import RFC3339_Z, create, json_error, no_traceback, park, store_of, times_in, to_working

# DESIGN.md "CLI contract": what `corral show T --json` holds at least.
SHOW_KEYS = {
    "schema_version",
    "task",
    "session",
    "turns",
    "status_changes",
    "violations",
    "resting_cause",
    "stopped_because",
    "next",
}
TASK_KEYS = {
    "id",
    "ref",
    "goal",
    "status",
    "substate",
    "parent",
    "harness",
    "branch",
    "worktree",
    "created_at",
    "updated_at",
}
SESSION_KEYS = {"id", "harness_session_id", "consecutive_interruptions", "auto_resumed", "interrupt"}
INTERRUPT_KEYS = {"reason", "exit_code", "at", "logs"}
TURN_KEYS = {
    "sequence",
    "role",
    "actor",
    "kind",
    "content",
    "feedback_delivery",
    "started_at",
    "ended_at",
    "attempts",
    "failure",
}
ATTEMPT_KEYS = {"number", "outcome", "failure_class", "failure"}
CHANGE_KEYS = {"from", "to", "actor", "reason", "at"}
VIOLATION_KEYS = {"path", "decision"}


def _refs(doc: dict) -> list[str]:
    return [row["ref"] for row in doc["tasks"]]


def test_list_hides_finished_tasks_unless_all(corral) -> None:
    create(corral, "Open one", "--ref", "open-one")
    create(corral, "Closed one", "--ref", "closed-one")
    corral.ok("close", "closed-one", "-m", "won't do")
    assert _refs(corral.json("list")) == ["open-one"]
    assert sorted(_refs(corral.json("list", "--all"))) == ["closed-one", "open-one"]
    text = corral.ok("list").stdout
    assert "open-one" in text and "backlog" in text and "Open one" in text
    assert "closed-one" not in text
    assert "closed-one" in corral.ok("list", "--all").stdout


def test_list_filters_active_and_blocked(corral) -> None:
    create(corral, "Waiting", "--ref", "waiting")
    create(corral, "Running", "--ref", "running")
    create(corral, "Reviewed", "--ref", "reviewed")
    create(corral, "Clashing", "--ref", "clashing")
    to_working(corral, "running")
    to_working(corral, "reviewed")
    assert park(corral, "reviewed") == "blocked"
    to_working(corral, "clashing")
    assert park(corral, "clashing", violations=["migrations/001.sql"]) == "conflict"
    active = corral.json("list", "--active")["tasks"]
    assert [(r["ref"], r["status"]) for r in active] == [("running", "working")]
    assert active[0]["substate"] == "not-alive"  # no supervisor ever ran
    blocked = corral.json("list", "--blocked")["tasks"]
    assert sorted((r["ref"], r["status"]) for r in blocked) == [("clashing", "conflict"), ("reviewed", "blocked")]
    assert sorted(_refs(corral.json("list"))) == ["clashing", "reviewed", "running", "waiting"]
    text = corral.ok("list", "--blocked").stdout
    assert "conflict" in text and "reviewed" in text
    assert [line.split()[0] for line in text.splitlines()] == ["reviewed", "clashing"]  # not the task "waiting"
    # A paused status says what it means where the person reads it.
    assert "Reviewed — waiting for you" in text and "Clashing — a protected file awaits your decision" in text


def test_list_of_nothing(corral) -> None:
    assert corral.json("list")["tasks"] == []
    assert "No tasks." in corral.ok("list").stdout
    assert "No active tasks." in corral.ok("list", "--active").stdout


def test_show_text_has_the_timeline_and_next(corral) -> None:
    create(corral, "Fix the login timeout", "--ref", "fix-login", "-m", "Keep it small.")
    result = corral.ok("show", "fix-login")
    no_traceback(result)
    out = result.stdout
    assert "fix-login" in out
    assert "Goal:     Fix the login timeout" in out
    assert "Timeline:" in out
    assert "→ backlog by human" in out
    assert "Next: Start it: corral start fix-login" in out
    assert "Keep it small." in out


def _seed_a_rich_task(corral) -> str:
    """A task with a session (interrupted once), turns with attempts, a violation and a cause."""
    create(corral, "Rich task", "--ref", "rich")
    task_id = to_working(corral, "rich")
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    evidence = FailureEvidence(source="harness", code="transient_overload", exit_code=1, details={"status": 529})
    with store_of(corral) as store, store.write() as tx:
        task = tx.get_task(task_id)
        assert task is not None and task.session_id is not None
        tx.update_session(
            task.session_id,
            harness_session_id="sess-1",
            interrupt_reason="agent died",
            interrupt_exit_code=137,
            interrupt_at=at,
            interrupt_logs="tail",
            consecutive_interruptions=1,
        )
        tx.add_turn(
            task_id,
            role=Role.HUMAN,
            actor=Actor.HUMAN,
            kind="start",
            content="Go.",
            session_id=task.session_id,
            feedback_delivery=FeedbackDelivery.PENDING,
        )
        turn = tx.add_turn(
            task_id, role=Role.AGENT, kind="start", content="Done.", session_id=task.session_id, failure=evidence
        )
        tx.add_attempt(
            turn.id,
            number=1,
            started_at=at,
            ended_at=at,
            outcome=AttemptOutcome.FAILED,
            failure_class="transient_overload",
            failure=evidence,
        )
        tx.add_attempt(turn.id, number=2, started_at=at, ended_at=at, outcome=AttemptOutcome.SUCCEEDED)
        tx.record_violations(task_id, ["secrets.env"])
        tx.park(task_id, Actor.HUMAN, "stopped by human", resting_cause=RestingCause(code="stopped", at=at))
    return task_id


def test_show_json_holds_the_documented_shape(corral) -> None:
    task_id = _seed_a_rich_task(corral)
    doc = corral.json("show", "rich")
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    assert set(doc) >= SHOW_KEYS, SHOW_KEYS - set(doc)
    assert set(doc["task"]) >= TASK_KEYS, TASK_KEYS - set(doc["task"])
    assert doc["task"]["id"] == task_id
    assert doc["task"]["status"] == "conflict"
    assert doc["task"]["branch"] == "corral/rich"
    assert set(doc["session"]) >= SESSION_KEYS
    assert set(doc["session"]["interrupt"]) >= INTERRUPT_KEYS
    assert doc["session"]["interrupt"]["exit_code"] == 137
    assert doc["session"]["harness_session_id"] == "sess-1"
    assert len(doc["turns"]) == 2
    for turn in doc["turns"]:
        assert set(turn) >= TURN_KEYS, TURN_KEYS - set(turn)
    human, agent = doc["turns"]
    assert (human["role"], human["actor"], human["feedback_delivery"]) == ("human", "human", "pending")
    assert (agent["role"], agent["actor"]) == ("agent", None)
    assert [a["number"] for a in agent["attempts"]] == [1, 2]
    for attempt in agent["attempts"]:
        assert set(attempt) >= ATTEMPT_KEYS
    assert agent["attempts"][0]["failure_class"] == "transient_overload"
    assert agent["attempts"][0]["failure"]["code"] == "transient_overload"
    assert agent["failure"]["code"] == "transient_overload"
    for change in doc["status_changes"]:
        assert set(change) >= CHANGE_KEYS
    assert [(c["from"], c["to"]) for c in doc["status_changes"]] == [
        (None, "backlog"),
        ("backlog", "working"),
        ("working", "conflict"),
    ]
    assert doc["violations"] and set(doc["violations"][0]) >= VIOLATION_KEYS
    assert doc["violations"][0] == {**doc["violations"][0], "path": "secrets.env", "decision": "pending"}
    assert doc["resting_cause"]["code"] == "stopped"
    assert doc["stopped_because"] == "The turn was stopped."
    assert doc["next"] and "--approve-file" in doc["next"]
    times = list(times_in(doc))
    assert len(times) >= 10
    for key, value in times:
        assert value is None or RFC3339_Z.match(value), (key, value)
    text = corral.ok("show", "rich", "--details").stdout
    assert "Stopped because: The turn was stopped." in text
    assert "Next:" in text
    assert "secrets.env" in text
    assert "sess-1" in text


def test_show_json_of_a_new_task(corral) -> None:
    create(corral, "Fresh", "--ref", "fresh")
    doc = corral.json("show", "fresh")
    assert set(doc) >= SHOW_KEYS
    assert doc["session"] is None
    assert doc["turns"] == [] and doc["violations"] == []
    assert doc["resting_cause"] is None and doc["stopped_because"] is None
    assert doc["next"] == "Start it: corral start fresh"
    assert doc["task"]["branch"] is None and doc["task"]["worktree"] is None
    assert RFC3339_Z.match(doc["task"]["created_at"]) and RFC3339_Z.match(doc["task"]["updated_at"])
    assert RFC3339_Z.match(doc["status_changes"][0]["at"])


def test_show_by_id_and_by_prefix(corral) -> None:
    task = create(corral, "Find me", "--ref", "find-me")
    assert corral.json("show", task["id"])["task"]["ref"] == "find-me"
    assert corral.json("show", task["id"][:6])["task"]["ref"] == "find-me"
    assert corral.json("show", "find")["task"]["id"] == task["id"]


def test_show_of_an_abandoned_task_says_how_to_bring_it_back(corral) -> None:
    create(corral, "Short lived", "--ref", "short")
    corral.ok("close", "short", "-m", "dup")
    doc = corral.json("show", "short")
    assert doc["task"]["status"] == "abandoned"
    assert "corral reopen short" in doc["next"]
    assert doc["status_changes"][-1] == {**doc["status_changes"][-1], "from": "backlog", "to": "abandoned"}
    assert "Next:" in corral.ok("show", "short").stdout


def test_show_unknown_is_not_found(corral) -> None:
    json_error(corral("show", "nothing-here", "--json"), 4, "task-not-found")


# -- a long history: the text view pages, --all and --json do not -----------------------------------


def _with_turns(corral, ref: str, count: int) -> None:
    """A task with ``count`` agent turns, dated after its creation (one second apart)."""
    create(corral, f"Long history {ref}", "--ref", ref)
    first = datetime.now(UTC) + timedelta(seconds=1)
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        for i in range(count):
            at = first + timedelta(seconds=i)
            tx.add_turn(task.id, role=Role.AGENT, kind="start", content=f"Step {i + 1}.", started_at=at, ended_at=at)


def _turn_numbers(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"turn (\d+) · ", text)]


def test_show_pages_a_long_history_to_the_last_50_turns(corral) -> None:
    _with_turns(corral, "long", 60)
    out = corral.ok("show", "long").stdout
    assert _turn_numbers(out) == list(range(11, 61))
    assert "… 10 earlier turns not shown; corral show long --all shows every turn" in out
    assert "→ backlog by human" not in out  # what happened before the first shown turn is paged out with it
    assert "Next: Start it: corral start long" in out  # the rest of the page is whole


def test_show_all_shows_every_turn(corral) -> None:
    _with_turns(corral, "long", 60)
    out = corral.ok("show", "long", "--all").stdout
    assert _turn_numbers(out) == list(range(1, 61))
    assert "earlier turn" not in out
    assert "→ backlog by human" in out


def test_show_json_never_pages(corral) -> None:
    _with_turns(corral, "long", 60)
    for args in ((), ("--all",)):
        doc = corral.json("show", "long", *args)
        assert [t["sequence"] for t in doc["turns"]] == list(range(1, 61))
        assert [c["to"] for c in doc["status_changes"]] == ["backlog"]


def test_show_pages_only_past_50_and_counts_one_turn_as_one(corral) -> None:
    _with_turns(corral, "fifty", 50)
    out = corral.ok("show", "fifty").stdout
    assert _turn_numbers(out) == list(range(1, 51))
    assert "earlier turn" not in out and "→ backlog by human" in out
    _with_turns(corral, "fifty-one", 51)
    out = corral.ok("show", "fifty-one").stdout
    assert _turn_numbers(out) == list(range(2, 52))
    assert "… 1 earlier turn not shown; corral show fifty-one --all shows every turn" in out


# -- where the work merges ----------------------------------------------------------------------


def test_show_names_the_branch_a_task_merges_into(corral) -> None:
    create(corral, "Parent", "--ref", "parent")
    create(corral, "Child", "--ref", "child", "--parent", "parent")
    create(corral, "Elsewhere", "--ref", "elsewhere", "--target", "release")
    assert "Branch:   (not started) → main" in corral.ok("show", "parent").stdout
    assert "Branch:   (not started) → corral/parent" in corral.ok("show", "child").stdout
    assert "Branch:   (not started) → release" in corral.ok("show", "elsewhere").stdout
    assert corral.json("show", "child")["task"]["target"] is None  # the JSON keeps the stored field


@pytest.mark.slow
def test_an_error_turn_is_dated_when_it_ended_not_when_it_began(corral, tmp_path):
    from tests.cli.test_cli_turns import fake_env

    slow_failure = [
        {"init": True},
        {"sleep": 2.5},
        {"result": "Invalid API key · Fix external API key", "is_error": True},
        {"exit": 1},
    ]
    env = fake_env(tmp_path, slow_failure)
    corral.ok("create", "Fails slowly", "--ref", "slowfail", env=env)
    assert corral("start", "slowfail", "--wait", "--timeout", "60", env=env).returncode == 1  # it rests with a cause
    doc = corral.json("show", "slowfail", env=env)
    error = doc["turns"][-1]
    assert error["role"] == "agent" and error["failure"] is not None
    began, ended = datetime.fromisoformat(error["started_at"]), datetime.fromisoformat(error["ended_at"])
    assert (ended - began).total_seconds() >= 2
    text = corral.ok("show", "slowfail", env={**env, "TZ": "UTC"}).stdout
    line = next(ln for ln in text.splitlines() if f"turn {error['exchange']} · " in ln and " · agent" in ln)
    assert ended.astimezone(UTC).strftime("%H:%M:%S") in line  # its end, not its start
    assert began.astimezone(UTC).strftime("%H:%M:%S") not in line
