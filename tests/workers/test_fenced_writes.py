"""What a worker writes after its epoch was taken over: nothing. Its shipped files and live facts are fenced in
the transaction that writes them, and its WIP push is a compare-and-swap on what it saw (docs/workers.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from corral.domain.records import Task
from corral.engine.project import Project
from corral.engine.shared_store import claimed, shipping
from corral.engine.shared_store import remote_branches as remote
from corral.errors import GitError, LeaseLost
from tests.workers.conftest import Team
from tests.workers.team import git

pytestmark = pytest.mark.slow


@pytest.fixture
def laptop_project(team: Team, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Project, Task, int]]:
    """The laptop's project opened here, a task queued from it, and the epoch a worker ("w-old") claimed."""
    laptop = team.laptop()
    for key in ("HOME", "CORRAL_HOME", "CORRAL_CONFIG_FILE"):
        monkeypatch.setenv(key, laptop.env()[key])
    laptop.corral("create", "Fenced", "--ref", "fenced")
    laptop.json("start", "fenced")  # queued: no worker runs here
    project = Project.open(laptop.clone)
    with project.store.read() as tx:
        task = tx.task_by_ref("fenced")
    assert task is not None
    lease = claimed.claim(
        project, claimed.Me("w-old", "old"), task.id, str(laptop.json("show", "fenced")["lease"]["command_id"])
    )
    assert lease is not None
    try:
        yield project, task, lease.epoch
    finally:
        project.close()


def test_a_fenced_workers_shipped_files_and_live_facts_are_never_written(
    laptop_project: tuple[Project, Task, int],
) -> None:
    project, task, epoch = laptop_project
    log = project.paths.turn_dir(task.id, 1) / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("before the takeover\n")
    assert shipping.ship(project, task.id, epoch) > 0  # while its epoch holds, it ships
    with project.store.write() as tx:
        assert tx.fence_off(task.id, epoch)  # another host's sweep: this worker was lost
    with log.open("a") as out:
        out.write("after the takeover\n")
    with pytest.raises(LeaseLost):
        shipping.ship(project, task.id, epoch)
    with pytest.raises(LeaseLost):
        shipping.ship_live(project, task, "any-command", epoch)
    with project.store.read() as tx:
        sizes = tx.shipped_sizes(task.id)
        live = tx.live([task.id])
    assert list(sizes.values()) == [len("before the takeover\n")] and live == {}


def test_a_wip_push_never_overwrites_a_wip_it_has_not_seen(
    team: Team, laptop_project: tuple[Project, Task, int]
) -> None:
    project, task, epoch = laptop_project
    worktree = project.repo  # any checkout of the repository serves as the turn's worktree here
    (worktree / "draft.txt").write_text("mine\n")
    mine = remote.push_wip(project, task, worktree, epoch=epoch, seen=None)
    assert mine is not None and git(team.remote, "rev-parse", remote.wip_ref(task)) == mine
    # Another worker's WIP lands there (the one that took the turn over, in the instant after this
    # worker's last look at its epoch): a push from what this worker saw refuses to replace it.
    other = team.root / "other"
    git(team.root, "clone", "-q", str(team.remote), str(other))
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-m", "their wip")
    git(other, "push", "-q", "--force", "origin", f"HEAD:{remote.wip_ref(task)}")
    theirs = git(team.remote, "rev-parse", remote.wip_ref(task))
    (worktree / "draft.txt").write_text("mine, more\n")
    with pytest.raises(GitError) as refused:
        remote.push_wip(project, task, worktree, epoch=epoch, seen=mine)
    assert refused.value.code == "push-failed" and "stale info" in refused.value.message
    assert git(team.remote, "rev-parse", remote.wip_ref(task)) == theirs
    # And once its epoch is taken over, it pushes nothing at all: the epoch is checked right before.
    with project.store.write() as tx:
        assert tx.fence_off(task.id, epoch)
    with pytest.raises(LeaseLost):
        remote.push_wip(project, task, worktree, epoch=epoch, seen=theirs)
    assert git(team.remote, "rev-parse", remote.wip_ref(task)) == theirs


def _counted(monkeypatch: pytest.MonkeyPatch, project: Project) -> dict[str, int]:
    """How many read and write transactions ``project``'s store opens from now on (each still the real one)."""
    opened = {"read": 0, "write": 0}
    for kind in opened:
        real = getattr(project.store, kind)

        def counting(*args: object, _real: Any = real, _kind: str = kind, **kwargs: object) -> Any:
            opened[_kind] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(project.store, kind, counting)
    return opened


def test_a_turns_files_ship_in_one_fenced_transaction_and_come_back_in_one_read(
    laptop_project: tuple[Project, Task, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker ships a turn's dozen files on every pass, and every other host brings them on each of its own:
    # a transaction a file held the store's write lock a dozen times a pass.
    project, task, epoch = laptop_project
    turn = project.paths.turn_dir(task.id, 1)
    turn.mkdir(parents=True, exist_ok=True)
    files = {turn / f"file-{i}.log": f"line {i}\n".encode() * (i + 1) for i in range(12)}
    for path, data in files.items():
        path.write_bytes(data)
    opened = _counted(monkeypatch, project)
    assert shipping.ship(project, task.id, epoch) == sum(len(d) for d in files.values())
    assert opened == {"read": 1, "write": 1}  # what the store holds already, then every file under one fence
    for path in files:
        path.unlink()
    opened.update(read=0, write=0)
    assert shipping.materialize(project, task.id) == sum(len(d) for d in files.values())
    assert opened == {"read": 1, "write": 0}
    assert {path: path.read_bytes() for path in files} == files


def test_a_file_larger_than_a_transactions_share_ships_in_one_of_its_own(
    laptop_project: tuple[Project, Task, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, task, epoch = laptop_project
    turn = project.paths.turn_dir(task.id, 1)
    turn.mkdir(parents=True, exist_ok=True)
    big = os.urandom(shipping.TX_BYTES + 10)
    (turn / "a-small.log").write_bytes(b"small\n")
    (turn / "b-big.log").write_bytes(big)
    (turn / "c-small.log").write_bytes(b"small too\n")
    opened = _counted(monkeypatch, project)
    assert shipping.ship(project, task.id, epoch) == len(big) + 16
    assert opened["write"] == 3  # the small one before it, the large one alone, then the one after
    with project.store.read() as tx:
        assert tx.shipped_sizes(task.id) == {
            str((turn / name).relative_to(project.paths.root)): size
            for name, size in (("a-small.log", 6), ("b-big.log", len(big)), ("c-small.log", 10))
        }
    (turn / "b-big.log").unlink()
    assert shipping.materialize(project, task.id) == len(big)
    assert (turn / "b-big.log").read_bytes() == big
