"""The ``Store`` conformance suite: what every implementation of ``corral.store.contract.Store`` does.

Plain test functions over two fixtures the implementation's test module provides:

* ``store`` — a fresh, empty store built with the ``clock`` below as its clock;
* ``clock`` — the shared ``FakeClock`` (tests/conftest.py) the store reads its time from.

An implementation's module runs the suite with ``from tests.store.conformance import *``
(only the ``test_*`` functions are exported, so pytest collects each exactly once, in
that module). Nothing here touches SQLite directly.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import (
    AttemptOutcome,
    FailureEvidence,
    FeedbackDelivery,
    PossibleEffects,
    RestingCause,
    Task,
)
from corral.domain.status import Status
from corral.domain.team import LeaseState, WorkerState, lease_lost
from corral.domain.violations import Decision
from corral.errors import CorralError, IllegalTransition, LeaseLost, RefusedError
from corral.store import NewTask, Store, Tx

S = Status


# -- helpers -------------------------------------------------------------------------


def _create(store: Store, ref: str = "fix-login", actor: Actor = Actor.HUMAN, **kw: Any) -> Task:
    task_id = kw.pop("task_id", None)
    with store.write() as tx:
        return tx.insert_task(NewTask(ref=ref, goal=kw.pop("goal", f"Goal of {ref}"), **kw), actor, task_id=task_id)


def _task(store: Store, task_id: str) -> Task:
    with store.read() as tx:
        task = tx.get_task(task_id)
    assert task is not None
    return task


def _changes(store: Store, task_id: str) -> list[tuple[str | None, str, str, str | None]]:
    with store.read() as tx:
        return [
            (c.from_status.value if c.from_status else None, c.to_status.value, c.actor.value, c.reason)
            for c in tx.status_changes(task_id)
        ]


def _working(store: Store, ref: str = "fix-login", *, session: bool = True) -> Task:
    """A task moved backlog → working by the human, with a session when asked."""
    task = _create(store, ref)
    with store.write() as tx:
        if session:
            tx.insert_session(task.id, worktree=f"/wt/{ref}", branch=f"corral/{ref}", base_commit="0" * 40)
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, "start")
    return _task(store, task.id)


def _cause(code: str = "stopped", at: datetime | None = None) -> RestingCause:
    return RestingCause(
        code=code,
        at=at or datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        actor=Actor.HUMAN,
        evidence=FailureEvidence(source="supervisor", code="stopped", phase="work", exit_code=143, signal=15),
        details={"summary": "stopped by human"},
    )


def _evidence() -> FailureEvidence:
    return FailureEvidence(
        source="harness",
        code="transient_overload",
        phase="work",
        category="transient",
        possible_effects=PossibleEffects.PARTIAL,
        exit_code=1,
        errno=None,
        signal=9,
        details={"status": 529, "message": "Overloaded"},
        diagnostic="diagnostics/2026-01-01/abc.json",
    )


_AT = "'2026-01-01T00:00:00.000000Z'"
#: A v3 project's rows (before process owners and local leases): a task, its worker's lease, a supervisor.
V3_ROWS = (
    "INSERT INTO tasks (id, ref, goal, status, created_at, updated_at, last_interaction_at) "
    f"VALUES ('t1', 'fix-login', 'g', 'working', {_AT}, {_AT}, {_AT})",
    "INSERT INTO leases (task_id, command_id, epoch, state, plan, worker_id, host, worktree, job_id, queued_at, "
    "claimed_at, stop_by, unpushed) VALUES ('t1', 'cmd-1', 2, 'claimed', '{\"kind\": \"start\"}', 'w-a', "
    "'build-1', '/w/fix-login', 7, '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:01.000000Z', 'human', 'refused')",
    "INSERT INTO processes (task_id, kind, pid, command_id, started_at) "
    "VALUES ('t1', 'supervisor', 41, 'cmd-1', '2026-01-01T00:00:00.000000Z')",
)


def v3_lease_kept(store: Store) -> None:
    """:data:`V3_ROWS` read back after the migration to 4: every value kept, no owner named, and the lease
    may now be held for a local turn."""
    with store.read() as tx:
        lease = tx.lease("t1")
        (process,) = tx.processes("t1")
    assert lease is not None and lease.as_view() == {
        "command_id": "cmd-1",
        "epoch": 2,
        "state": "claimed",
        "worker_id": "w-a",
        "host": "build-1",
        "worktree": "/w/fix-login",
        "queued_at": "2026-01-01T00:00:00+00:00",
        "claimed_at": "2026-01-01T00:00:01+00:00",
        "stop_by": "human",
        "unpushed": "refused",
        "local": False,
    }
    assert (lease.plan, lease.job_id) == ({"kind": "start"}, 7)
    assert (process.pid, process.command_id, process.owner) == (41, "cmd-1", None)
    with store.write() as tx:
        held = tx.hold_local("t1", "cmd-2", "laptop-a-0f0f0f", "laptop-a")
    assert (held.state, held.epoch) == (LeaseState.LOCAL, 3)


# -- tasks and their first status change ----------------------------------------------


def test_insert_task_writes_backlog_and_the_first_status_change(store: Store) -> None:
    with store.write() as tx:
        task = tx.insert_task(
            NewTask(
                ref="fix-login",
                goal="Fix the login timeout",
                prompt="Keep it under 30 s.",
                harness="claude",
                model="opus",
                target_branch="main",
                protected=("migrations/*", "secrets.env"),
                metadata={"remote_target_branch": "release"},
            ),
            Actor.BUILDER,
        )
        inside = tx.status_changes(task.id)
    assert task.status is S.BACKLOG
    assert (task.ref, task.goal, task.prompt) == ("fix-login", "Fix the login timeout", "Keep it under 30 s.")
    assert (task.harness, task.model, task.target_branch) == ("claude", "opus", "main")
    assert task.protected == ("migrations/*", "secrets.env")
    assert task.metadata == {"remote_target_branch": "release"}
    assert task.parent_id is None and task.session_id is None and task.resting_cause is None
    assert len(inside) == 1
    first = inside[0]
    assert first.from_status is None
    assert first.to_status is S.BACKLOG
    assert first.actor is Actor.BUILDER
    assert first.at == task.created_at
    # committed: a new transaction sees the same
    assert _task(store, task.id) == task
    assert [c.to_status for c in _read(store, lambda tx: tx.status_changes(task.id))] == [S.BACKLOG]


def _read(store: Store, fn: Callable[[Tx], Any]) -> Any:
    with store.read() as tx:
        return fn(tx)


def test_insert_task_with_a_given_id_and_lookups(store: Store) -> None:
    task = _create(store, "docs", task_id="0123456789abcdef")
    assert task.id == "0123456789abcdef"
    with store.read() as tx:
        assert tx.get_task("0123456789abcdef") == task
        assert tx.task_by_ref("docs") == task
        assert tx.get_task("nope") is None
        assert tx.task_by_ref("nope") is None


def test_a_taken_ref_is_refused_with_ref_taken_and_nothing_is_written(store: Store) -> None:
    first = _create(store, "fix-login")
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.insert_task(NewTask(ref="fix-login", goal="again"), Actor.HUMAN)
    assert info.value.code == "ref-taken"
    assert info.value.exit_code == 3
    with store.read() as tx:
        assert [t.id for t in tx.tasks()] == [first.id]
        assert len(tx.status_changes(first.id)) == 1


def test_insert_task_is_rolled_back_with_its_transaction(store: Store) -> None:
    with pytest.raises(RuntimeError), store.write() as tx:
        task = tx.insert_task(NewTask(ref="gone", goal="never"), Actor.HUMAN)
        raise RuntimeError("boom")
    with store.read() as tx:
        assert tx.get_task(task.id) is None
        assert tx.task_by_ref("gone") is None
        assert tx.status_changes(task.id) == []


def test_update_task_changes_only_the_named_fields(store: Store, clock: Any) -> None:
    task = _create(store, "fix-login", prompt="old", harness="claude", protected=("a/*",))
    clock.advance(60)
    with store.write() as tx:
        updated = tx.update_task(task.id, goal="New goal", protected=["b/*", "c/*"], metadata={"k": [1, 2]})
    assert updated.goal == "New goal"
    assert updated.prompt == "old"
    assert updated.harness == "claude"
    assert updated.protected == ("b/*", "c/*")
    assert updated.metadata == {"k": [1, 2]}
    assert updated.updated_at == task.created_at + timedelta(seconds=60)
    assert updated.last_interaction_at == updated.updated_at
    assert updated.status is S.BACKLOG
    clock.advance(60)
    with store.write() as tx:
        quiet = tx.update_task(task.id, model=None, touch=False)
    assert quiet.updated_at == task.created_at + timedelta(seconds=120)
    assert quiet.last_interaction_at == updated.last_interaction_at
    assert _task(store, task.id) == quiet


def test_tasks_filters_by_status_and_children_by_parent(store: Store) -> None:
    parent = _create(store, "parent")
    child = _create(store, "child", parent_id=parent.id)
    working = _working(store, "busy")
    with store.read() as tx:
        assert {t.id for t in tx.tasks()} == {parent.id, child.id, working.id}
        assert {t.id for t in tx.tasks([S.BACKLOG])} == {parent.id, child.id}
        assert [t.id for t in tx.tasks([S.WORKING, S.BLOCKED])] == [working.id]
        assert tx.tasks([S.COMPLETE]) == []
        assert [t.id for t in tx.children(parent.id)] == [child.id]
        assert tx.children(child.id) == []
        assert tx.refs() == ["busy", "child", "parent"]


# -- status changes -------------------------------------------------------------------


def test_set_status_writes_the_status_and_its_change_in_one_transaction(store: Store, clock: Any) -> None:
    task = _create(store)
    clock.advance(5)
    with store.write() as tx:
        change = tx.set_status(task.id, S.WORKING, Actor.HUMAN, "start")
        assert tx.get_task(task.id).status is S.WORKING  # type: ignore[union-attr]
    assert (change.task_id, change.from_status, change.to_status) == (task.id, S.BACKLOG, S.WORKING)
    assert (change.actor, change.reason) == (Actor.HUMAN, "start")
    after = _task(store, task.id)
    assert after.status is S.WORKING
    assert after.updated_at == change.at == task.created_at + timedelta(seconds=5)
    with store.read() as tx:
        stored = tx.status_changes(task.id)
    assert stored[-1] == change
    assert _changes(store, task.id) == [(None, "backlog", "human", "created"), ("backlog", "working", "human", "start")]


def test_an_exception_inside_write_leaves_neither_status_nor_change(store: Store) -> None:
    task = _create(store)
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, "start")
        raise RuntimeError("the operation failed after the status was set")
    assert _task(store, task.id).status is S.BACKLOG
    assert _changes(store, task.id) == [(None, "backlog", "human", "created")]


def test_an_illegal_transition_is_refused_and_writes_nothing(store: Store) -> None:
    task = _create(store)
    with pytest.raises(IllegalTransition) as info, store.write() as tx:
        tx.set_status(task.id, S.COMPLETE, Actor.HUMAN, "accept")
    assert set(info.value.allowed) == {"working", "abandoned"}
    assert _task(store, task.id).status is S.BACKLOG
    assert len(_changes(store, task.id)) == 1


@pytest.mark.parametrize("paused", [S.BLOCKED, S.CONFLICT])
def test_set_status_refuses_the_paused_labels(store: Store, paused: Status) -> None:
    task = _working(store)
    with pytest.raises(CorralError), store.write() as tx:
        tx.set_status(task.id, paused, Actor.SYSTEM, "turn ended")
    assert _task(store, task.id).status is S.WORKING
    assert [c[1] for c in _changes(store, task.id)] == ["backlog", "working"]


def test_zombie_is_set_only_by_the_system(store: Store) -> None:
    task = _working(store)
    for actor in (Actor.HUMAN, Actor.BUILDER, Actor.AGENT, Actor.SUPERVISOR):
        with pytest.raises(IllegalTransition), store.write() as tx:
            tx.set_status(task.id, S.ZOMBIE, actor)
    with store.write() as tx:
        tx.set_status(task.id, S.ZOMBIE, Actor.SYSTEM, "work is on the target")
        tx.set_status(task.id, S.COMPLETE, Actor.SYSTEM, "merged-branch sweep")
    assert _changes(store, task.id)[-2:] == [
        ("working", "zombie", "system", "work is on the target"),
        ("zombie", "complete", "system", "merged-branch sweep"),
    ]


def test_the_same_status_again_is_a_no_op_that_writes_no_change(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        assert tx.set_status(task.id, S.WORKING, Actor.HUMAN, "again") is None
        tx.set_status(task.id, S.ZOMBIE, Actor.SYSTEM, "work is on the target")
        assert tx.set_status(task.id, S.ZOMBIE, Actor.SYSTEM, "again") is None  # any non-terminal → zombie
    assert [c[:2] for c in _changes(store, task.id)] == [
        (None, "backlog"),
        ("backlog", "working"),
        ("working", "zombie"),
    ]
    with pytest.raises(IllegalTransition), store.write() as tx:
        tx.set_status(task.id, S.ZOMBIE, Actor.HUMAN)  # zombie stays the system's, even as a no-op


def test_expected_from_is_a_compare_and_set(store: Store) -> None:
    task = _create(store)
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, expected_from=S.BLOCKED)
    assert info.value.code == "status-changed"
    assert info.value.exit_code == 3
    assert _task(store, task.id).status is S.BACKLOG
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, expected_from=[S.BLOCKED, S.INTERRUPTED])
    assert info.value.code == "status-changed"
    with store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, expected_from=[S.BLOCKED, S.BACKLOG])
    assert _task(store, task.id).status is S.WORKING
    with pytest.raises(RefusedError) as info, store.write() as tx:
        tx.park(task.id, Actor.SYSTEM, expected_from=S.INTERRUPTED)
    assert info.value.code == "status-changed"
    assert _task(store, task.id).status is S.WORKING
    assert len(_changes(store, task.id)) == 2


def test_one_timestamp_per_transaction(store: Store, clock: Any) -> None:
    task = _create(store)
    with store.write() as tx:
        first = tx.set_status(task.id, S.WORKING, Actor.HUMAN)
        clock.advance(30)
        turn = tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go")
        note = tx.add_comment(task.id, Actor.HUMAN, "hi")
    assert first.at == turn.started_at == note.at
    assert clock.now - first.at == timedelta(seconds=30)  # the clock moved; the transaction's "when" did not


def test_exchanges_before_counts_what_the_timeline_numbers(store: Store) -> None:
    """A message and its answer are one exchange; a turn answering no message (a sync, a lost turn named
    by its log turn only, a fault) counts as its own, where the lost one joins the turn it ended."""
    from corral.domain import exchanges

    task = _create(store)
    with store.write() as tx:
        tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="c1")
        tx.add_turn(task.id, role=Role.AGENT, kind="start", content="done", command_id="c1")
        tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="sync", content="merged")
        tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="unblock", content="more", command_id="c2")
        tx.add_turn(task.id, role=Role.AGENT, kind="error", content="lost", details={"log_turn": 4})
        tx.add_turn(task.id, role=Role.AGENT, kind="error", content="a fault")
    turns = _read(store, lambda tx: tx.turns(task.id))
    whole = exchanges.number(turns)
    assert list(whole.values()) == [1, 1, 2, 3, 3, 4]
    for t in turns:
        before = _read(store, lambda tx, s=t.sequence: tx.exchanges_before(task.id, s))
        page = [p for p in turns if p.sequence >= t.sequence]
        assert exchanges.number(page, before=before) == {p.sequence: whole[p.sequence] for p in page}, t.sequence


# -- park: the one function that derives blocked or conflict ------------------------------


def test_park_without_pending_violations_is_blocked(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        change = tx.park(task.id, Actor.SYSTEM, "turn ended")
    assert change is not None
    assert (change.from_status, change.to_status, change.actor) == (S.WORKING, S.BLOCKED, Actor.SYSTEM)
    assert _task(store, task.id).status is S.BLOCKED


def test_park_with_pending_violations_is_conflict_and_back_to_blocked_once_decided(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        assert tx.record_violations(task.id, ["migrations/001.sql"]) == ["migrations/001.sql"]
        change = tx.park(task.id, Actor.SYSTEM, "turn ended")
    assert change is not None and change.to_status is S.CONFLICT
    assert _task(store, task.id).status is S.CONFLICT
    with store.write() as tx:
        tx.decide_violations(task.id, {"migrations/001.sql": Decision.APPROVED}, Actor.HUMAN)
        again = tx.park(task.id, Actor.HUMAN, "decided")
    assert again is not None
    assert (again.from_status, again.to_status) == (S.CONFLICT, S.BLOCKED)
    assert _changes(store, task.id)[-2:] == [
        ("working", "conflict", "system", "turn ended"),
        ("conflict", "blocked", "human", "decided"),
    ]


def test_park_rederives_blocked_into_conflict(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM)
        tx.record_violations(task.id, ["secrets.env"])
    assert _task(store, task.id).status is S.BLOCKED  # recording alone does not relabel
    with store.write() as tx:
        change = tx.park(task.id, Actor.SYSTEM, "doctor")
    assert change is not None and (change.from_status, change.to_status) == (S.BLOCKED, S.CONFLICT)


def test_park_on_the_derived_label_changes_nothing(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM)
    before = _changes(store, task.id)
    with store.write() as tx:
        assert tx.park(task.id, Actor.SYSTEM, "again") is None
    assert _changes(store, task.id) == before
    assert _task(store, task.id).status is S.BLOCKED


def test_park_follows_the_transition_table(store: Store) -> None:
    task = _create(store)
    with pytest.raises(IllegalTransition), store.write() as tx:
        tx.park(task.id, Actor.SYSTEM)
    assert _task(store, task.id).status is S.BACKLOG
    assert len(_changes(store, task.id)) == 1


# -- violations: sticky decisions ----------------------------------------------------------


def _decisions(store: Store, task_id: str) -> dict[str, str]:
    with store.read() as tx:
        return {v.path: v.decision.value for v in tx.violations(task_id)}


def test_record_violations_returns_the_pending_paths(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        pending = tx.record_violations(task.id, ["b.sql", "a.sql", "b.sql"])
        assert sorted(tx.pending_paths(task.id)) == ["a.sql", "b.sql"]
    assert sorted(pending) == ["a.sql", "b.sql"]
    with store.read() as tx:
        records = tx.violations(task.id)
    assert sorted(v.path for v in records) == ["a.sql", "b.sql"]
    for v in records:
        assert v.decision is Decision.PENDING
        assert v.decided_by is None and v.decided_at is None
        assert v.session_id == task.session_id and v.task_id == task.id


def test_record_violations_needs_a_session(store: Store) -> None:
    task = _working(store, session=False)
    with pytest.raises(CorralError), store.write() as tx:
        tx.record_violations(task.id, ["a.sql"])


def test_decisions_change_only_pending_files(store: Store, clock: Any) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.record_violations(task.id, ["a.sql", "b.sql"])
    clock.advance(10)
    with store.write() as tx:
        tx.decide_violations(task.id, {"a.sql": Decision.APPROVED}, Actor.BUILDER)
    assert _decisions(store, task.id) == {"a.sql": "approved", "b.sql": "pending"}
    with store.read() as tx:
        a = next(v for v in tx.violations(task.id) if v.path == "a.sql")
        assert tx.pending_paths(task.id) == ["b.sql"]
    assert a.decided_by is Actor.BUILDER
    assert a.decided_at == clock.now
    # re-naming a decided file is accepted and changes nothing; the pending one is decided
    with store.write() as tx:
        tx.decide_violations(task.id, {"a.sql": Decision.REVERTED, "b.sql": Decision.REVERTED}, Actor.HUMAN)
    assert _decisions(store, task.id) == {"a.sql": "approved", "b.sql": "reverted"}
    with store.read() as tx:
        a2 = next(v for v in tx.violations(task.id) if v.path == "a.sql")
    assert a2.decided_by is Actor.BUILDER


def test_a_decision_cannot_be_pending(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.record_violations(task.id, ["a.sql"])
    with pytest.raises(ValueError), store.write() as tx:
        tx.decide_violations(task.id, {"a.sql": Decision.PENDING}, Actor.HUMAN)


def test_a_changed_again_approved_file_stays_approved_and_a_reverted_one_is_pending_again(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.record_violations(task.id, ["approved.sql", "reverted.sql"])
        tx.decide_violations(
            task.id, {"approved.sql": Decision.APPROVED, "reverted.sql": Decision.REVERTED}, Actor.HUMAN
        )
    with store.write() as tx:
        pending = tx.record_violations(task.id, ["approved.sql", "reverted.sql", "new.sql"])
    assert sorted(pending) == ["new.sql", "reverted.sql"]
    assert _decisions(store, task.id) == {"approved.sql": "approved", "reverted.sql": "pending", "new.sql": "pending"}
    with store.read() as tx:
        again = next(v for v in tx.violations(task.id) if v.path == "reverted.sql")
    assert again.decided_by is None and again.decided_at is None


def test_violations_belong_to_the_current_session(store: Store) -> None:
    task = _working(store)
    old_session = task.session_id
    assert old_session is not None
    with store.write() as tx:
        tx.record_violations(task.id, ["a.sql"])
        new = tx.insert_session(task.id)
    with store.read() as tx:
        assert tx.violations(task.id) == []
        assert tx.pending_paths(task.id) == []
        assert [v.path for v in tx.violations(task.id, session_id=old_session)] == ["a.sql"]
    with store.write() as tx:
        # the park of the new session derives blocked: the old session's pending file is not its concern
        change = tx.park(task.id, Actor.SYSTEM)
    assert change is not None and change.to_status is S.BLOCKED
    assert _task(store, task.id).session_id == new.id


# -- resting cause ---------------------------------------------------------------------------


def test_park_writes_the_resting_cause_with_the_status_change(store: Store) -> None:
    task = _working(store)
    cause = _cause()
    with store.write() as tx:
        tx.park(task.id, Actor.HUMAN, "stopped by human", resting_cause=cause)
    parked = _task(store, task.id)
    assert parked.status is S.BLOCKED
    assert parked.resting_cause == cause


def test_a_rolled_back_park_leaves_no_cause(store: Store) -> None:
    task = _working(store)
    with pytest.raises(RuntimeError), store.write() as tx:
        tx.park(task.id, Actor.HUMAN, resting_cause=_cause())
        raise RuntimeError("boom")
    after = _task(store, task.id)
    assert after.status is S.WORKING
    assert after.resting_cause is None


def test_park_on_the_derived_label_still_records_a_new_cause(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM)
        assert tx.park(task.id, Actor.SYSTEM, resting_cause=_cause("internal-fault")) is None
    cause = _task(store, task.id).resting_cause
    assert cause is not None and cause.code == "internal-fault"


def test_set_status_keeps_the_cause_while_the_task_rests_and_clears_it_otherwise(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM, resting_cause=_cause("stopped"))
        tx.set_status(task.id, S.SUBMITTED, Actor.HUMAN, "submit")  # UNSET, still resting: kept
    kept = _task(store, task.id)
    assert kept.status is S.SUBMITTED
    assert kept.resting_cause is not None and kept.resting_cause.code == "stopped"
    with store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, "unblock")  # UNSET, no longer resting: cleared
    assert _task(store, task.id).resting_cause is None


def test_set_status_with_an_explicit_cause_writes_it_and_none_clears_it(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.set_status(task.id, S.INTERRUPTED, Actor.SYSTEM, "crashed", resting_cause=_cause("internal-fault"))
    interrupted = _task(store, task.id)
    assert interrupted.resting_cause is not None and interrupted.resting_cause.code == "internal-fault"
    with store.write() as tx:
        tx.set_status(task.id, S.PAIRING, Actor.HUMAN, "pair")
        tx.park(task.id, Actor.HUMAN, "pair ended", resting_cause=_cause("stopped"))
        tx.set_status(task.id, S.SUBMITTED, Actor.HUMAN, "submit", resting_cause=None)
    assert _task(store, task.id).resting_cause is None


def test_set_resting_cause_on_its_own(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        tx.set_resting_cause(task.id, _cause("prepare-failed"))
    stored = _task(store, task.id)
    assert stored.status is S.BACKLOG
    assert stored.resting_cause is not None and stored.resting_cause.code == "prepare-failed"
    assert stored.resting_cause.evidence == _cause().evidence
    with store.write() as tx:
        tx.set_resting_cause(task.id, None)
    assert _task(store, task.id).resting_cause is None


# -- sessions ------------------------------------------------------------------------------


def test_insert_session_becomes_current_and_update_session_round_trips(store: Store, clock: Any) -> None:
    task = _create(store)
    with store.write() as tx:
        first = tx.insert_session(task.id, worktree="/wt/a", branch="corral/fix-login", base_commit="a" * 40)
    assert _task(store, task.id).session_id == first.id
    assert (first.task_id, first.worktree, first.branch, first.base_commit) == (
        task.id,
        "/wt/a",
        "corral/fix-login",
        "a" * 40,
    )
    assert first.consecutive_interruptions == 0 and first.auto_resumed is False
    assert first.harness_session_id is None and first.ended_at is None and first.interrupt_at is None
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    with store.write() as tx:
        updated = tx.update_session(
            first.id,
            git_start_sha="b" * 40,
            harness_session_id="sess-123",
            interrupt_reason="agent died",
            interrupt_exit_code=137,
            interrupt_at=when,
            interrupt_logs="last lines\nof output",
            consecutive_interruptions=2,
            auto_resumed=True,
            outcome="interrupted",
        )
    assert updated.git_start_sha == "b" * 40
    assert updated.harness_session_id == "sess-123"
    assert (updated.interrupt_reason, updated.interrupt_exit_code) == ("agent died", 137)
    assert updated.interrupt_at == when
    assert updated.interrupt_logs == "last lines\nof output"
    assert updated.consecutive_interruptions == 2 and updated.auto_resumed is True
    assert updated.outcome == "interrupted"
    assert updated.worktree == "/wt/a"  # untouched fields stay
    with store.write() as tx:
        cleared = tx.update_session(first.id, interrupt_reason=None, auto_resumed=False, ended_at=when)
    assert cleared.interrupt_reason is None and cleared.auto_resumed is False and cleared.ended_at == when
    assert cleared.interrupt_exit_code == 137
    clock.advance(1)
    with store.write() as tx:
        second = tx.insert_session(task.id)
    assert _task(store, task.id).session_id == second.id
    with store.read() as tx:
        assert [s.id for s in tx.sessions(task.id)] == [first.id, second.id]
        assert tx.get_session(first.id) == cleared
        assert tx.get_session("nope") is None


# -- turns, feedback and attempts -----------------------------------------------------------


def test_turn_sequences_count_per_task(store: Store) -> None:
    a = _create(store, "task-a")
    b = _create(store, "task-b")
    with store.write() as tx:
        t1 = tx.add_turn(a.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go")
        t2 = tx.add_turn(a.id, role=Role.AGENT, kind="start", content="done")
        u1 = tx.add_turn(b.id, role=Role.HUMAN, actor=Actor.BUILDER, kind="start", content="go b")
    with store.write() as tx:
        t3 = tx.add_turn(a.id, role=Role.HUMAN, actor=Actor.SUPERVISOR, kind="unblock", content="more")
    assert [t1.sequence, t2.sequence, t3.sequence] == [1, 2, 3]
    assert u1.sequence == 1
    with store.read() as tx:
        turns = tx.turns(a.id)
        assert tx.get_turn(t2.id) == t2
    assert [t.id for t in turns] == [t1.id, t2.id, t3.id]
    assert [(t.role, t.actor, t.kind, t.content) for t in turns] == [
        (Role.HUMAN, Actor.HUMAN, "start", "go"),
        (Role.AGENT, None, "start", "done"),
        (Role.HUMAN, Actor.SUPERVISOR, "unblock", "more"),
    ]


def test_current_command_ids_agree_with_current_command_for_many_tasks(store: Store) -> None:
    a, b, c = _create(store, "cmd-a"), _create(store, "cmd-b"), _create(store, "cmd-c")
    with store.write() as tx:
        tx.add_turn(a.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="a1")
        tx.add_turn(a.id, role=Role.AGENT, kind="start", content="done", command_id="a1")
        tx.add_turn(a.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="unblock", content="more", command_id="a2")
        tx.add_turn(a.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="comment", content="a note")  # no command
        tx.add_turn(b.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="b1")
    with store.read() as tx:
        ids = tx.current_command_ids([a.id, b.id, c.id, a.id, "no-such-task"])
        assert ids == {a.id: "a2", b.id: "b1"}  # c has no command, an unknown id is left out
        for task in (a, b):
            current = tx.current_command(task.id)
            assert current is not None and current.command_id == ids[task.id]
        assert tx.current_command(c.id) is None
        assert tx.current_command_ids([]) == {}


def test_task_heads_are_the_tasks_in_order_with_a_working_tasks_current_command(store: Store, clock: Any) -> None:
    running = _working(store, "running")
    clock.advance(1)
    resting = _working(store, "resting")
    clock.advance(1)
    _working(store, "unlaunched")  # working, no command recorded yet
    clock.advance(1)
    _create(store, "waiting")  # backlog: not asked for
    with store.write() as tx:
        tx.add_turn(running.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="r1")
        tx.add_turn(running.id, role=Role.AGENT, kind="start", content="done", command_id="r1")
        tx.add_turn(running.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="unblock", content="more", command_id="r2")
        tx.add_turn(resting.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="s1")
        tx.set_status(resting.id, S.INTERRUPTED, Actor.SYSTEM, "crashed", resting_cause=_cause("internal-fault"))
    with store.read() as tx:
        heads = tx.task_heads([S.WORKING, S.INTERRUPTED])
        tasks = tx.tasks([S.WORKING, S.INTERRUPTED])
        current = tx.current_command_ids([running.id])
        assert tx.task_heads([]) == [] and tx.task_heads([S.COMPLETE]) == []
    assert [(h.id, h.ref, h.status) for h in heads] == [(t.id, t.ref, t.status) for t in tasks]
    # the current command of a working task only (an interrupted one's is not read)
    assert [(h.ref, h.status, h.command_id) for h in heads] == [
        ("running", S.WORKING, current[running.id]),
        ("resting", S.INTERRUPTED, None),
        ("unlaunched", S.WORKING, None),
    ]
    assert current[running.id] == "r2"


def test_a_human_role_turn_needs_an_actor_and_an_agent_role_turn_refuses_one(store: Store) -> None:
    task = _create(store)
    with pytest.raises(ValueError), store.write() as tx:
        tx.add_turn(task.id, role=Role.HUMAN, kind="unblock", content="feedback")
    with pytest.raises(ValueError), store.write() as tx:
        tx.add_turn(task.id, role=Role.AGENT, actor=Actor.AGENT, kind="start", content="reply")
    with store.read() as tx:
        assert tx.turns(task.id) == []


def test_turn_fields_round_trip(store: Store) -> None:
    task = _create(store)
    start = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    end = start + timedelta(minutes=3)
    with store.write() as tx:
        session = tx.insert_session(task.id)
        turn = tx.add_turn(
            task.id,
            role=Role.AGENT,
            kind="start",
            content="I changed the timeout.\n\nDone.",
            session_id=session.id,
            delivered=["t-1", "t-2"],
            started_at=start,
            ended_at=end,
            usage={"input_tokens": 10, "output_tokens": 20},
            failure=_evidence(),
            details={"result": "ok"},
        )
    with store.read() as tx:
        again = tx.get_turn(turn.id)
    assert again == turn
    assert again is not None
    assert again.session_id == session.id
    assert again.delivered == ("t-1", "t-2")
    assert (again.started_at, again.ended_at) == (start, end)
    assert again.usage == {"input_tokens": 10, "output_tokens": 20}
    assert again.failure == _evidence()
    assert again.details == {"result": "ok"}
    assert again.feedback_delivery is FeedbackDelivery.NONE


def test_pending_feedback_and_consuming_exactly_the_named_turns(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        s1 = tx.insert_session(task.id)
        f1, f2, f3 = (
            tx.add_turn(
                task.id,
                role=Role.HUMAN,
                actor=Actor.HUMAN,
                kind="unblock",
                content=f"feedback {n}",
                session_id=s1.id,
                feedback_delivery=FeedbackDelivery.PENDING,
            )
            for n in (1, 2, 3)
        )
        plain = tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="ask", content="?", session_id=s1.id)
        s2 = tx.insert_session(task.id)
        other = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=Actor.BUILDER,
            kind="unblock",
            content="other session",
            session_id=s2.id,
            feedback_delivery=FeedbackDelivery.PENDING,
        )
    with store.read() as tx:
        assert [t.id for t in tx.pending_feedback(s1.id)] == [f1.id, f2.id, f3.id]
        assert [t.id for t in tx.pending_feedback(s2.id)] == [other.id]
    with store.write() as tx:
        assert tx.mark_feedback_consumed([f1.id, f3.id]) == 2
    with store.read() as tx:
        assert [t.id for t in tx.pending_feedback(s1.id)] == [f2.id]
        states = {t.id: t.feedback_delivery for t in tx.turns(task.id)}
    assert states == {
        f1.id: FeedbackDelivery.CONSUMED,
        f2.id: FeedbackDelivery.PENDING,
        f3.id: FeedbackDelivery.CONSUMED,
        plain.id: FeedbackDelivery.NONE,
        other.id: FeedbackDelivery.PENDING,
    }
    with store.write() as tx:
        # already consumed, or never feedback: nothing changes
        assert tx.mark_feedback_consumed([f1.id, plain.id, "no-such-turn"]) == 0
        assert tx.mark_feedback_consumed([]) == 0
    with store.read() as tx:
        assert tx.get_turn(plain.id).feedback_delivery is FeedbackDelivery.NONE  # type: ignore[union-attr]


def test_attempts_round_trip_with_their_failure_evidence(store: Store) -> None:
    task = _create(store)
    t0 = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    with store.write() as tx:
        turn = tx.add_turn(task.id, role=Role.AGENT, kind="start", content="")
        a1 = tx.add_attempt(
            turn.id,
            number=1,
            started_at=t0,
            ended_at=t0 + timedelta(seconds=9),
            outcome=AttemptOutcome.FAILED,
            failure_class="transient_overload",
            failure=_evidence(),
        )
        a2 = tx.add_attempt(
            turn.id,
            number=2,
            started_at=t0 + timedelta(seconds=24),
            ended_at=None,
            outcome=AttemptOutcome.INDETERMINATE,
        )
    with store.read() as tx:
        via_get = tx.get_turn(turn.id)
        via_list = tx.turns(task.id)
    assert via_get is not None
    assert via_get.attempts == (a1, a2)
    assert via_list[0].attempts == (a1, a2)
    got = via_get.attempts[0]
    assert got.failure == _evidence()
    assert got.failure is not None and got.failure.possible_effects is PossibleEffects.PARTIAL
    assert (got.failure.exit_code, got.failure.errno, got.failure.signal) == (1, None, 9)
    assert got.failure_class == "transient_overload"
    assert via_get.attempts[1].failure is None and via_get.attempts[1].ended_at is None


def test_the_latest_turns_come_oldest_first_with_their_attempts_and_the_count_is_all_of_them(store: Store) -> None:
    task = _create(store)
    other = _create(store, "other")
    t0 = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    with store.write() as tx:
        made = []
        for n in range(7):
            turn = tx.add_turn(task.id, role=Role.AGENT, kind="unblock", content=f"turn {n + 1}")
            for number in (1, 2) if n % 2 else (1,):
                tx.add_attempt(
                    turn.id,
                    number=number,
                    started_at=t0 + timedelta(minutes=n, seconds=number),
                    ended_at=None,
                    outcome=AttemptOutcome.SUCCEEDED,
                )
            made.append(turn.id)
        tx.add_turn(other.id, role=Role.AGENT, kind="start", content="elsewhere")
    with store.read() as tx:
        every = tx.turns(task.id)
        latest = tx.turns(task.id, last=3)
        assert tx.turns(task.id, last=1) == every[-1:]
        assert tx.turns(task.id, last=7) == every
        assert tx.turns(task.id, last=50) == every  # more than there are: all of them
        assert tx.turns(task.id, last=0) == []
        assert (tx.turn_count(task.id), tx.turn_count(other.id), tx.turn_count("no-such-task")) == (7, 1, 0)
    assert [t.id for t in every] == made
    assert latest == every[-3:]
    assert [t.sequence for t in latest] == [5, 6, 7]
    assert [len(t.attempts) for t in latest] == [1, 2, 1]
    assert [a.number for a in latest[1].attempts] == [1, 2]


def test_status_changes_since_a_time_are_the_ones_at_or_after_it(store: Store, clock: Any) -> None:
    task = _create(store)
    clock.advance(60)
    with store.write() as tx:
        tx.set_status(task.id, S.WORKING, Actor.HUMAN, "start")
    middle = clock.now
    clock.advance(60)
    with store.write() as tx:
        tx.park(task.id, Actor.SYSTEM, "turn ended")
    with store.read() as tx:
        every = tx.status_changes(task.id)
        assert tx.status_changes(task.id, since=middle) == every[1:]
        assert tx.status_changes(task.id, since=middle + timedelta(microseconds=1)) == every[2:]
        assert tx.status_changes(task.id, since=every[0].at) == every
        assert tx.status_changes(task.id, since=clock.now + timedelta(days=1)) == []
    assert [c.reason for c in every] == ["created", "start", "turn ended"]


def test_changes_since_are_every_tasks_changes_at_or_after_it_oldest_first(store: Store, clock: Any) -> None:
    a = _create(store, "task-a")
    clock.advance(60)
    since = clock.now
    b = _create(store, "task-b")
    clock.advance(60)
    with store.write() as tx:
        tx.set_status(a.id, S.WORKING, Actor.HUMAN, "start")
    with store.read() as tx:
        got = [(c.task_id, c.to_status, c.reason) for c in tx.changes_since(since)]
        assert tx.changes_since(clock.now + timedelta(seconds=1)) == []
    assert got == [(b.id, S.BACKLOG, "created"), (a.id, S.WORKING, "start")]


def test_recent_tasks_are_the_last_changed_with_those_statuses_newest_first(store: Store, clock: Any) -> None:
    made = []
    for n in range(5):
        made.append(_create(store, f"task-{n}"))
        clock.advance(1)
    with store.write() as tx:
        tx.set_status(made[1].id, S.ABANDONED, Actor.HUMAN, "close")
    clock.advance(1)
    with store.write() as tx:
        tx.set_status(made[3].id, S.ABANDONED, Actor.HUMAN, "close")
    with store.read() as tx:
        assert [t.ref for t in tx.recent_tasks([S.ABANDONED], 10)] == ["task-3", "task-1"]
        assert [t.ref for t in tx.recent_tasks([S.ABANDONED], 1)] == ["task-3"]
        assert [t.ref for t in tx.recent_tasks([S.BACKLOG, S.ABANDONED], 2)] == ["task-3", "task-1"]
        assert [t.ref for t in tx.recent_tasks([S.BACKLOG], 2)] == ["task-4", "task-2"]
        assert tx.recent_tasks([S.COMPLETE], 10) == []


def test_sessions_and_refs_by_id_read_a_whole_list_at_once(store: Store) -> None:
    # More ids than one query's parameter list should hold: the reads batch them.
    a = _create(store, "task-a")
    with store.write() as tx:
        sessions = [tx.insert_session(a.id, worktree=f"/wt/{n}") for n in range(1_100)]
        tasks = [tx.insert_task(NewTask(ref=f"task-{n}", goal="g", parent_id=a.id), Actor.HUMAN) for n in range(1_100)]
    asked = [s.id for s in sessions] + ["no-such-session", sessions[0].id]
    with store.read() as tx:
        found = tx.sessions_by_id(asked)
        assert found[sessions[700].id] == tx.get_session(sessions[700].id)
        refs = tx.refs_by_id([t.id for t in tasks] + [a.id, "no-such-task", a.id])
        assert tx.sessions_by_id([]) == {} and tx.refs_by_id([]) == {}
    assert set(found) == {s.id for s in sessions}
    assert found[sessions[3].id].worktree == "/wt/3"
    assert refs == {a.id: "task-a"} | {t.id: f"task-{n}" for n, t in enumerate(tasks)}


def test_interruption_counts_are_each_sessions_consecutive_interruptions(store: Store) -> None:
    # What a list reads of a session, for a whole list at once (more ids than one query holds).
    a = _create(store, "task-a")
    with store.write() as tx:
        sessions = [tx.insert_session(a.id) for _ in range(1_100)]
        for n, s in enumerate(sessions[:3]):
            tx.update_session(s.id, consecutive_interruptions=n + 1)
    asked = [s.id for s in sessions] + ["no-such-session", sessions[0].id]
    with store.read() as tx:
        counts = tx.interruption_counts(asked)
        whole = tx.sessions_by_id(asked)
        assert tx.interruption_counts([]) == {}
    assert counts == {sid: s.consecutive_interruptions for sid, s in whole.items()}
    assert [counts[s.id] for s in sessions[:4]] == [1, 2, 3, 0]


# -- notes --------------------------------------------------------------------------------------


def test_comments_and_journal_append_in_order(store: Store, clock: Any) -> None:
    task = _create(store)
    with store.write() as tx:
        c1 = tx.add_comment(task.id, Actor.HUMAN, "first")
        j1 = tx.add_journal_entry(task.id, Actor.BUILDER, "decided A")
        c2 = tx.add_comment(task.id, Actor.BUILDER, "second, same instant")
    clock.advance(1)
    with store.write() as tx:
        c3 = tx.add_comment(task.id, Actor.AGENT, "third")
        j2 = tx.add_journal_entry(task.id, Actor.HUMAN, "deferred B")
    with store.read() as tx:
        comments = tx.comments(task.id)
        journal = tx.journal(task.id)
    assert comments == [c1, c2, c3]
    assert [(n.actor, n.body) for n in comments] == [
        (Actor.HUMAN, "first"),
        (Actor.BUILDER, "second, same instant"),
        (Actor.AGENT, "third"),
    ]
    assert journal == [j1, j2]
    assert all(n.task_id == task.id for n in comments + journal)


def test_notes_keep_text_exactly(store: Store) -> None:
    task = _create(store)
    body = "line one\n\tindented — ünïcödé \\u0000 'quotes' \"double\" %_ wildcards"
    with store.write() as tx:
        tx.add_comment(task.id, Actor.HUMAN, body)
    with store.read() as tx:
        assert tx.comments(task.id)[0].body == body


# -- finding tasks ---------------------------------------------------------------------------


def test_match_tasks_by_prefix_of_ref_or_id(store: Store) -> None:
    login = _create(store, "fix-login", task_id="aaaa000000000001")
    logout = _create(store, "fix-logout", task_id="bbbb000000000002")
    docs = _create(store, "docs", task_id="fix0000000000003")  # an id that looks like a ref prefix
    with store.read() as tx:
        assert {t.id for t in tx.match_tasks("fix-log")} == {login.id, logout.id}
        assert [t.id for t in tx.match_tasks("fix-logi")] == [login.id]
        assert [t.id for t in tx.match_tasks("bbbb")] == [logout.id]
        assert {t.id for t in tx.match_tasks("fix")} == {login.id, logout.id, docs.id}
        assert [t.id for t in tx.match_tasks("docs")] == [docs.id]
        assert tx.match_tasks("zzz") == []
        assert tx.match_tasks("ix-log") == []  # a prefix, not a substring


@pytest.mark.parametrize("pattern", ["%", "_", "fix%", "fix_login", "%login", "f_x", "_ix", "\\", "fix\\"])
def test_match_tasks_takes_like_wildcards_literally(store: Store, pattern: str) -> None:
    _create(store, "fix-login", task_id="aaaa000000000001")
    _create(store, "fixalogin", task_id="aaaa000000000002")
    with store.read() as tx:
        assert tx.match_tasks(pattern) == []


# -- a read transaction refuses writes ----------------------------------------------------------

_WRITES: dict[str, Callable[[Tx, Task], Any]] = {
    "insert_task": lambda tx, t: tx.insert_task(NewTask(ref="other", goal="g"), Actor.HUMAN),
    "update_task": lambda tx, t: tx.update_task(t.id, goal="changed"),
    "set_status": lambda tx, t: tx.set_status(t.id, S.WORKING, Actor.HUMAN),
    "park": lambda tx, t: tx.park(t.id, Actor.SYSTEM),
    "set_resting_cause": lambda tx, t: tx.set_resting_cause(t.id, _cause()),
    "insert_session": lambda tx, t: tx.insert_session(t.id),
    "update_session": lambda tx, t: tx.update_session(t.session_id or "", outcome="x"),
    "add_turn": lambda tx, t: tx.add_turn(t.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="ask", content="?"),
    "mark_feedback_consumed": lambda tx, t: tx.mark_feedback_consumed(["x"]),
    "add_attempt": lambda tx, t: tx.add_attempt(
        "x", number=1, started_at=datetime(2026, 1, 1, tzinfo=UTC), ended_at=None, outcome=AttemptOutcome.FAILED
    ),
    "record_violations": lambda tx, t: tx.record_violations(t.id, ["a.sql"]),
    "decide_violations": lambda tx, t: tx.decide_violations(t.id, {"a.sql": Decision.APPROVED}, Actor.HUMAN),
    "add_comment": lambda tx, t: tx.add_comment(t.id, Actor.HUMAN, "note"),
    "add_journal_entry": lambda tx, t: tx.add_journal_entry(t.id, Actor.HUMAN, "entry"),
}


@pytest.mark.parametrize("name", sorted(_WRITES))
def test_a_read_transaction_refuses_writes(store: Store, name: str) -> None:
    task = _working(store)  # working with a session: park would move it, record_violations has a session
    with store.write() as tx:
        tx.record_violations(task.id, ["a.sql"])
    with store.read() as tx:
        before = (tx.get_task(task.id), tx.status_changes(task.id), tx.violations(task.id), tx.turns(task.id))
    with pytest.raises(CorralError), store.read() as tx:
        _WRITES[name](tx, task)
    with store.read() as tx:
        after = (tx.get_task(task.id), tx.status_changes(task.id), tx.violations(task.id), tx.turns(task.id))
        assert tx.task_by_ref("other") is None
        assert tx.comments(task.id) == [] and tx.journal(task.id) == []
    assert after == before


# -- workers and leases (docs/workers.md) --------------------------------------------


def test_a_queued_turn_is_claimed_once_under_a_new_epoch(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        queued = tx.queue_turn(task.id, "cmd-1", {"kind": "start", "body": "go", "target": "main"})
    assert (queued.state, queued.epoch, queued.worker_id) == (LeaseState.QUEUED, 1, None)
    assert queued.plan == {"kind": "start", "body": "go", "target": "main"}
    with store.write() as tx:
        first = tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")
    with store.write() as tx:
        second = tx.claim_turn(task.id, "cmd-1", "w-b", "host-b")
    assert first is not None and (first.epoch, first.worker_id, first.host) == (2, "w-a", "host-a")
    assert second is None  # claimed already: the second worker gets nothing
    with store.write() as tx:
        assert tx.claim_turn(task.id, "cmd-other", "w-b", "host-b") is None  # not the queued command
        assert tx.check_fence(task.id, 2).worker_id == "w-a"


def test_a_fenced_off_epoch_can_never_write_again(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        lease = tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")
    assert lease is not None
    with store.write() as tx:
        assert tx.fence_off(task.id, lease.epoch) is True
        assert tx.fence_off(task.id, lease.epoch) is False  # someone did it first: nothing moves twice
    with store.write() as tx, pytest.raises(LeaseLost) as err:
        tx.check_fence(task.id, lease.epoch)
    assert err.value.code == "lease-lost"
    with store.write() as tx:
        assert tx.release_turn(task.id, lease.epoch) is False
        requeued = tx.queue_turn(task.id, "cmd-2", {})
    # The epoch only grows, across turns too: the old worker's epoch matches nothing queued later.
    assert requeued.epoch > lease.epoch + 1
    with store.write() as tx:
        again = tx.claim_turn(task.id, "cmd-2", "w-b", "host-b")
        assert again is not None
        with pytest.raises(LeaseLost):
            tx.check_fence(task.id, lease.epoch)
        tx.set_lease_worktree(task.id, again.epoch, "/w/b/fix-login")
        assert tx.release_turn(task.id, again.epoch) is True
    with store.read() as tx:
        done = tx.lease(task.id)
        assert done is not None and done.state is LeaseState.RELEASED and done.worktree == "/w/b/fix-login"
        assert [lease.task_id for lease in tx.leases([LeaseState.RELEASED])] == [task.id]
        assert tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED]) == []


def test_a_stop_request_and_an_unpushed_end_ride_on_the_claim_of_their_epoch(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        assert tx.ask_stop(task.id, 1, "human") is False  # queued: no worker holds it to relay a stop
        lease = tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")
    assert lease is not None and (lease.stop_by, lease.unpushed) == (None, None)
    with store.write() as tx:
        assert tx.ask_stop(task.id, lease.epoch - 1, "human") is False  # an older epoch asks nothing
        assert tx.ask_stop(task.id, lease.epoch, "human") is True
        tx.note_unpushed(task.id, lease.epoch, "the remote refused the push")
    with store.read() as tx:
        held = tx.lease(task.id)
    assert held is not None and (held.stop_by, held.unpushed) == ("human", "the remote refused the push")
    assert held.as_view()["unpushed"] == "the remote refused the push"
    with pytest.raises(LeaseLost), store.write() as tx:
        tx.note_unpushed(task.id, lease.epoch + 1, "not this worker's to say")
    with store.write() as tx:
        assert tx.release_turn(task.id, lease.epoch) is True  # the push landed: nothing outstanding
    with store.read() as tx:
        released = tx.lease(task.id)
    assert released is not None and released.unpushed is None
    with store.write() as tx:
        requeued = tx.queue_turn(task.id, "cmd-2", {})
    assert (requeued.stop_by, requeued.unpushed) == (None, None)  # the next turn starts with neither


def test_a_write_under_a_stale_epoch_rolls_back_the_whole_transaction(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        lease = tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")
        assert lease is not None
        tx.fence_off(task.id, lease.epoch)
    with pytest.raises(LeaseLost), store.write() as tx:
        tx.add_comment(task.id, Actor.AGENT, "written before the fence was checked")
        tx.check_fence(task.id, lease.epoch)
    with store.read() as tx:
        assert tx.comments(task.id) == []


def test_workers_heartbeat_and_are_lost_past_their_lease(store: Store, clock: Any) -> None:
    task = _create(store)
    with store.write() as tx:
        worker = tx.beat_worker("w-a", host="host-a", pid=41, state=WorkerState.RUNNING, lease_seconds=5.0)
        tx.queue_turn(task.id, "cmd-1", {})
        lease = tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")
    assert lease is not None
    assert worker.started_at == worker.heartbeat_at
    clock.advance(4)
    with store.write() as tx:
        beat = tx.beat_worker("w-a", host="host-a", pid=41, state=WorkerState.RUNNING, lease_seconds=5.0)
    assert beat.started_at == worker.started_at and beat.heartbeat_at > worker.heartbeat_at
    with store.read() as tx:
        workers = {w.id: w for w in tx.workers()}
    assert not lease_lost(lease, workers, clock())
    clock.advance(6)
    assert lease_lost(lease, workers, clock())
    assert lease_lost(lease, {}, clock())  # a worker gone from the store holds nothing
    with store.write() as tx:
        stopped = tx.beat_worker("w-a", host="host-a", pid=41, state=WorkerState.STOPPED, lease_seconds=5.0)
    assert lease_lost(lease, {"w-a": stopped}, stopped.heartbeat_at)


def test_the_change_mark_moves_with_every_write_a_board_shows_and_stays_while_nothing_is_written(store: Store) -> None:
    task = _create(store)
    writes: list[tuple[str, Callable[[Tx], object]]] = [
        ("a status", lambda tx: tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")),
        ("a task's fields", lambda tx: tx.update_task(task.id, goal="another goal")),
        ("a comment", lambda tx: tx.add_comment(task.id, Actor.HUMAN, "looks good")),
        ("a queued turn", lambda tx: tx.queue_turn(task.id, "cmd-1", {})),
        ("a claim", lambda tx: tx.claim_turn(task.id, "cmd-1", "w-a", "host-a")),
        ("a live turn", lambda tx: tx.set_live(task.id, "cmd-1", {"phase": "agent"})),
        ("a live turn again", lambda tx: tx.set_live(task.id, "cmd-1", {"phase": "sync"})),
        ("a new task", lambda tx: tx.insert_task(NewTask(ref="second", goal="g"), Actor.HUMAN)),
        ("a deleted task", lambda tx: tx.delete_task(next(t.id for t in tx.tasks() if t.ref == "second"))),
    ]
    for what, write in writes:
        before = store.change_mark()
        with store.read() as tx:
            tx.tasks()
        assert store.change_mark() == before, f"a read moved the mark (before {what})"
        with store.write() as tx:
            write(tx)
        assert store.change_mark() != before, f"{what} left the mark where it was"


def test_what_a_worker_following_a_turn_looks_at_is_the_lease_the_answer_and_the_status(store: Store) -> None:
    task = _create(store)
    with store.read() as tx:
        assert tx.followed(task.id, "cmd-1") == (None, False, task.status)
        assert tx.followed("no-such-task", "cmd-1") == (None, False, None)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {"kind": "start"})
        tx.claim_turn(task.id, "cmd-1", "w1:tok", "w1")
        tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id="cmd-1")
    with store.read() as tx:
        lease, answered, status = tx.followed(task.id, "cmd-1")
        assert lease == tx.lease(task.id) and lease is not None and lease.claimed and lease.epoch == 2
        assert (answered, status) == (False, task.status)  # a human's turn of the command is no answer
    with store.write() as tx:
        tx.add_turn(task.id, role=Role.AGENT, kind="start", content="done", command_id="cmd-2")  # another's
    with store.read() as tx:
        assert tx.followed(task.id, "cmd-1")[1] is False
    with store.write() as tx:
        tx.add_turn(task.id, role=Role.AGENT, kind="start", content="done", command_id="cmd-1")
        tx.release_turn(task.id, 2)
    with store.read() as tx:
        lease, answered, _status = tx.followed(task.id, "cmd-1")
        assert answered is True and lease == tx.lease(task.id) and lease is not None and not lease.claimed


def test_deleting_a_task_deletes_its_lease(store: Store) -> None:
    task = _create(store)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        tx.delete_task(task.id)
    with store.read() as tx:
        assert tx.lease(task.id) is None and tx.leases() == []


def test_shipped_files_are_kept_byte_exact_in_chunks_and_replaced_from_offset_zero(store: Store) -> None:
    task = _create(store)
    first, second = b"line one\n\x00\xff\xfe", b"line two\n"
    with store.write() as tx:
        tx.ship(task.id, "turns/1/output.log", 0, first)
        tx.ship(task.id, "turns/1/output.log", len(first), second)
        tx.ship(task.id, "sessions/s/failures.jsonl", 0, b"{}\n")
    with store.read() as tx:
        assert tx.shipped_sizes(task.id) == {"turns/1/output.log": len(first + second), "sessions/s/failures.jsonl": 3}
        chunks = tx.shipped(task.id, "turns/1/output.log")
        assert b"".join(data for _offset, data in chunks) == first + second
        assert [offset for offset, _data in tx.shipped(task.id, "turns/1/output.log", since=len(first))] == [len(first)]
    with store.write() as tx:
        tx.ship(task.id, "turns/1/output.log", 0, b"rewritten\n")  # a rewritten file starts again
    with store.read() as tx:
        assert tx.shipped_sizes(task.id)["turns/1/output.log"] == 10
    with store.write() as tx:
        tx.set_live(task.id, "cmd-1", {"phase": "running"})
        tx.set_live(task.id, "cmd-2", {"phase": "done"})
    with store.read() as tx:
        command, doc, _at = tx.live([task.id, "nobody"])[task.id]
        assert (command, doc) == ("cmd-2", {"phase": "done"}) and "nobody" not in tx.live(["nobody"])
    with store.write() as tx:
        tx.delete_task(task.id)
    with store.read() as tx:
        assert tx.shipped_sizes(task.id) == {} and tx.live([task.id]) == {}


def test_shipping_many_chunks_at_once_is_shipping_each_in_turn(store: Store) -> None:
    task, other = _create(store), _create(store, ref="other")
    with store.write() as tx:
        tx.ship(task.id, "a.log", 0, b"old a ")
        tx.ship(task.id, "a.log", 6, b"more old")
        tx.ship(task.id, "b.log", 0, b"b kept ")
        tx.ship(other.id, "a.log", 0, b"another task's")
    chunks = [
        ("a.log", 0, b"new a "),  # replaces what the store held of a.log
        ("b.log", 7, b"grown\x00\xff"),  # appended: b.log's start stays
        ("c.log", 0, b"first "),
        ("c.log", 6, b"second "),
        ("c.log", 0, b"again "),  # a start again: the two chunks before it go, as one ship after another does
        ("a.log", 6, b"then"),
    ]
    with store.write() as tx:
        tx.ship_files(task.id, chunks)
        tx.ship_files(task.id, [])
    with store.read() as tx:
        assert tx.shipped(task.id, "a.log") == [(0, b"new a "), (6, b"then")]
        assert tx.shipped(task.id, "b.log") == [(0, b"b kept "), (7, b"grown\x00\xff")]
        assert tx.shipped(task.id, "c.log") == [(0, b"again ")]
        assert tx.shipped(other.id, "a.log") == [(0, b"another task's")]  # another task's file of the name
    many = [(f"f{i}.log", 0, bytes([i % 256]) * 3) for i in range(450)]  # past one statement's parameters
    with store.write() as tx:
        tx.ship_files(task.id, many)
    with store.read() as tx:
        sizes = tx.shipped_sizes(task.id)
        assert all(sizes[p] == 3 for p, _o, _d in many) and tx.shipped(task.id, "f449.log") == [(0, b"\xc1" * 3)]


def test_several_shipped_files_are_read_past_their_own_offsets_in_one_call(store: Store) -> None:
    task, other = _create(store), _create(store, ref="other")
    with store.write() as tx:
        tx.ship(task.id, "turns/1/output.log", 0, b"0123")
        tx.ship(task.id, "turns/1/output.log", 4, b"4567")
        tx.ship(task.id, "turns/1/output.log", 8, b"89")
        tx.ship(task.id, "turns/1/stderr.log", 0, b"err\x00\xff")
        tx.ship(task.id, "turns/1/receipt.json", 0, b"{}")
        tx.ship(other.id, "turns/1/stderr.log", 0, b"not this task's")
    with store.read() as tx:
        got = tx.shipped_past(
            task.id, {"turns/1/output.log": 5, "turns/1/stderr.log": 0, "turns/1/receipt.json": 2, "nothing": 0}
        )
        # Each file past its own offset (a chunk that reaches past it whole), in order; a file with nothing
        # past its offset, or none stored, is left out; another task's file of the same path never comes.
        assert got == {"turns/1/output.log": [(4, b"4567"), (8, b"89")], "turns/1/stderr.log": [(0, b"err\x00\xff")]}
        assert tx.shipped_past(task.id, {}) == {}
        assert got["turns/1/output.log"] == tx.shipped(task.id, "turns/1/output.log", since=5)
        many = {f"turns/{i}/output.log": 0 for i in range(700)} | {"turns/1/output.log": 0}
        assert tx.shipped_past(task.id, many) == {"turns/1/output.log": tx.shipped(task.id, "turns/1/output.log")}


def test_shared_docs_are_put_whole_and_read_back(store: Store) -> None:
    with store.read() as tx:
        assert tx.get_doc("usage-limits") is None
    with store.write() as tx:
        tx.put_doc("usage-limits", {"claude:1": {"resets_at": "2026-12-01T13:30:00.000000Z"}})
        tx.put_doc("usage-limits", {"claude:2": {"resets_at": "2026-12-01T14:00:00.000000Z"}})
    with store.read() as tx:
        assert tx.get_doc("usage-limits") == {"claude:2": {"resets_at": "2026-12-01T14:00:00.000000Z"}}


# -- who owns what on the shared store (docs/workers.md#turns-run-on-your-own-host) ---------------


def test_a_process_record_names_the_host_that_owns_it_and_one_host_names_none(store: Store, clock: Any) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.register_process(task.id, "supervisor", 4242, "cmd-1", owner="laptop-a-0f0f0f")
        tx.register_process(task.id, "pair", 4343)
    with store.read() as tx:
        records = {p.kind: p for p in tx.processes(task.id)}
    assert (records["supervisor"].pid, records["supervisor"].owner) == (4242, "laptop-a-0f0f0f")
    assert records["pair"].owner is None  # one host (SQLite), or an older corral's record: judged by its pid here
    assert records["supervisor"].elsewhere("laptop-b-1e1e1e") and not records["supervisor"].elsewhere("laptop-a-0f0f0f")
    assert not records["pair"].elsewhere("laptop-b-1e1e1e")
    with store.write() as tx:  # replaced whole, its owner too
        tx.register_process(task.id, "supervisor", 4444, "cmd-2", owner="laptop-b-1e1e1e")
    with store.read() as tx:
        (again,) = [p for p in tx.processes(task.id) if p.kind == "supervisor"]
    assert (again.pid, again.command_id, again.owner) == (4444, "cmd-2", "laptop-b-1e1e1e")


def test_a_local_turn_holds_the_lease_for_its_host_under_a_new_epoch(store: Store) -> None:
    task = _working(store)
    with store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {"kind": "start", "body": "go", "target": "main"})
        claimed = tx.claim_turn(task.id, "cmd-1", "build-1-aaaa", "build-1")
        assert claimed is not None
        local = tx.hold_local(task.id, "cmd-2", "laptop-a-0f0f0f", "laptop-a")
    # A new epoch: the worker that held the task before is fenced off, as by a new queued turn.
    assert (local.state, local.epoch, local.worker_id, local.host) == (
        LeaseState.LOCAL,
        claimed.epoch + 1,
        "laptop-a-0f0f0f",
        "laptop-a",
    )
    assert local.local and local.held and not local.claimed and local.job_id is None
    assert local.claimed_at is not None and local.as_view()["local"] is True
    with store.write() as tx, pytest.raises(LeaseLost):
        tx.check_fence(task.id, claimed.epoch)
    with store.write() as tx:
        assert tx.check_fence(task.id, local.epoch).worker_id == "laptop-a-0f0f0f"  # its host's writes hold
        assert tx.claim_turn(task.id, "cmd-2", "build-1-aaaa", "build-1") is None  # never a worker's to claim
        assert tx.ask_stop(task.id, local.epoch, "human") is True  # a stop asked on another host rides on it
    with store.read() as tx:
        assert [x.task_id for x in tx.leases([LeaseState.LOCAL])] == [task.id]
        assert tx.leases([LeaseState.QUEUED, LeaseState.CLAIMED]) == []  # never swept as a lost worker's
        held = tx.lease(task.id)
    assert held is not None and held.stop_by == "human"
    # It owns the turn of its own command only; a queued or claimed lease owns whatever the task runs.
    assert held.holds_turn("cmd-2") and not held.holds_turn("cmd-1") and not held.holds_turn(None)
    assert held.elsewhere("laptop-b-1e1e1e") and not held.elsewhere("laptop-a-0f0f0f")
    # The turn ended: its host lets the lease go, and it stays a local launch's (never queued for workers).
    with store.write() as tx:
        assert tx.release_turn(task.id, local.epoch) is True
        assert tx.release_turn(task.id, local.epoch) is False
    with store.read() as tx:
        done = tx.lease(task.id)
    assert done is not None and done.state is LeaseState.RELEASED and done.local and not done.held
    assert not done.holds_turn("cmd-2") and done.stop_by == "human"
    with store.write() as tx:  # the next local launch starts clean, one epoch on
        again = tx.hold_local(task.id, "cmd-3", "laptop-b-1e1e1e", "laptop-b")
        queued = tx.queue_turn(task.id, "cmd-4", {"kind": "resume", "body": "", "target": "main"})
    assert (again.epoch, again.stop_by, again.host) == (local.epoch + 1, None, "laptop-b")
    assert queued.epoch == again.epoch + 1 and not queued.local and queued.worker_id is None


__all__ = [name for name in dict(globals()) if name.startswith("test_")]
