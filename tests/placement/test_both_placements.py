"""The placement's contract, run over both placements (as the two stores run one suite, tests/store/): each
part the team mode plays, played by :class:`LocalPlacement` on one host (SQLite) and by
:class:`SharedPlacement` over a real PostgreSQL server, from the same records.

Every test writes what a team's hosts would write (another host's process record, its lease, its shipped
files) into the project's own store, and asserts what each placement does with it: one host keeps every
record and launches, judges and stops every turn here, so it leaves all of that alone (most often by doing
nothing); the shared placement acts on it. A test passes the placement it wants, never a setting.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import Task, Turn
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.domain.team import LeaseState, TurnPlan, WorkerState
from corral.engine.placement import Held, LocalPlacement, Placement, host_id
from corral.engine.project import Project
from corral.engine.shared_store import shipping
from corral.engine.shared_store.team_placement import SharedPlacement
from corral.errors import StoreError, UsageError, WorkNotPushed
from corral.store import NewTask, SQLiteStore
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock
from tests.support import postgres as pg_support

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database

#: Another host of the team: its identity (a worker's id) and its name; and a third, whose worker is gone.
OTHER, THERE = "there-0123456789ab", "there"
GONE = "gone-0123456789ab"


@pytest.fixture(params=["local", "shared"])
def placement(request: pytest.FixtureRequest) -> Placement:
    if request.param == "local":
        return LocalPlacement()
    return SharedPlacement(request.getfixturevalue("pg_database"))


@pytest.fixture
def placed(repo: Path, clock: FakeClock, placement: Placement) -> Iterator[Project]:
    """The project on ``repo``, opened with the placement under test (its store is the one that placement opens)."""
    project = Project.open(repo, clock=clock, placement=placement)
    yield project
    project.close()


def _shared(project: Project) -> bool:
    return isinstance(project.placement, SharedPlacement)


def _task(project: Project, ref: str, *, working: bool = False) -> Task:
    """A task (working, with a session and the human turn that launched command ``cmd-<ref>``, when asked)."""
    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref=ref, goal=f"do {ref}"), Actor.HUMAN)
        if working:
            tx.insert_session(task.id, worktree=str(project.repo), branch=f"corral/{ref}", base_commit="0" * 40)
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
            tx.add_turn(
                task.id, role=Role.HUMAN, kind="start", content="go", actor=Actor.HUMAN, command_id=f"cmd-{ref}"
            )
        return tx.get_task(task.id) or task


def _turn(project: Project, task: Task) -> Turn:
    with project.store.read() as tx:
        turn = tx.current_command(task.id)
    assert turn is not None
    return turn


def _claimed_elsewhere(project: Project, task: Task, worker: str = OTHER, *, lease_seconds: float = 3600) -> None:
    """The task's turn queued, then claimed by the worker of another host, which heartbeats now."""
    with project.store.write() as tx:
        tx.queue_turn(task.id, f"cmd-{task.ref}", TurnPlan("start", "go", "main").to_json())
        tx.claim_turn(task.id, f"cmd-{task.ref}", worker, worker.split("-")[0])
        tx.beat_worker(worker, host=worker.split("-")[0], pid=1, state=WorkerState.RUNNING, lease_seconds=lease_seconds)


# -- where the records live ------------------------------------------------------------------------


def test_the_records_live_where_the_placement_keeps_them(placed: Project) -> None:
    placement = placed.placement
    placement.reach(placed)  # reached before a long-lived reader serves it: nothing to reach on one host
    assert isinstance(placed.store, PostgresStore if _shared(placed) else SQLiteStore)
    assert placement.over_network() is _shared(placed)
    assert placed.paths.db.exists() is not _shared(placed)
    existing = placement.existing_store(placed)
    assert existing is not None
    try:
        assert existing.location == placed.store.location
    finally:
        existing.close()
    if _shared(placed):
        with pytest.raises(UsageError, match="PostgreSQL"):
            placement.check_restorable()
    else:
        placement.check_restorable()
        with pytest.raises(UsageError, match="database_url is not set"):
            placement.shared_store(placed, create=False)


def test_a_shared_store_that_cannot_be_reached_is_said_when_reached(repo: Path, clock: FakeClock) -> None:
    gone = SharedPlacement(f"postgresql://corral@127.0.0.1:{pg_support.free_port()}/corral?connect_timeout=2")
    project = Project.open(repo, clock=clock, placement=gone)
    with pytest.raises(StoreError):
        project.placement.reach(project)
    LocalPlacement().reach(project)  # one host's file: nothing to reach


# -- who owns a turn, a record -----------------------------------------------------------------------


def test_a_record_another_host_owns_is_left_to_it(placed: Project) -> None:
    ours, theirs = _task(placed, "ours"), _task(placed, "theirs")
    me = placed.placement.owner(placed)
    assert me == (host_id(placed) if _shared(placed) else None)
    with placed.store.write() as tx:
        tx.register_process(ours.id, "pair", 4242, owner=me)
        tx.register_process(theirs.id, "pair", 4343, owner=OTHER)
        tx.register_process(theirs.id, "accept", 4444, owner=OTHER)
    with placed.store.read() as tx:
        elsewhere = placed.placement.records_elsewhere(placed, tx, "pair")
        accepting = placed.placement.records_elsewhere(placed, tx, "accept", ours.id)
    if _shared(placed):
        assert [(r.task_id, r.pid) for r in elsewhere] == [(theirs.id, 4343)]
    else:
        assert elsewhere == []  # one host keeps every record: none is another's
    assert accepting == []  # of the task asked about only


def test_a_turns_lease_is_read_only_where_hosts_hold_turns(placed: Project) -> None:
    task = _task(placed, "fix", working=True)
    _claimed_elsewhere(placed, task)
    with placed.store.read() as tx:
        lease = placed.placement.turn_lease(tx, task.id)
    if _shared(placed):
        assert lease is not None and lease.state is LeaseState.CLAIMED and lease.worker_id == OTHER
    else:
        assert lease is None


def test_a_turn_another_host_ran_on_its_own_is_resumed_and_told_by_that_host_only(placed: Project) -> None:
    theirs, mine, older = _task(placed, "theirs"), _task(placed, "mine"), _task(placed, "older")
    with placed.store.write() as tx:
        their_lease = tx.hold_local(theirs.id, "cmd-theirs", OTHER, THERE)
        my_lease = tx.hold_local(mine.id, "cmd-mine", host_id(placed), "here")
        tasks = [tx.get_task(t.id) or t for t in (theirs, mine, older)]
        told = placed.placement.own_tasks(placed, tx, tasks)
    placement = placed.placement
    assert placement.resumes_here(placed, my_lease) and placement.resumes_here(placed, None)
    assert placement.resumes_here(placed, their_lease) is not _shared(placed)
    assert [t.ref for t in told] == (["mine", "older"] if _shared(placed) else ["theirs", "mine", "older"])


def test_a_turn_another_hosts_worker_holds_is_read_as_that_host_shipped_it(placed: Project) -> None:
    theirs, mine = _task(placed, "theirs", working=True), _task(placed, "mine", working=True)
    _claimed_elsewhere(placed, theirs)
    with placed.store.write() as tx:
        tx.hold_local(mine.id, "cmd-mine", host_id(placed), "here")
    assert placed.placement.read_elsewhere(placed, mine.id) is None  # this host judges its own turn
    live = placed.placement.read_elsewhere(placed, theirs.id)
    if _shared(placed):
        assert live is not None and live.alive  # its worker heartbeats: it runs there
    else:
        assert live is None


# -- how a turn is started and handed over -----------------------------------------------------------


def test_a_turn_this_host_runs_is_held_here_and_never_handed_over(placed: Project) -> None:
    task = _task(placed, "fix", working=True)
    turn = _turn(placed, task)
    placement = placed.placement
    assert not placement.goes_to_workers(placed, task.id, Actor.HUMAN)
    assert placement.check_hand_over(placed) is False
    assert placement.hand_over(placed, task, turn, lambda: TurnPlan("start", "go", "main")) is False
    with placed.store.write() as tx:
        placement.hold_here(placed, tx, task.id, "cmd-fix", Actor.HUMAN)
    with placed.store.read() as tx:
        lease = tx.lease(task.id)
    if _shared(placed):  # every other host reads it as this host's from the transaction that recorded it
        assert lease is not None and lease.state is LeaseState.LOCAL and lease.worker_id == host_id(placed)
    else:
        assert lease is None
    assert placement.queue_url() == (placement.url if isinstance(placement, SharedPlacement) else None)


def test_a_turn_meant_for_workers_is_queued_for_them_or_refused_where_none_can_take_it(
    repo: Path, clock: FakeClock, placement: Placement, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_DISPATCH", "workers")  # the person's own setting: their turns go to workers
    project = Project.open(repo, clock=clock, placement=placement)
    try:
        task = _task(project, "fix", working=True)
        turn = _turn(project, task)
        plan = TurnPlan("start", "go", "main")
        if not _shared(project):
            with pytest.raises(UsageError) as refused:
                placement.check_hand_over(project)  # before a person's launch records anything
            assert refused.value.code == "workers-need-postgres"
            with pytest.raises(UsageError) as refused:
                placement.hand_over(project, task, turn, lambda: plan)
            assert refused.value.code == "workers-need-postgres"
            return
        assert placement.goes_to_workers(project, task.id, Actor.HUMAN)
        assert placement.check_hand_over(project) is True
        assert placement.hand_over(project, task, turn, lambda: plan) is True
        with project.store.read() as tx:
            lease = tx.lease(task.id)
        assert lease is not None and lease.state is LeaseState.QUEUED and lease.command_id == "cmd-fix"
        assert TurnPlan.from_json(lease.plan) == plan and lease.job_id is not None  # its job reached the queue
        with project.store.write() as tx:  # queued: no host holds it here
            placement.hold_here(project, tx, task.id, "cmd-fix", Actor.HUMAN)
            assert (tx.lease(task.id) or lease).state is LeaseState.QUEUED
    finally:
        project.close()


# -- how a turn's files and branch reach other hosts -------------------------------------------------


def test_files_another_host_shipped_are_brought_here_before_a_read(placed: Project) -> None:
    task = _task(placed, "fix", working=True)
    _claimed_elsewhere(placed, task)
    log = placed.paths.task_dir(task.id) / "turns" / "1" / "output.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"their output\n")
    with placed.store.read() as tx:
        lease = tx.lease(task.id)
    assert lease is not None
    shipping.ship(placed, task.id, lease.epoch)  # as the host that runs it ships it
    log.unlink()  # this host never had it
    written = placed.placement.bring_files(placed, task.id)
    if _shared(placed):
        assert written == len(b"their output\n") and log.read_bytes() == b"their output\n"
    else:
        assert written == 0 and not log.exists()  # every file of a turn is written here


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_a_branch_reaches_other_hosts_through_the_remote_and_one_host_has_none_to_reach(
    placed: Project, tmp_path: Path
) -> None:
    task = _task(placed, "fix")
    placement, repo = placed.placement, placed.repo
    assert placement.review_branch(placed, task, "main", None, "diff") is None  # no turn of it ran on a worker
    if not _shared(placed):
        for asked in (
            lambda: placement.remote_target(placed, task, "main"),
            lambda: placement.push_target(placed, "main", "0" * 40, "0" * 40),
            lambda: placement.retire_branch(placed, task, "0" * 40),
        ):
            with pytest.raises(UsageError, match="database_url is not set"):
                asked()
        return
    _git(tmp_path, "init", "-q", "--bare", "remote.git")
    _git(repo, "remote", "add", "origin", str(tmp_path / "remote.git"))
    _git(repo, "push", "-q", "origin", "main", f"main:refs/heads/{task.branch}")
    old = _git(repo, "rev-parse", "main")
    assert placement.remote_target(placed, task, "main") == old
    new = _git(repo, "commit-tree", "-p", old, "-m", "merged", f"{old}^{{tree}}")
    assert placement.push_target(placed, "main", new, old) is True  # a compare-and-swap on the remote's tip
    assert placement.push_target(placed, "main", old, old) is False  # it moved since: refused
    assert placement.remote_target(placed, task, "main") == new
    placement.retire_branch(placed, task, old)
    remote = tmp_path / "remote.git"
    assert _git(remote, "for-each-ref", "--format=%(refname)") == f"refs/corral/archive/{task.ref}\nrefs/heads/main"


def test_a_review_waits_for_a_workers_work_to_reach_the_remote(placed: Project) -> None:
    task = _task(placed, "fix")  # at rest: its last turn's worker has not pushed its work yet
    _claimed_elsewhere(placed, task)
    with placed.store.write() as tx:
        claim = tx.lease(task.id)
        assert claim is not None
        tx.note_unpushed(task.id, claim.epoch, "the remote refused the push")
        lease = tx.lease(task.id)
    if not _shared(placed):
        assert placed.placement.review_branch(placed, task, "main", lease, "accept") is None
        return
    with pytest.raises(WorkNotPushed, match="the remote refused the push"):
        placed.placement.review_branch(placed, task, "main", lease, "accept")


# -- how stops are relayed and what the reconciler sweeps ----------------------------------------------


def test_a_stop_of_a_turn_queued_for_workers_rides_on_its_lease(placed: Project) -> None:
    here, queued = _task(placed, "here", working=True), _task(placed, "queued", working=True)
    with placed.store.write() as tx:
        tx.queue_turn(queued.id, "cmd-queued", TurnPlan("start", "go", "main").to_json())
    assert placed.placement.stop_elsewhere(placed, here, Actor.HUMAN) is None  # this host's turn: stopped here
    stopped = placed.placement.stop_elsewhere(placed, queued, Actor.HUMAN)
    with placed.store.read() as tx:
        lease = tx.lease(queued.id)
        now = tx.get_task(queued.id)
    assert lease is not None and now is not None
    if _shared(placed):  # no worker holds it: fenced off, and parked here as a supervisor would record it
        assert stopped is not None and stopped.status is not Status.WORKING
        assert now.resting_cause is not None and now.resting_cause.code == "stopped"
        assert lease.state is not LeaseState.QUEUED
    else:
        assert stopped is None and now.status is Status.WORKING and lease.state is LeaseState.QUEUED


def test_the_reconcilers_shared_sweeps_leave_other_hosts_turns_alone_and_end_lost_workers_turns(
    placed: Project, clock: FakeClock
) -> None:
    alive, lost = _task(placed, "alive", working=True), _task(placed, "lost", working=True)
    _claimed_elsewhere(placed, alive, OTHER)
    _claimed_elsewhere(placed, lost, GONE, lease_seconds=1)
    clock.advance(10)  # the worker of ``lost`` stopped heartbeating; the other one beats on
    with placed.store.write() as tx:
        tx.beat_worker(OTHER, host=THERE, pid=1, state=WorkerState.RUNNING, lease_seconds=3600)
    working: dict[str, str | None] = {alive.id: "cmd-alive", lost.id: "cmd-lost"}
    problems: list[str] = []
    observed: dict[str, Live] = {}
    held = placed.placement.sweep_held(placed, working, problems, observed)
    assert problems == []
    assert isinstance(held, Held)
    held.after_pass(working, {})  # this host runs no turn of its own: nothing to ship
    if not _shared(placed):
        assert (held.ended, held.leave, observed) == ([], set(), {})  # one host: every turn is judged here
        with placed.store.read() as tx:
            assert (tx.get_task(lost.id) or lost).status is Status.WORKING
        return
    assert held.ended == [lost.id]  # its worker stopped heartbeating: the turn rests interrupted, for auto-resume
    assert alive.id in held.leave and observed[alive.id].alive  # its host judges it; read as it shipped it
    with placed.store.read() as tx:
        assert (tx.get_task(lost.id) or lost).status is Status.INTERRUPTED
