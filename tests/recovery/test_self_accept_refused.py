"""An agent that moves its target onto its own work never gets its task completed.

Today's attack exactly: the agent runs ``git update-ref refs/heads/main HEAD`` in its worktree.
The ref guard puts ``main`` back after the turn and keeps the agent's version; and should the
put-back not happen (a hook refuses it, the supervisor dies in the middle), the merged-branch
sweep still refuses to complete a task whose work reached its target by the agent's own hand.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import ref_guard, ref_restore
from tests.conftest import CLI, FakeAgent, git

SELF_ACCEPT: list[dict[str, Any]] = [
    {"init": True},
    {"write": {"path": "feature.txt", "content": "the agent's work\n"}},
    {"commit": "the agent's work"},
    {"git": ["update-ref", "refs/heads/main", "HEAD"]},
    {"result": "done"},
]


def tip(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", ref)


def test_update_ref_of_main_does_not_complete_the_task(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    main = tip(repo, "main")
    agent.script(SELF_ACCEPT)
    corral.ok("create", "Self accept", "--ref", "sa")
    corral.ok("start", "sa", "--wait", "--timeout", "60")
    for _ in range(3):  # every later look (each one settles: the merged-branch sweep runs)
        doc = corral.json("show", "sa")
        assert doc["task"]["status"] == "blocked"
    assert tip(repo, "main") == main
    assert not (repo / "feature.txt").exists()
    kept = doc["refs_put_back"][0]["moves"][0]["kept"]
    assert kept.startswith("refs/corral/kept/sa/")
    assert tip(repo, kept) == tip(repo, "refs/heads/corral/sa")
    assert "corral put it back" in corral.ok("show", "sa").stdout


def test_a_put_back_that_is_refused_still_never_completes(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    """Defence in depth: the repository's own hook refuses corral's put-back (it lets only the
    agent's git, which carries the guard's hook, move main). The target keeps the agent's value,
    the turn says so, and the sweep refuses to take that for a merge."""
    hook = repo / ".git" / "hooks" / "reference-transaction"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(
        "#!/bin/sh\n"
        '[ "$1" = prepared ] || exit 0\n'
        'grep -q " refs/heads/main$" || exit 0\n'
        '[ -n "$GIT_CONFIG_COUNT" ] || { echo "main is moved by agents only" >&2; exit 1; }\n'
    )
    hook.chmod(0o755)
    agent.script(SELF_ACCEPT)
    corral.ok("create", "Self accept", "--ref", "stuck")
    corral.ok("start", "stuck", "--wait", "--timeout", "60")
    branch_tip = tip(repo, "refs/heads/corral/stuck")
    assert tip(repo, "main") == branch_tip  # the put-back was refused
    for _ in range(3):
        doc = corral.json("show", "stuck")
        assert doc["task"]["status"] == "blocked"  # not complete: the agent merged it itself
    (move,) = doc["refs_put_back"][0]["moves"]
    assert move["restored"] is False and "main is moved by agents only" in move["error"]
    assert "could NOT put it back" in corral.ok("show", "stuck").stdout


def test_a_supervisor_killed_between_keeping_and_putting_back_is_finished_by_the_reconciler(
    proj: Any, agent: FakeAgent, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = tip(repo, "main")
    agent.script(SELF_ACCEPT)
    task = tasks.create(proj, "Self accept", actor=Actor.HUMAN, ref="crashy")
    monkeypatch.setenv("CORRAL_CRASH_AT", "ref-guard.kept")  # the supervisor inherits it
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    monkeypatch.delenv("CORRAL_CRASH_AT")
    with proj.store.read() as tx:
        found = tx.task_by_ref("crashy")
        human = max(t.sequence for t in tx.turns(found.id))
        worktree = tx.get_session(found.session_id).worktree
    kept = ref_guard.kept_ref("crashy", human, "refs/heads/main")
    end = time.monotonic() + 30
    while not (proj.paths.protocol_dir(found.id) / proto.STATUS).exists() or not _dead(proj, found.id):
        assert time.monotonic() < end, "the supervisor did not die at the crash point"
        time.sleep(0.1)
    # Died exactly there: the agent's version kept, main not yet put back, no receipt.
    branch_tip = tip(repo, "refs/heads/corral/crashy")
    assert tip(repo, kept) == branch_tip
    assert tip(repo, "main") == branch_tip
    assert not (proj.paths.protocol_dir(found.id) / proto.RESPONSE).exists()
    settle(proj)  # the turn is lost → interrupted; the merged-branch sweep finds main on the task's tip
    with proj.store.read() as tx:
        again = tx.task_by_ref("crashy")
    assert again.status is Status.INTERRUPTED  # recoverable, and never complete
    assert tip(repo, "main") == main  # the interrupted put-back was finished
    assert tip(repo, kept) == branch_tip
    report = ref_restore.settle(
        proj.git, proj.paths.turn_dir(found.id, human), worktree, "corral/crashy", "crashy", human
    )
    assert report is not None and [m.restored for m in report.moves] == [True]
    settle(proj)
    with proj.store.read() as tx:
        assert tx.task_by_ref("crashy").status is Status.INTERRUPTED


def _dead(proj: Any, task_id: str) -> bool:
    status = proto.read_raw(proj.paths.protocol_dir(task_id) / proto.STATUS) or {}
    pid = status.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return state.startswith("Z") or not state
