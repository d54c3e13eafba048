"""``list`` rows from batch reads and ``show`` of the latest turns: the same read model, fewer reads.

``projection.list_rows`` must give exactly ``list_row(view(...))`` for every task without a
read per task; ``projection.show_latest`` exactly ``show`` cut at the first kept turn;
``liveness.live_facts`` what the supervisor's ``status.json`` says, through the protocol's reader.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import AttemptOutcome, FailureEvidence, RestingCause, Task
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.engine.project import Project
from corral.engine.read import projection
from corral.engine.recovery.reconcile import sweep_working
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import live_facts
from corral.store import NewTask, Tx
from tests.conftest import FakeClock

THRESHOLD = 2


class Counting:
    """A transaction that remembers which of its reads were asked for."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.tx, name)

        def counted(*args: Any, **kw: Any) -> Any:
            self.asked.append(name)
            return method(*args, **kw)

        return counted


def _task(proj: Project, ref: str, **kw: Any) -> Task:
    with proj.store.write() as tx:
        return tx.insert_task(NewTask(ref=ref, goal=f"Goal of {ref}", target_branch="main", **kw), Actor.HUMAN)


def _working(proj: Project, ref: str, **kw: Any) -> Task:
    task = _task(proj, ref, **kw)
    with proj.store.write() as tx:
        tx.insert_session(task.id, branch=f"corral/{ref}", base_commit="0" * 40)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        current = tx.get_task(task.id)
    assert current is not None
    return current


def _status_file(proj: Project, task: Task, pid: int, phase: str = "work", **kw: Any) -> None:
    record = proto.SupervisorStatus(command_id=f"cmd-{task.ref}", pid=pid, phase=phase, **kw)
    proto.write(proj.paths.protocol_dir(task.id), record, durable=False)


def _cause(proj: Project, code: str) -> RestingCause:
    evidence = FailureEvidence(source="supervisor", code="harness-exited", phase="work", exit_code=137, signal=9)
    return RestingCause(code, proj.clock(), Actor.SYSTEM, evidence=evidence, details={"summary": "it died"})


def _interrupted(proj: Project, ref: str, times: int) -> Task:
    task = _working(proj, ref)
    with proj.store.write() as tx:
        tx.set_status(task.id, Status.INTERRUPTED, Actor.SYSTEM, "lost", resting_cause=_cause(proj, "turn-lost"))
        current = tx.get_task(task.id)
        assert current is not None and current.session_id
        tx.update_session(current.session_id, consecutive_interruptions=times)
    return task


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_list_rows_are_the_rows_of_each_view_from_two_batch_reads(project: Project, dead_pid: int) -> None:
    parent = _task(project, "parent")
    alive = _working(project, "alive", parent_id=parent.id)
    _status_file(project, alive, os.getpid(), kind="ask")
    retrying = _working(project, "retrying")
    retry = proto.RetryState(attempt=3, failure_class="transient_overload", reason="API Error: 529", next_delay_ms=5)
    _status_file(project, retrying, os.getpid(), phase="retrying", retry=retry)
    checking = _working(project, "checking")
    _status_file(project, checking, os.getpid(), phase="check")
    gone = _working(project, "gone")
    _status_file(project, gone, dead_pid)
    _working(project, "never-seen")  # no status.json at all
    _interrupted(project, "tripped", THRESHOLD)
    _interrupted(project, "once", 1)
    blocked = _working(project, "parked", parent_id=parent.id)
    conflicted = _working(project, "conflicted")
    with project.store.write() as tx:
        tx.park(blocked.id, Actor.SYSTEM, "turn ended", resting_cause=_cause(project, "stopped"))
        tx.record_violations(conflicted.id, ["migrations/001.sql"])
        tx.park(conflicted.id, Actor.SYSTEM, "turn ended")

    def live_of(task: Task) -> Live | None:
        return live_facts(project, task)

    with project.store.read() as tx:
        tasks = tx.tasks()
        expected = [projection.list_row(projection.view(tx, t, live_of(t), breaker_threshold=THRESHOLD)) for t in tasks]
        counting = Counting(tx)
        rows = projection.list_rows(counting, tasks, live_of, breaker_threshold=lambda _t: THRESHOLD)  # type: ignore[arg-type]
    assert rows == expected
    # nothing read per task: batch reads only (the leases once, for the hosts of turns on workers)
    assert sorted(counting.asked) == ["interruption_counts", "leases", "refs_by_id"]
    by_ref = {r["ref"]: r for r in rows}
    assert by_ref["alive"]["substate"] == "agent:answering" and by_ref["alive"]["parent"] == "parent"
    assert by_ref["retrying"]["substate"] == "retrying: attempt 3 (transient_overload): API Error: 529"
    assert by_ref["checking"]["substate"] == "harness:check"
    assert by_ref["gone"]["substate"] == by_ref["never-seen"]["substate"] == "not-alive"
    assert "circuit breaker" in by_ref["tripped"]["reason"] and "circuit breaker" not in by_ref["once"]["reason"]
    assert by_ref["parked"]["status"] == "blocked" and by_ref["parked"]["reason"]
    assert by_ref["conflicted"]["status"] == "conflict" and by_ref["parent"]["substate"] is None


def test_live_facts_read_the_supervisors_status_file(project: Project, dead_pid: int) -> None:
    task = _working(project, "live")
    assert live_facts(project, task) == Live(alive=False)  # not seen yet
    retry = proto.RetryState(attempt=2, failure_class="transient_overload", reason="overloaded", next_delay_ms=100)
    _status_file(project, task, os.getpid(), phase="retrying", kind="unblock", retry=retry)
    assert live_facts(project, task) == Live(
        alive=True,
        phase="retrying",
        kind="unblock",
        retry_attempt=2,
        retry_class="transient_overload",
        retry_reason="overloaded",
    )
    _status_file(project, task, dead_pid)
    assert live_facts(project, task) == Live(alive=False, phase="work")
    (project.paths.protocol_dir(task.id) / proto.STATUS).write_text("{not json")
    assert live_facts(project, task) == Live(alive=False)
    backlog = _task(project, "idle")
    assert live_facts(project, backlog) is None


def test_the_working_sweep_decodes_no_task_while_every_supervisor_runs(
    project: Project, dead_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = [_working(project, f"run-{n}") for n in range(3)]
    gone = _working(project, "gone")
    for task in [*running, gone]:
        with project.store.write() as tx:  # the turn's command, as a launch records it
            command_id = f"cmd-{task.ref}"
            tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="start", content="go", command_id=command_id)
        _status_file(project, task, dead_pid if task is gone else os.getpid())
    resting = _interrupted(project, "resting", 1)
    store, transactions = project.store, []
    real = store.read

    @contextmanager
    def read() -> Iterator[Counting]:
        with real() as tx:
            transactions.append(Counting(tx))
            yield transactions[-1]

    monkeypatch.setattr(store, "read", read)
    observed: dict[str, Live] = {}
    assert sweep_working(project, [], observed) == [gone.id]  # its supervisor is gone: its turn is lost
    assert {t.id for t in running} == set(observed) and all(live.alive for live in observed.values())
    # the candidates in one read, no task decoded; the lost one alone read whole (its task and command)
    assert [c.asked for c in transactions[:2]] == [["task_heads"], ["get_task", "current_command"]]
    monkeypatch.undo()
    with project.store.read() as tx:
        assert [t.status for t in (tx.get_task(gone.id), tx.get_task(resting.id))] == [Status.INTERRUPTED] * 2


def test_show_latest_is_show_cut_where_the_first_kept_turn_started(project: Project, clock: FakeClock) -> None:
    task = _working(project, "long")
    t0 = clock.now
    with project.store.write() as tx:
        tx.add_comment(task.id, Actor.HUMAN, "before everything")
    for n in range(60):
        clock.advance(60)
        with project.store.write() as tx:
            human = tx.add_turn(task.id, role=Role.HUMAN, actor=Actor.HUMAN, kind="unblock", content=f"ask {n}")
            agent = tx.add_turn(task.id, role=Role.AGENT, kind="unblock", content=f"answer {n}", ended_at=tx.now())
            tx.add_attempt(agent.id, number=1, started_at=t0, ended_at=None, outcome=AttemptOutcome.SUCCEEDED)
            tx.park(task.id, Actor.SYSTEM, f"turn {n} ended")
            if n % 7 == 0:
                tx.add_comment(task.id, Actor.HUMAN, f"comment {n}")
        clock.advance(1)
        with project.store.write() as tx:
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, f"unblock {n}")
        assert human.sequence == 2 * n + 1
    with project.store.read() as tx:
        current = tx.get_task(task.id)
        assert current is not None
        whole = projection.show(tx, current)
        latest, earlier = projection.show_latest(tx, current, turns=50)
        everything, none_left_out = projection.show_latest(tx, current, turns=500)
        one, rest = projection.show_latest(tx, current, turns=0)
    assert (everything, none_left_out) == (whole, 0)
    assert earlier == 70 and rest == 119
    since = whole["turns"][70]["started_at"]
    assert latest == {
        **whole,
        "turns": whole["turns"][70:],
        "status_changes": [c for c in whole["status_changes"] if c["at"] >= since],
        "comments": [c for c in whole["comments"] if c["at"] >= since],
    }
    assert [t["sequence"] for t in one["turns"]] == [120]
    assert 0 < len(latest["status_changes"]) < len(whole["status_changes"])
    assert [c["body"] for c in latest["comments"]] == [
        "comment 35",
        "comment 42",
        "comment 49",
        "comment 56",
    ]  # 35: with turn 71
    assert whole["comments"][0]["body"] == "before everything"
    assert timedelta(0) < clock.now - t0
