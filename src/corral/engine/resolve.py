"""Turning what a person typed into a task: a ref, an id, or a unique prefix of either."""

from __future__ import annotations

import difflib

from corral.domain.records import Task
from corral.errors import AmbiguousTask, TaskNotFound, UsageError
from corral.store import Tx


def resolve_task(tx: Tx, given: str) -> Task:
    name = given.strip()
    if not name:
        raise UsageError("No task given.", hint="Name a task by its ref, its id, or a prefix of either.")
    task = tx.task_by_ref(name) or tx.get_task(name)
    if task is not None:
        return task
    matches = tx.match_tasks(name)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousTask(name, [f"{m.ref} ({m.id[:8]}, {m.status.value})" for m in matches])
    nearest = difflib.get_close_matches(name, tx.refs(near=name), n=3, cutoff=0.5)
    raise TaskNotFound(name, nearest)
