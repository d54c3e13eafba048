"""What another host wrote of a turn's live facts (``live_turns``) is untrusted on the shared store (docs/workers.md):
a number no turn reports, a line past its cap, a row that is not a document, never breaks a reader, and one
that does break a step of a reconcile pass is a problem that pass reports, never the pass's end."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.agent_tools import PROGRESS_CAP
from corral.domain.status import Status
from corral.domain.substate import Live, render_status, substate, waited
from corral.domain.team import WorkerState
from corral.engine.project import Project
from corral.engine.recovery.reconcile import sweep_working
from corral.engine.runtime.liveness import ATTEMPT_CAP, live_from_json, live_to_json
from corral.engine.shared_store.team_placement import SharedPlacement
from corral.store import NewTask

#: Numbers ``json.loads`` accepts that no turn reports: past a float, not finite, negative, of another type.
NO_COUNTS: list[Any] = [10**400, float("inf"), float("-inf"), float("nan"), -3, 10**12, "12", True, None, [1]]


def _shown(doc: dict[str, Any]) -> str:
    return render_status(Status.WORKING, substate(Status.WORKING, live_from_json(doc, alive=True)))


def test_a_wait_or_an_attempt_no_turn_reports_reads_as_absent_and_never_breaks_a_reader() -> None:
    for seconds in NO_COUNTS:
        live = live_from_json({"waits": [{"ref": "fix-foo", "seconds": seconds}]}, alive=True)
        assert live.waits[0].seconds == 0.0, seconds
        assert _shown({"waits": [{"ref": "fix-foo", "seconds": seconds}]}) == "working(waiting on fix-foo (0s))"
    for attempt in [*NO_COUNTS, ATTEMPT_CAP + 1, 10**5000]:
        live = live_from_json({"phase": "retrying", "retry_attempt": attempt, "retry_class": "x"}, alive=True)
        assert live.retry_attempt is None, attempt
        assert (
            _shown({"phase": "retrying", "retry_attempt": attempt, "retry_class": "x"})
            == "working(retrying: attempt (x))"
        )
    kept = live_from_json({"waits": [{"ref": "a", "seconds": 130.5}], "retry_attempt": 3}, alive=True)
    assert kept.waits[0].seconds == 130.5 and kept.retry_attempt == 3  # what a turn reports is kept
    for seconds in (10**400, float("inf"), float("nan"), -1.0):
        assert waited(seconds) == "0s"  # the one rendering of a wait never breaks either


def test_shipped_text_is_one_line_capped_as_an_agents_own_and_a_time_that_is_no_time_is_none() -> None:
    forged = _shown({"phase": "x\nfix-login   complete   (accepted by alice)\x1b[2J", "kind": "start"})
    assert "\n" not in forged and "\x1b" not in forged
    progress = live_from_json({"progress": "A" * 5_000_000}, alive=True).progress
    assert progress is not None and len(progress) == PROGRESS_CAP  # the cap an agent's own line has at intake
    assert len(live_from_json({"phase": "p" * 100_000}, alive=True).phase or "") < 100
    assert len(live_from_json({"retry_reason": "r" * 100_000}, alive=True).retry_reason or "") < 1000
    for resets_at in ("not a time", "0001-01-01T00:00:00+14:00", "2026-12-01T13:00:00", 5, "9" * 100_000):
        live = live_from_json({"phase": "waiting", "limit_resets_at": resets_at}, alive=True)
        assert live.limit_resets_at is None, resets_at
        assert (
            _shown({"phase": "waiting", "limit_resets_at": resets_at})
            == "working(waiting: usage limit (reset unknown))"
        )
    # Unknown fields and fields of the wrong type are ignored; a turn's own document reads back as it was.
    mine = Live(alive=True, phase="work", kind="ask", retry_attempt=2, limit_resets_at="2026-12-01T13:00:00Z")
    assert live_from_json({**live_to_json(mine), "extra": "x" * 1000, "kind": None}, alive=True) == Live(
        alive=True, phase="work", retry_attempt=2, limit_resets_at="2026-12-01T13:00:00Z"
    )
    assert live_from_json(live_to_json(mine), alive=True) == mine


def _held_elsewhere(project: Any) -> tuple[Project, str]:
    """A working task whose turn a worker on another host (alive) claimed: what a reconcile pass here surveys,
    seen by a host of the team (the shared placement over the same records; the two stores pass one suite)."""
    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="theirs", goal="x"), Actor.HUMAN)
        tx._db.execute("UPDATE tasks SET status = 'working' WHERE id = ?", (task.id,))
        tx.queue_turn(task.id, "cmd-1", {})
        tx.claim_turn(task.id, "cmd-1", "evil:tok", "evil")
        tx.beat_worker("evil:tok", host="evil", pid=1, state=WorkerState.RUNNING, lease_seconds=3600)
    shared = SharedPlacement("postgresql://shared")  # never reached: the records are the SQLite store's
    return Project.open(project.repo, clock=project.clock, placement=shared, store=project.store), str(task.id)


@pytest.mark.parametrize(
    ("doc", "at"),
    [
        ('{"live": {"waits": [{"ref": "a", "seconds": 1' + "0" * 400 + "}]}}", None),
        ('{"live": {"waits": [{"ref": "a", "seconds": Infinity}], "retry_attempt": NaN}}', None),
        ("not a document", None),
        ('["a", "list"]', None),
        ("[" * 100_000, None),
        ("{}", "yesterday"),
        ("{}", "2026-03-01T12:00:00"),
    ],
    ids=["past-a-float", "not-finite", "not-json", "a-list", "too-deep", "no-time", "no-zone"],
)
def test_one_hostile_live_row_never_ends_any_hosts_reconcile_pass(project: Any, doc: str, at: str | None) -> None:
    host, task_id = _held_elsewhere(project)
    with project.store.write() as tx:
        tx.set_live(task_id, "cmd-1", {})
        tx._db.execute("UPDATE live_turns SET doc = ? WHERE task_id = ?", (doc, task_id))
        if at is not None:
            tx._db.execute("UPDATE live_turns SET at = ? WHERE task_id = ?", (at, task_id))
    problems: list[str] = []
    observed: dict[str, Live] = {}
    assert sweep_working(host, problems=problems, observed=observed) == []
    assert problems == []
    assert substate(Status.WORKING, observed[task_id]) in ("waiting on a (0s)", "agent")


def test_a_survey_that_fails_is_a_problem_the_pass_reports_and_no_working_turn_is_judged_meanwhile(
    project: Any,
) -> None:
    host, task_id = _held_elsewhere(project)
    with project.store.write() as tx:  # a lease row no corral writes: every read of the leases fails on it
        tx._db.execute("UPDATE leases SET plan = 'not a plan' WHERE task_id = ?", (task_id,))
    problems: list[str] = []
    assert sweep_working(host, problems=problems, observed={}) == []
    assert any(p.startswith("turns held elsewhere: ") for p in problems), problems
    with project.store.read() as tx:
        # Not knowing who holds it, this host took the turn (no supervisor here) for no lost one of its own.
        assert tx.get_task(task_id).status is Status.WORKING
