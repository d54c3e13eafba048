"""A forge accept killed at each of its points is recovered by the reconciler's settle (remote sync)."""

from __future__ import annotations

import os
import subprocess
import sys

from corral.domain.status import Status
from corral.engine.operations.refresh import settle
from tests.conftest import git
from tests.forge.test_forge_accept import blocked_with, task_of, work

POINTS = [
    "forge-accept.marked",
    "forge-accept.pushed",
    "forge-accept.opened",
    "forge-accept.asked",
    "forge-accept.completed",
]


def test_a_forge_accept_killed_at_each_point_is_recovered(fproj, agent, repo):
    proj, forge = fproj()
    for i, point in enumerate(POINTS):
        ref = f"crash-{i}"
        blocked_with(proj, agent, ref, work(f"c{i}.txt", f"{i}\n"))
        tip = git(repo, "rev-parse", f"corral/{ref}")
        died = subprocess.run(
            [sys.executable, "-m", "corral", "accept", ref],
            cwd=repo,
            capture_output=True,
            text=True,
            env={**os.environ, "CORRAL_CRASH_AT": point, "CORRAL_CRASH_HOW": "kill"},
        )
        assert died.returncode == -9, died.stderr
        (proj.paths.root / "forge-sync.json").unlink(missing_ok=True)  # the next poll is due
        settle(proj)
        task = task_of(proj, ref)
        merged = [p for p in forge.pulls.values() if p.head == f"corral/{ref}" and p.state == "MERGED"]
        if point in ("forge-accept.asked", "forge-accept.completed"):  # the forge merged it: completed
            assert task.status is Status.COMPLETE, point
            assert merged and merged[0].head_oid == tip
            assert not proj.paths.worktree(ref).exists(), point
            assert git(repo, "rev-parse", f"refs/corral/archive/{ref}") == tip
        else:  # the forge was never asked to merge: back to blocked, for the next accept
            assert task.status is Status.BLOCKED, point
            assert not merged and proj.paths.worktree(ref).exists()
            with proj.store.read() as tx:
                assert "died before it asked to merge" in tx.status_changes(task.id)[-1].reason
    again = subprocess.run(
        [sys.executable, "-m", "corral", "accept", "crash-2"], cwd=repo, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert task_of(proj, "crash-2").status is Status.COMPLETE
    assert len([p for p in forge.pulls.values() if p.head == "corral/crash-2"]) == 1  # its pull request, reused
