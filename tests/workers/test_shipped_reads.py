"""A host bringing a task another host ran reads the task's shipped files in one statement, not one per file
(``shared_store.shipping.materialize``: every worker and every reviewer's host does it for every such task)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.engine.shared_store import shipping
from corral.errors import LeaseLost
from corral.store import NewTask


def test_a_tasks_dozen_shipped_files_are_read_in_one_statement_each_past_what_this_copy_has(project: Any) -> None:
    with project.store.write() as tx:
        task_id = str(tx.insert_task(NewTask(ref="fix", goal="Fix it"), Actor.HUMAN).id)
    files = {f"tasks/{task_id}/turns/1/file-{i:02d}.log": f"line {i}\n".encode() * (i + 1) for i in range(12)}
    with project.store.write() as tx:
        for rel, data in files.items():
            tx.ship(task_id, rel, 0, data)
    sent: list[str] = []
    project.store._db.set_trace_callback(sent.append)
    try:
        assert shipping.materialize(project, task_id) == sum(len(d) for d in files.values())
    finally:
        project.store._db.set_trace_callback(None)
    reads = [s for s in sent if s.lstrip().upper().startswith("SELECT")]
    # The files' sizes, then every file's chunks together (one per file before).
    assert len(reads) == 2, reads
    for rel, data in files.items():
        assert (project.paths.root / rel).read_bytes() == data
    # Grown on the store: only what this copy lacks is read and written, each file from its own offset.
    first, last = next(iter(files)), list(files)[-1]
    with project.store.write() as tx:
        tx.ship(task_id, first, len(files[first]), b"more\n")
        tx.ship(task_id, last, len(files[last]), b"and more\n")
    assert shipping.materialize(project, task_id) == len(b"more\n") + len(b"and more\n")
    assert (project.paths.root / first).read_bytes() == files[first] + b"more\n"
    assert (project.paths.root / last).read_bytes() == files[last] + b"and more\n"


def test_files_past_the_bytes_of_one_read_are_read_in_several_and_come_back_whole(project: Any) -> None:
    with project.store.write() as tx:
        task_id = str(tx.insert_task(NewTask(ref="big", goal="Big logs"), Actor.HUMAN).id)
    big = bytes(range(256)) * (shipping.CHUNK // 256)
    files = {f"tasks/{task_id}/turns/1/big-{i}.log": big[i:] for i in range(6)}  # past TX_BYTES together
    assert sum(len(d) for d in files.values()) > shipping.TX_BYTES
    with project.store.write() as tx:
        for rel, data in files.items():
            tx.ship(task_id, rel, 0, data)
    assert shipping.materialize(project, task_id) == sum(len(d) for d in files.values())
    for rel, data in files.items():
        assert (project.paths.root / rel).read_bytes() == data


def test_a_pass_brings_every_task_other_hosts_ran_in_one_read_transaction(project: Any) -> None:
    from corral.engine.project import Project
    from corral.engine.shared_store import leases
    from corral.engine.shared_store.team_placement import SharedPlacement

    files: dict[str, bytes] = {}
    with project.store.write() as tx:
        for n in range(5):
            task_id = str(tx.insert_task(NewTask(ref=f"t{n}", goal="Work"), Actor.HUMAN).id)
            tx.queue_turn(task_id, "cmd-1", {})
            tx.claim_turn(task_id, "cmd-1", "other:tok", "other")
            for name in ("output.log", "stderr.log"):
                rel = f"tasks/{task_id}/turns/1/{name}"
                files[rel] = f"{task_id} {name}\n".encode()
                tx.ship(task_id, rel, 0, files[rel])
    host = Project.open(
        project.repo, clock=project.clock, placement=SharedPlacement("postgresql://shared"), store=project.store
    )
    sent: list[str] = []
    project.store._db.set_trace_callback(sent.append)
    try:
        assert leases.bring_shipped(host, "me:tok") == sum(len(d) for d in files.values())
    finally:
        project.store._db.set_trace_callback(None)
    begun = [s for s in sent if s.lstrip().upper().startswith("BEGIN")]
    assert len(begun) == 1, sent  # one transaction for the pass (one a task before)
    # The leases, then each task's sizes and its files' chunks: two statements a task, in the one transaction.
    assert len([s for s in sent if s.lstrip().upper().startswith("SELECT")]) == 1 + 2 * 5, sent
    for rel, data in files.items():
        assert (project.paths.root / rel).read_bytes() == data
    assert leases.bring_shipped(host, "me:tok") == 0  # nothing lacking: nothing written again


def test_each_poll_of_a_followed_turn_is_one_statement(project: Any, tmp_path: Any) -> None:
    from corral.engine.shared_store import claimed

    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="poll", goal="Work"), Actor.HUMAN)
        tx.queue_turn(task.id, "cmd-1", {})
        tx.claim_turn(task.id, "cmd-1", "w1:tok", "w1")
    followed = claimed.Follow(project, claimed.Me("w1:tok", "w1"), task, "cmd-1", 2, tmp_path, None, 180.0)
    sent: list[str] = []
    project.store._db.set_trace_callback(sent.append)
    try:
        lease, answered, status = followed.look()
    finally:
        project.store._db.set_trace_callback(None)
    assert lease is not None and lease.epoch == 2 and lease.claimed and not answered and status is task.status
    # The lease, the answer and the status in one look (three, and two more once the turn was answered, before).
    assert len([s for s in sent if s.lstrip().upper().startswith("SELECT")]) == 1, sent
    with project.store.write() as tx:
        tx.add_turn(task.id, role=Role.AGENT, kind="start", content="done", command_id="cmd-1")
        tx.delete_task(task.id)
    assert followed.look() == (None, False, task.status)  # gone: the task as followed, no lease


def test_a_round_of_shipping_writes_the_files_and_the_live_facts_in_one_transaction(
    project: Any, tmp_path: Any
) -> None:
    from corral.engine.shared_store import claimed

    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="ship", goal="Work"), Actor.HUMAN)
        tx.queue_turn(task.id, "cmd-1", {})
        tx.claim_turn(task.id, "cmd-1", "w1:tok", "w1")
    log = project.paths.task_dir(task.id) / "turns" / "1" / "output.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"working\n")
    followed = claimed.Follow(project, claimed.Me("w1:tok", "w1"), task, "cmd-1", 2, tmp_path, None, 180.0)
    sent: list[str] = []
    project.store._db.set_trace_callback(sent.append)
    try:
        followed.ship()
    finally:
        project.store._db.set_trace_callback(None)
    begun = [s.split()[:2] for s in sent if s.lstrip().upper().startswith("BEGIN")]
    # What the store holds of the files (a read), then the files and the live facts together (two writes before).
    assert [b[1:] for b in begun] == [["DEFERRED"], ["IMMEDIATE"]], sent
    with project.store.read() as tx:
        assert tx.shipped(task.id, str(log.relative_to(project.paths.root))) == [(0, b"working\n")]
        command, doc, _at = tx.live([task.id])[task.id]
    assert command == "cmd-1" and doc["intervals"] == []
    with project.store.write() as tx:
        tx.queue_turn(task.id, "cmd-2", {})  # another epoch: the worker under 2 is fenced off
    log.write_bytes(b"working\nmore\n")
    with pytest.raises(LeaseLost):
        followed.ship()
    with project.store.read() as tx:
        assert tx.shipped_sizes(task.id) == {str(log.relative_to(project.paths.root)): 8}
        assert tx.live([task.id])[task.id][0] == "cmd-1"  # nothing of the fenced-off round written


def test_a_link_or_a_climbing_name_in_this_hosts_copy_is_never_written_through(project: Any) -> None:
    with project.store.write() as tx:
        task_id = str(tx.insert_task(NewTask(ref="links", goal="Work"), Actor.HUMAN).id)
    turn = project.paths.task_dir(task_id) / "turns" / "1"
    turn.mkdir(parents=True)
    target = turn / "stderr.log"
    target.write_bytes(b"mine\n")
    (turn / "output.log").symlink_to(target)  # a link where a shipped file goes: left alone, not followed
    rel = f"tasks/{task_id}/turns/1"
    with project.store.write() as tx:
        tx.ship(task_id, f"{rel}/output.log", 0, b"shipped through a link\n")
        tx.ship(task_id, f"{rel}/..", 0, b"a directory's name\n")
        tx.ship(task_id, f"{rel}/2/../prompt.md", 0, b"through a climb\n")
        tx.ship(task_id, f"{rel}/receipt.json", 0, b"{}\n")
    assert shipping.materialize(project, task_id) == 3 + len(b"through a climb\n")
    assert target.read_bytes() == b"mine\n" and (turn / "output.log").is_symlink()
    assert (turn / "receipt.json").read_bytes() == b"{}\n"
    assert (turn / "prompt.md").read_bytes() == b"through a climb\n"  # a climb that stays in the task's turns
    assert sorted(p.name for p in turn.iterdir()) == ["output.log", "prompt.md", "receipt.json", "stderr.log"]


def test_a_turns_dozen_files_are_written_in_one_insert(project: Any, tmp_path: Any) -> None:
    with project.store.write() as tx:
        task = tx.insert_task(NewTask(ref="many", goal="Work"), Actor.HUMAN)
        tx.queue_turn(task.id, "cmd-1", {})
        tx.claim_turn(task.id, "cmd-1", "w1:tok", "w1")
    turn = project.paths.task_dir(task.id) / "turns" / "1"
    turn.mkdir(parents=True)
    files = {f"file-{i:02d}.log": f"line {i}\n".encode() for i in range(12)}
    for name, data in files.items():
        (turn / name).write_bytes(data)
    sent: list[str] = []
    project.store._db.set_trace_callback(sent.append)
    try:
        assert shipping.ship(project, task.id, 2) == sum(len(d) for d in files.values())
    finally:
        project.store._db.set_trace_callback(None)
    writes = [s.split()[0].upper() for s in sent if s.split()[0].upper() in ("INSERT", "DELETE")]
    assert writes == ["DELETE", "INSERT"], sent  # a DELETE and an INSERT a file before
    with project.store.read() as tx:
        for name, data in files.items():
            assert tx.shipped(task.id, str((turn / name).relative_to(project.paths.root))) == [(0, data)]
