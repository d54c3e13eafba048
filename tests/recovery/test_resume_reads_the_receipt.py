"""A resume after a crash takes clean or dirty from the crashed turn's receipt, which the supervisor
wrote from its one worktree scan at the turn's end, instead of scanning the worktree again."""

from __future__ import annotations

from pathlib import Path

from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from tests.conftest import git
from tests.turns.conftest import ok

CRASH_MID_EDIT = [{"init": True}, {"write": {"path": "half.py", "content": "def f(:\n"}}, {"kill": "KILL"}]


def test_the_receipts_dirty_is_what_the_resume_uses(proj, agent) -> None:  # type: ignore[no-untyped-def]
    agent.script(ok("first"), CRASH_MID_EDIT, ok("resumed"))
    task = tasks.create(proj, "Resume from the receipt", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="Add f()")
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.INTERRUPTED
    with proj.store.read() as tx:
        crashed = [t for t in tx.turns(task.id) if t.role is Role.AGENT][-1]
        worktree = Path(tx.get_session(tx.get_task(task.id).session_id).worktree)
    assert crashed.details["dirty"] is True  # the supervisor's scan at the turn's end saw half.py
    # The worktree is made clean behind corral's back: a resume that scanned again would call it clean.
    (worktree / "half.py").unlink()
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""

    turns.resume(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    assert agent.calls()[2]["prompt"] == prompts.resume_after_crash(True, ["Add f()"])
