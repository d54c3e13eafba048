"""Resolving what applies to a task: the task a person named (a ref, an id, or a unique prefix
of either), and the settings its turns run with."""

from __future__ import annotations

from corral.domain.record import replace
from corral.domain.records import Task
from corral.domain.settings import TASK_SCOPED, host_owned
from corral.engine.config import Config, Value
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
    import difflib  # only a ref that matches nothing

    nearest = difflib.get_close_matches(name, tx.refs(near=name), n=3, cutoff=0.5)
    raise TaskNotFound(name, nearest)


def task_config(config: Config, task: Task, *, on_worker: bool = False) -> Config:
    """``config`` with the settings ``task`` keeps as its own laid over it (docs/architecture.md#a-tasks-own-settings).

    What the task recorded wins over this process's environment and files: a turn that the
    system launches later (an auto-resume, a redelivery) runs as the person launched it. On a
    worker (``on_worker``) the task's settings that widen what an agent may do or make corral
    execute something are the host's own, whoever queued the turn (docs/workers.md#trust).
    """
    own = {
        k: v
        for k, v in task.settings.items()
        if k in TASK_SCOPED and k in config.values and not (on_worker and host_owned(k))
    }
    if not own:
        return config
    values = dict(config.values)
    for name, entry in own.items():
        source = "task" if entry.get("source") == "task" else "task_env"
        origin = entry.get("origin")
        values[name] = Value(entry["value"], source, origin if isinstance(origin, str) else None)
    return replace(config, values=values)
