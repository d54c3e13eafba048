"""The end of a pair session: its summary turn and the park, and the sweep of pairs whose process is gone."""

from __future__ import annotations

import json
from pathlib import Path

from corral.adapters.process import pid_alive
from corral.domain.actors import Actor, Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project


def pairing_lock(project: Project, task_id: str) -> Path:
    return project.paths.pairing_lock(task_id)


def end_pair(project: Project, task_id: str, actor: Actor, content: str) -> Task:
    """The pair is over: a summary turn, back to blocked or conflict, the lock removed."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        assert task is not None
        if task.status is Status.PAIRING:
            tx.add_turn(
                task.id,
                role=Role.HUMAN,
                actor=actor,
                kind="pair summary",
                content=content,
                session_id=task.session_id,
                ended_at=tx.now(),
            )
            tx.park(task.id, actor, "the pair session ended", expected_from=Status.PAIRING)
        tx.unregister_process(task.id, "pair")
        task = tx.get_task(task_id) or task
    try:
        pairing_lock(project, task_id).unlink()
    except FileNotFoundError:
        pass
    return task


def sweep_stale_pairs(project: Project) -> int:
    """A pairing task whose pair process is gone → blocked or conflict, lock removed (docs/lifecycle.md)."""
    with project.store.read() as tx:
        pairing = tx.tasks([Status.PAIRING])
    ended = 0
    for task in pairing:
        try:
            data = json.loads(pairing_lock(project, task.id).read_text())
            pid = int(data.get("pid", 0))
        except (OSError, ValueError):
            pid = 0
        if pid > 1 and pid_alive(pid):
            continue
        end_pair(project, task.id, Actor.SYSTEM, "The pair session ended without corral (its process is gone).")
        ended += 1
    return ended
