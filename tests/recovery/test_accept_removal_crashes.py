"""accept removes the worktree and branch after the task is recorded complete, and a removal that dies
at any of its points is finished by the reconciler: worktree gone (and forgotten by git), branch deleted,
its tip archived, nothing left to delete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.recovery import removals
from corral.engine.recovery.reconcile import reconcile
from tests.conftest import git

POINTS = ["removal.recorded", "removal.moved", "removal.pruned", "removal.retired"]


def work(ref: str) -> list[dict[str, Any]]:
    return [
        {"init": True},
        {"write": {"path": f"{ref}.txt", "content": f"work of {ref}\n"}},
        {"commit": f"work of {ref}"},
        {"result": f"Did {ref}."},
    ]


def cli(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=repo,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def ready(proj, agent, refs: list[str]) -> dict[str, tuple[str, Path, str]]:  # type: ignore[no-untyped-def]
    """Each ref blocked with one commit: (task id, worktree, branch tip)."""
    agent.script(*(work(ref) for ref in refs))
    found = {}
    for ref in refs:
        task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
        turns.start(proj, ref, actor=Actor.HUMAN)
        assert control.wait(proj, ref, timeout=30).task.status is Status.BLOCKED
        with proj.store.read() as tx:
            worktree = Path(tx.get_session(tx.get_task(task.id).session_id).worktree)
        found[ref] = (task.id, worktree, git(proj.repo, "rev-parse", f"refs/heads/corral/{ref}"))
    return found


def assert_removed(proj, ref: str, task_id: str, worktree: Path, tip: str) -> None:  # type: ignore[no-untyped-def]
    repo = proj.repo
    with proj.store.read() as tx:
        assert tx.get_task(task_id).status is Status.COMPLETE
    assert (repo / f"{ref}.txt").read_text() == f"work of {ref}\n"  # the merge stands
    assert not worktree.exists()
    assert str(worktree) not in git(repo, "worktree", "list", "--porcelain")
    assert git(repo, "for-each-ref", f"refs/heads/corral/{ref}") == ""
    assert git(repo, "rev-parse", f"refs/corral/archive/{ref}") == tip
    assert not (proj.paths.root / "removals" / f"{task_id}.json").exists()
    trash = removals.trash_dir(proj)
    deadline = time.monotonic() + 20
    while trash.exists() and any(e.is_dir() for e in trash.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the detached rm deletes the renamed worktree's files
    assert not trash.exists() or not any(e.is_dir() for e in trash.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_removal_that_dies_at_each_point_is_finished_by_the_reconciler(proj, agent, repo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    refs = [f"rm-{i}" for i in range(len(POINTS) + 1)]
    made = ready(proj, agent, refs)
    trace = tmp_path / "trace"
    whole = cli(repo, "accept", refs[-1], env={"CORRAL_CRASH_TRACE": str(trace)})
    assert whole.returncode == 0, whole.stderr
    passed = [p.split("#")[0] for p in trace.read_text().split()]
    assert [p for p in passed if p.startswith("removal.")] == POINTS  # in this order, each once
    assert passed.index("accept.completed") > passed.index("removal.recorded")  # written down before complete
    assert_removed(proj, refs[-1], *made[refs[-1]])
    for ref, point in zip(refs, POINTS, strict=False):
        died = cli(repo, "accept", ref, env={"CORRAL_CRASH_AT": point, "CORRAL_CRASH_HOW": "kill"})
        assert died.returncode == -signal.SIGKILL, (point, died.stderr)
        assert (proj.paths.root / "removals" / f"{made[ref][0]}.json").exists(), point
        reconcile(proj)
        assert_removed(proj, ref, *made[ref])


def test_a_note_of_an_accept_that_did_not_complete_is_dropped_and_the_worktree_kept(proj, agent, repo) -> None:  # type: ignore[no-untyped-def]
    made = ready(proj, agent, ["kept"])
    task_id, worktree, tip = made["kept"]
    with proj.store.read() as tx:
        task = tx.get_task(task_id)
    removals.record(proj, task, str(worktree), "corral/kept", tip)  # as an accept that then failed would leave it
    reconcile(proj)
    assert not (proj.paths.root / "removals" / f"{task_id}.json").exists()
    assert worktree.is_dir() and git(repo, "rev-parse", "refs/heads/corral/kept") == tip
