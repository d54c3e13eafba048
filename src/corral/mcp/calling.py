"""A tool call: its context (the project, the caller), its arguments read by type and sanitized on the way in,
the :class:`Tool` it calls, and what a task-targeting tool answers with.

Every argument is sanitized at intake (docs/lifecycle.md, text intake): prose (a message, a question, a
reason, a comment, a prompt) has its control characters escaped with a note saying so; every
other string, and each element of an array (file paths, which become git argv), is escaped
without one. Nothing is rejected for its characters. A task-targeting tool answers with the
projection ``show --json`` renders (substate, live retry state, ``stopped_because``, ``next``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from msgspec import Struct

from corral.domain.explain import tool_call
from corral.domain.records import Task
from corral.domain.sanitize import sanitize_field, sanitize_prose
from corral.engine.api import Caller, LiveCache, LiveOf, Project, gates, queries
from corral.errors import UsageError

#: The turns a task-targeting result carries (``show`` takes ``last_turns`` for more or fewer).
RESULT_TURNS = 20
#: The most text a ``diff`` or ``logs`` result carries; the rest is cut, and the result says so.
TEXT_BYTES = 200_000

#: The tools that change nothing.
READ_ONLY = frozenset({"show", "list", "logs", "diff", "wait", "failures"})

#: Fields that become prose in a prompt or on the timeline: escaped with a disclosure note.
PROSE = frozenset({"message", "question", "reason", "body", "prompt", "entry"})


class Calling(Struct, frozen=True):
    """One tool call's context: the project (per thread: a store connection is not shared),
    the caller, and whether reads settle first (the daemon's own ticks keep its projects settled)."""

    project: Callable[[], Project]
    caller: Caller
    settles: bool = True
    #: Live facts kept a moment, for a door serving many calls a second (the daemon's); None: read each time.
    live: LiveCache | None = None

    def live_of(self) -> LiveOf | None:
        cache = self.live
        if cache is None:
            return None
        project = self.project()
        return lambda t: cache.facts(project, t)


class Args:
    """A call's arguments, read by type and sanitized on the way in."""

    def __init__(self, tool: str, raw: Mapping[str, Any] | None) -> None:
        self.tool = tool
        self.raw = dict(raw or {})
        #: The task a prefix of its ref matched, for a tool that changes it (``_target``): said in the result.
        self.matched: dict[str, Any] | None = None

    def _bad(self, name: str, want: str) -> UsageError:
        return UsageError(
            f"{self.tool}: '{name}' must be {want}.", code="bad-argument", hint=f"See the {self.tool} tool's schema."
        )

    def text(self, name: str, *, required: bool = False) -> str | None:
        value = self.raw.get(name)
        if value is None:
            if required:
                raise UsageError(
                    f"{self.tool} needs '{name}'.", code="missing-argument", hint=f"See the {self.tool} tool's schema."
                )
            return None
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        return sanitize_prose(value) if name in PROSE else sanitize_field(value)

    def need(self, name: str) -> str:
        value = self.text(name, required=True)
        assert value is not None
        return value

    def texts(self, name: str) -> list[str]:
        value = self.raw.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "a list of strings")
        return [sanitize_field(v) for v in value]

    def number(self, name: str, default: float | None = None, *, low: float = 0.0, high: float | None = None) -> float:
        value = self.raw.get(name, default)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._bad(name, "a number")
        return max(low, min(float(value), high)) if high is not None else max(low, float(value))

    def whole(self, name: str, default: int, *, low: int = 0, high: int | None = None) -> int:
        value = self.raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, "a whole number")
        return max(low, min(value, high)) if high is not None else max(low, value)

    def flag(self, name: str) -> bool:
        value = self.raw.get(name, False)
        if not isinstance(value, bool):
            raise self._bad(name, "true or false")
        return value


Run = Callable[[Calling, Args], dict[str, Any]]
Block = Callable[[Calling, Args, Callable[[Callable[[], Any]], Awaitable[Any]]], Awaitable[dict[str, Any]]]


class Tool(Struct, frozen=True):
    name: str
    description: str
    schema: dict[str, Any]
    run: Run | None = None  # a call that returns at once (run in a worker thread)
    block: Block | None = None  # a call that polls until something rests (``wait``, ``ask``)
    agents_only: bool = False
    #: Whether an answer is a failure the client must see as one (corral's shell: a non-zero exit
    #: the intent did not declare); every other answer is a success, a refusal an error.
    failed: Callable[[dict[str, Any]], bool] | None = None

    @property
    def read_only(self) -> bool:
        """Whether the tool changes nothing (MCP's ``readOnlyHint``: a client in a read-only mode
        — Claude Code's plan mode, Codex's ``auto`` approval — runs only these)."""
        return self.name in READ_ONLY


def projection(c: Calling, task: Task | str, last_turns: int = RESULT_TURNS) -> dict[str, Any]:
    """The ``show --json`` document of a task, as a task-targeting tool answers."""
    given = task.id if isinstance(task, Task) else task
    doc = queries.show_task(c.project(), given, last_turns=last_turns, settle=c.settles, live=c.live_of()).doc
    return {**doc, "next": tool_call(doc.get("next"))}  # the next step as the tool call that takes it


def task_of(c: Calling, tool: str, args: Args) -> Task:
    found = gates.aim(c.project(), c.caller, tool, args.need("task"))
    args.matched = found.matched_json()
    return found.task


def answer_with(c: Calling, task: Task, **extra: Any) -> dict[str, Any]:
    return {**extra, **projection(c, task)}


def cut_text(text: str) -> tuple[str, bool]:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= TEXT_BYTES:
        return text, False
    return data[:TEXT_BYTES].decode("utf-8", "ignore"), True
