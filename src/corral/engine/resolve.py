"""Resolving what applies to a task: the task a person named (a ref, an id, or a unique prefix
of either), and the settings its turns run with.

A prefix is a convenience for reading. A command that changes a task takes one too, and its
answer says which task the prefix matched (:func:`resolve_for`: on stderr, and as
``matched_by_prefix`` in JSON); a command that ends or merges a task (:data:`WHOLE_REF`) takes only
the whole ref or id, and refuses a prefix naming the task it would have matched. The CLI and the
MCP tools apply the rule through the same call (``operations/gates.aim``); docs/cli.md#task-references.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from corral.domain.records import Task
from corral.domain.settings import TASK_SCOPED, host_owned
from corral.engine.config import Config, Value
from corral.errors import AmbiguousTask, PrefixRefused, TaskNotFound, UsageError
from corral.store import Tx


class Reach(StrEnum):
    """What a command does to the task it names, for how a prefix of its ref is taken."""

    READS = "reads"  # a prefix is taken silently
    CHANGES = "changes"  # a prefix is taken, and the answer says which task it matched
    WHOLE = "whole"  # the whole ref or id only: a prefix is refused


#: Commands (CLI commands and MCP tools alike) that end, merge or delete a task: not undone by a second command.
WHOLE_REF = frozenset({"accept", "close", "reject", "delete"})
#: Commands that change the task they name (its fields, its turns, its branch, its notes).
CHANGES = frozenset(
    {
        "edit",
        "start",
        "unblock",
        "resume",
        "ask",
        "stop",
        "sync",
        "pair",
        "chat",
        "submit",
        "reopen",
        "comment",
        "journal",
    }
)


def reach(command: str) -> Reach:
    if command in WHOLE_REF:
        return Reach.WHOLE
    return Reach.CHANGES if command in CHANGES else Reach.READS


class Resolved(Struct, frozen=True):
    """The task a command named; ``prefix`` is what was given when it was only a prefix of its ref or id."""

    task: Task
    prefix: str | None = None

    @property
    def note(self) -> str | None:
        """The line a person reads: which task the prefix matched."""
        if self.prefix is None:
            return None
        return f"{self.task.ref} ({self.task.id[:8]}), matched by prefix '{self.prefix}'"

    def matched_json(self) -> dict[str, Any] | None:
        if self.prefix is None:
            return None
        return {"given": self.prefix, "ref": self.task.ref, "id": self.task.id}


def resolve_for(tx: Tx, given: str, command: str) -> Resolved:
    """The task ``given`` names for ``command``, under the rule for prefixes (:func:`reach`): a
    prefix is refused (``PrefixRefused``) for a command in :data:`WHOLE_REF`, and said for one that
    changes the task."""
    task, prefix = _find(tx, given)
    how = reach(command)
    if prefix is not None and how is Reach.WHOLE:
        raise PrefixRefused(command, prefix, task.ref, task.id)
    return Resolved(task, prefix if how is Reach.CHANGES else None)


def resolve_task(tx: Tx, given: str) -> Task:
    """The task ``given`` names: its ref, its id, or a unique prefix of either (taken silently: for reading)."""
    return _find(tx, given)[0]


def _find(tx: Tx, given: str) -> tuple[Task, str | None]:
    """The task, and the name given when it matched only as a prefix."""
    name = given.strip()
    if not name:
        raise UsageError("No task given.", hint="Name a task by its ref, its id, or a prefix of either.")
    task = tx.task_by_ref(name) or tx.get_task(name)
    if task is not None:
        return task, None
    matches = tx.match_tasks(name)
    if len(matches) == 1:
        return matches[0], name
    if matches:
        raise AmbiguousTask(name, [f"{m.ref} ({m.id[:8]}, {m.status.value})" for m in matches])
    import difflib  # only a ref that matches nothing

    nearest = difflib.get_close_matches(name, tx.refs(near=name), n=3, cutoff=0.5)
    raise TaskNotFound(name, nearest)


def _in_range(name: str, entry: object) -> bool:
    from corral.domain.settings import BY_NAME

    if not isinstance(entry, dict):
        return False
    setting = BY_NAME.get(name)
    return setting is None or setting.refusal(entry.get("value")) is None


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
        if k in TASK_SCOPED
        and k in config.values
        and not (on_worker and host_owned(k))
        and _in_range(k, v)  # a value kept before ranges were checked, or another host's row
    }
    if not own:
        return config
    values = dict(config.values)
    for name, entry in own.items():
        source = "task" if entry.get("source") == "task" else "task_env"
        origin = entry.get("origin")
        values[name] = Value(entry["value"], source, origin if isinstance(origin, str) else None)
    return replace(config, values=values)
