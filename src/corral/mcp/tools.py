"""corral's MCP tools: each a thin call of the lifecycle operation the CLI calls, with its input schema.

Every argument is sanitized at intake (docs/lifecycle.md, text intake): prose (a message, a question, a
reason, a comment, a prompt) has its control characters escaped with a note saying so; every
other string, and each element of an array (file paths, which become git argv), is escaped
without one. Nothing is rejected for its characters.

A task-targeting tool answers with the projection ``show --json`` renders (substate, live
retry state, ``stopped_because``, ``next``); ``list`` answers with a page of list rows. An
agent meets the gates of :mod:`corral.engine.operations.gates`; a builder meets none. Every
call is recorded with the caller's actor (``builder`` or ``agent``).

Blocking tools (``wait``, ``ask``) poll with the event loop free, so other calls (and other
waits) are answered meanwhile; each call returns within :data:`WAIT_CALL_SECONDS`, saying
whether to call again. This module is free of the SDK: :mod:`corral.mcp.server` adapts it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from corral.domain.actors import Role
from corral.domain.agent_tools import WAIT_CALL_SECONDS
from corral.domain.intents import DISPOSITIONS, ID_PATTERN, MAX_EXPECTED, MAX_TARGETS, PERMISSION_RESOURCES
from corral.domain.operations_table import Op, takes
from corral.domain.record import record, replace
from corral.domain.records import Task
from corral.domain.sanitize import sanitize_field, sanitize_prose
from corral.engine.api import (
    Caller,
    LiveCache,
    LiveOf,
    Project,
    control,
    gates,
    lookups,
    notices,
    queries,
    shell,
    tasks,
    turns,
)
from corral.errors import UsageError

#: How often a blocking tool looks again.
POLL_SECONDS = 0.5
#: The turns a task-targeting result carries (``show`` takes ``last_turns`` for more or fewer).
RESULT_TURNS = 20
#: A page of ``list``, and the most a caller may ask for.
PAGE_ROWS = 50
MAX_PAGE_ROWS = 500
#: The most text a ``diff`` or ``logs`` result carries; the rest is cut, and the result says so.
TEXT_BYTES = 200_000

#: The channel whose receipts record which incident notices a tool caller was shown.
NOTICE_CHANNEL = "mcp"

#: The tools that change nothing.
READ_ONLY = frozenset({"show", "list", "logs", "diff", "wait", "failures"})

#: Fields that become prose in a prompt or on the timeline: escaped with a disclosure note.
PROSE = frozenset({"message", "question", "reason", "body", "prompt", "entry"})


@record
class Calling:
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


@record
class Tool:
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


# -- results -----------------------------------------------------------------------------------


def projection(c: Calling, task: Task | str, last_turns: int = RESULT_TURNS) -> dict[str, Any]:
    """The ``show --json`` document of a task, as a task-targeting tool answers."""
    given = task.id if isinstance(task, Task) else task
    return queries.show_task(c.project(), given, last_turns=last_turns, settle=c.settles, live=c.live_of()).doc


def _target(c: Calling, tool: str, args: Args) -> Task:
    found = gates.aim(c.project(), c.caller, tool, args.need("task"))
    args.matched = found.matched_json()
    return found.task


def _answer(c: Calling, task: Task, **extra: Any) -> dict[str, Any]:
    return {**extra, **projection(c, task)}


def _cut(text: str) -> tuple[str, bool]:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= TEXT_BYTES:
        return text, False
    return data[:TEXT_BYTES].decode("utf-8", "ignore"), True


# -- the tools ---------------------------------------------------------------------------------


def _create(c: Calling, a: Args) -> dict[str, Any]:
    project = c.project()
    parent = gates.parent_for_create(c.caller, a.text("parent"), project)
    made = tasks.create(
        project,
        a.need("goal"),
        actor=c.caller.actor,
        ref=a.text("ref"),
        parent=parent,
        harness=a.text("harness"),
        model=a.text("model"),
        protect=a.texts("protect"),
        prompt=a.text("prompt") or "",
        target=a.text("target") if parent is None else None,
    )
    return _answer(c, made)


def _start(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "start", a)
    started = turns.start(c.project(), task.id, actor=c.caller.actor, message=a.text("message"))
    return _answer(c, started.task, command_id=started.launched.command_id)


def _unblock(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "unblock", a)
    started = turns.unblock(
        c.project(),
        task.id,
        actor=c.caller.actor,
        message=a.text("message") or ("" if a.flag("retry_blocked") else a.need("message")),
        approve=a.texts("approved_files"),
        revert=a.texts("reverted_files"),
        revert_rest=a.flag("revert_unapproved"),
        retry_blocked=a.flag("retry_blocked"),
    )
    return _answer(c, started.task, command_id=started.launched.command_id)


def _resume(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "resume", a)
    started = turns.resume(c.project(), task.id, actor=c.caller.actor)
    return _answer(c, started.task, command_id=started.launched.command_id)


def _stop(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "stop", a)
    return _answer(c, control.stop(c.project(), task.id, actor=c.caller.actor))


def _sync(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import sync

    task = _target(c, "sync", a)
    result = sync(c.project(), task.id, actor=c.caller.actor)
    return _answer(c, result.task, sync={"state": result.state, "head": result.head})


def _edit(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "edit", a)
    protect = a.texts("protect") if "protect" in a.raw else None
    edited = tasks.edit(
        c.project(),
        task.id,
        goal=a.text("goal"),
        prompt=a.text("prompt"),
        protect=protect,
        harness=a.text("harness"),
        model=a.text("model"),
        target=a.text("target"),
        actor=c.caller.actor,
    )
    return _answer(c, edited)


def _show(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "show", a)
    return projection(c, task, a.whole("last_turns", RESULT_TURNS, low=0, high=10_000))


def _list(c: Calling, a: Args) -> dict[str, Any]:
    caller = c.caller
    which = a.text("which")
    cursor = a.text("cursor") or "0"
    if not (cursor.isascii() and cursor.isdigit()):
        raise UsageError(
            f"'{cursor}' is not a cursor list gave.", code="bad-cursor", hint="Pass next_cursor from the previous page."
        )
    offset = int(cursor)
    page = queries.list_page(
        c.project(),
        None if which in (None, "", "unfinished") else which,
        offset=max(0, offset),
        limit=a.whole("limit", PAGE_ROWS, low=1, high=MAX_PAGE_ROWS),
        subtree_of=caller.task_id,
        settle=c.settles,
        live=c.live_of(),
    )
    return {
        "rows": page.rows,
        "total": page.total,
        "next_cursor": str(page.next_offset) if page.next_offset is not None else None,
    }


def _logs(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import Line, TurnLog, log_text
    from corral.engine.api import logs as turn_logs

    task = _target(c, "logs", a)
    project = c.project()
    turn = a.raw.get("turn")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int)):
        raise a._bad("turn", "a whole number")
    seq = turn_logs.pick_turn(project, task, turn)
    harness = log_text.harness_of(project, task)
    reader = TurnLog(project.paths.turn_dir(task.id, seq))
    lines: list[str] = []
    for piece in reader.finish():
        if isinstance(piece, Line):
            lines.extend(log_text.readable(harness, piece))
    last = a.whole("tail_lines", 200, low=1, high=100_000)
    text, cut = _cut("\n".join(lines[-last:]))
    return {"task": task.ref, "turn": seq, "lines": len(lines), "text": text, "truncated": cut or len(lines) > last}


def _diff(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "diff", a)
    caller = c.caller
    found = tasks.diff(
        c.project(), task.id, stat=a.flag("stat"), actor=caller.actor, caller_task_id=caller.task_id, surface="mcp"
    )
    text, cut = _cut(found.text)
    return {
        "task": task.ref,
        "base": found.base,
        "tip": found.tip,
        "commits": found.commits,
        "diff": text,
        "truncated": cut,
        "uncommitted": list(found.uncommitted),
    }


def _accept(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import accept

    task = _target(c, "accept", a)
    # No one to ask here: a branch moved since this caller's diff is refused (tip-moved) unless ``tip`` pins it.
    done = accept.accept(c.project(), task.id, actor=c.caller.actor, caller_task_id=c.caller.task_id, tip=a.text("tip"))
    extra: dict[str, Any] = {"commit": done.commit, "already_accepted": done.already, "warning": done.warning}
    if done.conflict is not None:
        extra["restore_conflict"] = done.conflict.to_json()
    return _answer(c, done.task, **extra)


def _submit(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import submit

    task = _target(c, "submit", a)
    done = submit(c.project(), task.id, actor=c.caller.actor)
    return _answer(c, task, submitted={"remote": done.remote, "branch": done.branch, "pull_request": done.pull_request})


def _ender(how: str) -> Run:
    def run(c: Calling, a: Args) -> dict[str, Any]:
        task = _target(c, how, a)
        ended = tasks.abandon(c.project(), task.id, reason=a.need("reason"), actor=c.caller.actor, how=how)
        return _answer(c, ended.task, archived=ended.archived, warning=ended.warning)

    return run


def _reopen(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "reopen", a)
    return _answer(c, tasks.reopen(c.project(), task.id, reason=a.text("reason"), actor=c.caller.actor))


def _comment(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import note_json

    task = _target(c, "comment", a)
    note = tasks.comment(c.project(), task.id, a.need("body"), actor=c.caller.actor)
    return {"task": task.ref, "comment": note_json(note)}


def _journal(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import note_json

    task = _target(c, "journal", a)
    entry = a.text("entry")
    if entry is not None:
        tasks.journal_add(c.project(), task.id, entry, actor=c.caller.actor)
    found, entries = tasks.journal(c.project(), task.id)
    return {"task": found.ref, "journal": [note_json(n) for n in entries]}


def _update_progress(c: Calling, a: Args) -> dict[str, Any]:
    from corral.engine.api import post_progress

    own = gates.require_agent(c.caller, "update_progress")
    raw = a.raw.get("message")
    if not isinstance(raw, str):
        raise a._bad("message", "a string")
    posted = post_progress(c.project(), own, sanitize_field(raw))
    return {"message": posted.message, "truncated": posted.truncated}


def _failures(c: Calling, a: Args) -> dict[str, Any]:
    task = _target(c, "failures", a)
    found = queries.failures(
        c.project(),
        task.id,
        history=a.flag("history"),
        raw=a.flag("raw"),
        session=a.text("session"),
        cursor=a.text("cursor"),
        max_bytes=a.whole("max_bytes", 64_000, low=1024) if "max_bytes" in a.raw else None,
    )
    return {"task": task.ref, **found.doc}


# -- confined runs: the shell with intents, and dispositions ------------------------------------


def _bash(c: Calling, a: Args) -> dict[str, Any]:
    turn = shell.own_turn(c.project(), c.caller, "bash")
    timeout = a.number("timeout_seconds", shell.SHELL_SECONDS, low=1.0, high=shell.SHELL_MAX_SECONDS)
    return shell.run(turn, a.need("command"), a.raw, timeout)


def _failure_disposition(c: Calling, a: Args) -> dict[str, Any]:
    return shell.dispose(shell.own_turn(c.project(), c.caller, "failure_disposition"), a.raw)


# -- blocking tools ------------------------------------------------------------------------------


def _fresh(c: Calling) -> Project:
    """The caller's project as it is now: settled first where the door does (stdio; the daemon's ticks
    keep its own projects settled)."""
    project = c.project()
    if c.settles:
        from corral.engine.api import settle

        settle(project)
    return project


def _bound(a: Args) -> float:
    return a.number("timeout_seconds", WAIT_CALL_SECONDS, low=0.0, high=WAIT_CALL_SECONDS)


def _tracking(c: Calling, targets: Sequence[str]) -> Any:
    """The caller's wait marker and interval while it waits (an agent's only: a builder has no turn)."""
    if not c.caller.is_agent or c.caller.task_id is None:
        return nullcontext(lambda _outcome: None)
    from corral.engine.api import track_wait

    project = c.project()
    current = lookups.current_command(project, c.caller.task_id)
    return track_wait(project, c.caller.task_id, list(targets), current.sequence + 1 if current else None)


async def _wait(c: Calling, a: Args, off: Callable[[Callable[[], Any]], Awaitable[Any]]) -> dict[str, Any]:
    task = await off(lambda: _target(c, "wait", a))
    bound = _bound(a)
    shown: list[dict[str, Any]] = []

    def look() -> Task:
        project = _fresh(c)
        now = lookups.task_row(project, task.id) or task
        notices.deliver(project, now, NOTICE_CHANNEL, lambda n: shown.append(n.to_json()), project.clock())
        return now

    import anyio

    started = time.monotonic()
    with await off(lambda: _tracking(c, [task.ref])) as outcome:
        try:
            while True:
                now = await off(look)
                rests = control.rests(now)
                if rests or time.monotonic() - started >= bound:
                    break
                await anyio.sleep(min(POLL_SECONDS, max(0.0, bound - (time.monotonic() - started))))
            outcome("rested" if rests else "timeout")
        except BaseException:
            outcome("cancelled")
            raise
    doc = await off(lambda: projection(c, now))
    return {
        "rests": rests,
        "call_again": not rests,
        "waited_s": round(time.monotonic() - started, 1),
        "notices": shown,
        **doc,
    }


async def _ask(c: Calling, a: Args, off: Callable[[Callable[[], Any]], Awaitable[Any]]) -> dict[str, Any]:
    task = await off(lambda: _target(c, "ask", a))
    question = a.need("question")
    started = await off(lambda: turns.ask(c.project(), task.id, actor=c.caller.actor, question=question))
    bound = _bound(a)

    def look() -> Any:
        project = _fresh(c)
        return lookups.turn_by_command(project, started.launched.command_id, Role.AGENT)

    import anyio

    begun = time.monotonic()
    answer = None
    with await off(lambda: _tracking(c, [task.ref])) as outcome:
        try:
            while answer is None and time.monotonic() - begun < bound:
                await anyio.sleep(POLL_SECONDS)
                answer = await off(look)
            outcome("rested" if answer is not None else "timeout")
        except BaseException:
            outcome("cancelled")
            raise
    if answer is None:
        return {
            "answered": False,
            "answer": None,
            "command_id": started.launched.command_id,
            "next": f"The answer lands in {task.ref}'s turns: call show on it later.",
        }
    return {
        "answered": answer.kind == "ask",
        "answer": answer.content,
        "kind": answer.kind,
        "failure": answer.failure.to_json() if answer.failure else None,
        "command_id": started.launched.command_id,
    }


# -- schemas -------------------------------------------------------------------------------------


def _schema(required: Sequence[str] = (), **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _s(what: str) -> dict[str, Any]:
    return {"type": "string", "description": what}


def _list_of(what: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": what}


_TASK = _s("the task's ref, id or a unique prefix of either")
_WAIT = {
    "type": "number",
    "minimum": 0,
    "maximum": WAIT_CALL_SECONDS,
    "description": f"return after this many seconds if it still runs (at most {WAIT_CALL_SECONDS:g})",
}


def _takes(tool: Tool) -> Tool:
    """A lifecycle tool's description ends with the statuses it takes, asked of the operations table."""
    op = next((op for op in Op if op.value == tool.name), None)
    if op is None:
        return tool
    return replace(tool, description=f"{tool.description} Takes a task that is {takes(op)}.")


TOOLS: dict[str, Tool] = {
    t.name: _takes(t)
    for t in (
        Tool(
            "create",
            "Create a task in the backlog. A task agent's tasks are always subtasks of its own task; "
            "a subtask merges into its parent's branch.",
            _schema(
                ["goal"],
                goal=_s("one line: what the task is to achieve"),
                prompt=_s("more detail for the agent (prose)"),
                ref=_s("a name for the task (default: from the goal)"),
                parent=_s("the parent task (a builder only; an agent's parent is its own task)"),
                harness=_s("claude, codex, pi or command (default: the settings')"),
                model=_s("the model passed to the harness"),
                protect=_list_of("path patterns the agent may not change without a decision"),
                target=_s("the branch a top-level task merges into (default: the current branch)"),
            ),
            run=_create,
        ),
        Tool(
            "start",
            "Start a backlog task: its branch and worktree are made and its agent runs (→ working).",
            _schema(["task"], task=_TASK, message=_s("said to the agent with the goal and prompt")),
            run=_start,
        ),
        Tool(
            "unblock",
            "Give a resting task feedback and run its agent again. With protected-file violations pending, "
            "approved_files (kept) and reverted_files (undone) decide them.",
            _schema(
                ["task"],
                task=_TASK,
                message=_s("the feedback, delivered verbatim (may be left out with retry_blocked)"),
                approved_files=_list_of("protected paths whose change is kept"),
                reverted_files=_list_of("protected paths whose change is undone"),
                revert_unapproved={"type": "boolean", "description": "revert every pending path not approved"},
                retry_blocked={
                    "type": "boolean",
                    "description": "confirm one retry of the operation the agent reported blocked by a permission",
                },
            ),
            run=_unblock,
        ),
        Tool(
            "resume",
            "Continue an interrupted task without feedback (pending feedback is redelivered).",
            _schema(["task"], task=_TASK),
            run=_resume,
        ),
        Tool(
            "ask",
            "Ask a task's agent a question, read-only; waits for the answer (bounded) and returns it.",
            _schema(["task", "question"], task=_TASK, question=_s("the question"), timeout_seconds=_WAIT),
            block=_ask,
        ),
        Tool(
            "wait",
            "Wait until the task rests (its turn ended), bounded per call. Returns the task's projection and "
            "rests=true, or rests=false and call_again=true: then call wait again.",
            _schema(["task"], task=_TASK, timeout_seconds=_WAIT),
            block=_wait,
        ),
        Tool(
            "stop", "End the task's running turn; its feedback stays pending.", _schema(["task"], task=_TASK), run=_stop
        ),
        Tool(
            "sync",
            "Merge the task's target into its branch while it rests.",
            _schema(["task"], task=_TASK),
            run=_sync,
        ),
        Tool(
            "edit",
            "Change a task that is not finished: goal, prompt, protected paths, harness, model, target.",
            _schema(
                ["task"],
                task=_TASK,
                goal=_s("the new goal"),
                prompt=_s("the new prompt"),
                protect=_list_of("the new protected path patterns"),
                harness=_s("the new harness"),
                model=_s("the new model"),
                target=_s("the new target branch"),
            ),
            run=_edit,
        ),
        Tool(
            "show",
            "A task's whole read model: status, substate, live retry state, stopped_because, next, its turns.",
            _schema(
                ["task"],
                task=_TASK,
                last_turns={
                    "type": "integer",
                    "minimum": 0,
                    "description": f"turns to include (default {RESULT_TURNS})",
                },
            ),
            run=_show,
        ),
        Tool(
            "list",
            "Tasks, a page of rows at a time (a task agent sees its own task and its subtasks).",
            _schema(
                [],
                which={"type": "string", "enum": ["unfinished", "active", "blocked", "all"]},
                cursor=_s("next_cursor of the previous page"),
                limit={"type": "integer", "minimum": 1, "maximum": MAX_PAGE_ROWS},
            ),
            run=_list,
        ),
        Tool(
            "logs",
            "The readable harness output of a turn (the latest by default), its last lines.",
            _schema(
                ["task"],
                task=_TASK,
                turn={"type": "integer", "description": "the turn's sequence number"},
                tail_lines={"type": "integer", "minimum": 1},
            ),
            run=_logs,
        ),
        Tool(
            "diff",
            "What the task's branch changed since it started, read from its commits; tip is the commit shown "
            "(accept merges it), uncommitted the worktree's paths accept does not merge.",
            _schema(["task"], task=_TASK, stat={"type": "boolean"}),
            run=_diff,
        ),
        Tool(
            "accept",
            "Merge a task into its target and complete it. A task agent may accept its direct subtasks "
            "only (into its own branch), never its own task. When the branch moved since your last diff of "
            "it, accept refuses (tip-moved) naming the new commits: look at them, then accept with tip.",
            _schema(
                ["task"], task=_TASK, tip=_s("the commit to merge (diff's tip): refused unless the branch is at it")
            ),
            run=_accept,
        ),
        Tool(
            "submit",
            "Push the task's branch to the remote (and open a pull request where a forge is set).",
            _schema(["task"], task=_TASK),
            run=_submit,
        ),
        Tool(
            "reject",
            "Abandon a resting task's work as wrong (it is saved and archived).",
            _schema(["task", "reason"], task=_TASK, reason=_s("why")),
            run=_ender("reject"),
        ),
        Tool(
            "close",
            "Abandon a resting task as no longer needed (its work is saved and archived).",
            _schema(["task", "reason"], task=_TASK, reason=_s("why")),
            run=_ender("close"),
        ),
        Tool(
            "reopen",
            "Bring back a complete or abandoned task.",
            _schema(["task"], task=_TASK, reason=_s("why (needed for a complete task)")),
            run=_reopen,
        ),
        Tool(
            "comment",
            "Leave a comment on the task's timeline.",
            _schema(["task", "body"], task=_TASK, body=_s("the comment")),
            run=_comment,
        ),
        Tool(
            "journal",
            "Read the task's decision journal; with entry, add one first (rationale, decisions, deferrals).",
            _schema(["task"], task=_TASK, entry=_s("a journal entry to add")),
            run=_journal,
        ),
        Tool(
            "update_progress",
            "Post a short line saying what you are doing now (task agents only; latest wins, never stored). "
            "Shown as working(agent: <message>).",
            _schema(["message"], message=_s("at most 120 characters; longer is cut, and the result says so")),
            run=_update_progress,
            agents_only=True,
        ),
        Tool(
            "bash",
            "Run a shell command in your worktree, inside your turn's sandbox (confined turns only); whatever it "
            "starts, in the background or detached, ends with your turn. Optional "
            "intent: operationId names one logical operation across modified retries (a later success with "
            "the same operationId recovers its failure); attemptId names this execution (never reuse one); "
            "expectedExitCodes declares intended non-zero exits (e.g. [1] for a grep with no match).",
            _schema(
                ["command"],
                command=_s("the shell command (sh -c)"),
                timeout_seconds={"type": "number", "minimum": 1, "maximum": shell.SHELL_MAX_SECONDS},
                operationId={"type": "string", "pattern": ID_PATTERN},
                attemptId={"type": "string", "pattern": ID_PATTERN},
                expectedExitCodes={
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0, "maximum": 255},
                    "maxItems": MAX_EXPECTED,
                },
            ),
            run=_bash,
            agents_only=True,
            failed=lambda doc: doc.get("exit_code") != 0 and not doc.get("expected"),
        ),
        Tool(
            "failure_disposition",
            "Classify your own failed tool calls (confined turns only): recovered or superseded (evidence: a "
            "successful attempt that started after the failure), expected, or open (it needs the person; "
            "permissionResource says which permission blocked it).",
            _schema(
                ["disposition", "targets", "reason"],
                disposition={"type": "string", "enum": list(DISPOSITIONS)},
                targets={
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": MAX_TARGETS,
                    "description": "incident ids, attemptIds, operationIds or tool call ids",
                },
                reason={"type": "string", "maxLength": 400},
                evidence={
                    "type": "string",
                    "maxLength": 200,
                    "description": "the attemptId or call id of a later success",
                },
                permissionResource={"type": "string", "enum": list(PERMISSION_RESOURCES)},
            ),
            run=_failure_disposition,
            agents_only=True,
        ),
        Tool(
            "failures",
            "The task's incidents (tool, model and supervision failures of its session), those needing action "
            "first; history=true for every one.",
            _schema(
                ["task"],
                task=_TASK,
                history={"type": "boolean"},
                raw={"type": "boolean"},
                session=_s("a session id (default: the current one)"),
                cursor=_s("next_cursor of the previous page"),
                max_bytes={"type": "integer", "minimum": 1024},
            ),
            run=_failures,
        ),
    )
}


def visible(caller: Caller) -> list[Tool]:
    """The tools a caller is offered (``update_progress`` to task agents only)."""
    return [t for t in TOOLS.values() if caller.is_agent or not t.agents_only]
