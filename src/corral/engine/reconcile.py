"""The reconciler: sweeps that bring stored status in line with what is true on disk.

It runs before read commands and on every daemon tick, and is idempotent.
"""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.project import Project


def sweep_blocked_without_session(project: Project) -> int:
    """Seed 002 sweep 6: a blocked task with no session has nothing to review → backlog."""
    with project.store.read() as tx:
        stray = [t.id for t in tx.tasks([Status.BLOCKED]) if t.session_id is None]
    if not stray:
        return 0
    moved = 0
    with project.store.write() as tx:
        for task_id in stray:
            task = tx.get_task(task_id)
            if task is not None and task.status is Status.BLOCKED and task.session_id is None:
                tx.set_status(
                    task_id,
                    Status.BACKLOG,
                    Actor.SYSTEM,
                    "blocked with no session",
                    expected_from=Status.BLOCKED,
                )
                moved += 1
    return moved


def reconcile(project: Project) -> None:
    sweep_blocked_without_session(project)
