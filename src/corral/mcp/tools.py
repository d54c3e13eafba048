"""corral's MCP tools: each a thin call of the lifecycle operation the CLI calls, with its input schema.

:data:`TOOLS` names every tool with its description and schema, and what it runs: a call that
answers at once (:mod:`corral.mcp.handlers`) or one that blocks (:mod:`corral.mcp.blocking`);
a call's context and arguments are :mod:`corral.mcp.calling`'s. A lifecycle tool's description
ends with the statuses it takes, asked of the operations table. This module is free of the SDK:
:mod:`corral.mcp.server` adapts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgspec.structs import replace

from corral.domain.agent_tools import WAIT_CALL_SECONDS
from corral.domain.intents import DISPOSITIONS, ID_PATTERN, MAX_EXPECTED, MAX_TARGETS, PERMISSION_RESOURCES
from corral.domain.operations_table import Op, takes
from corral.engine.api import Caller, shell
from corral.mcp import blocking, handlers
from corral.mcp.calling import RESULT_TURNS, Args, Calling, Run, Tool
from corral.mcp.handlers import MAX_PAGE_ROWS


def _schema(required: Sequence[str] = (), **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _s(what: str) -> dict[str, Any]:
    return {"type": "string", "description": what}


def _list_of(what: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": what}


def _optional(schema: dict[str, Any], what: str | None = None) -> dict[str, Any]:
    """An optional field that may also be null: null (like an empty string) declares nothing, as omitting
    it does (corral.domain.intents), so a model whose schemas are nullable is understood."""
    return {"anyOf": [schema, {"type": "null"}], **({"description": what} if what else {})}


def _null_is_absent(run: Run, *names: str) -> Run:
    """``run`` with the optional arguments ``names`` read as omitted when they are null (the intent's are
    read so by the shell itself)."""

    def call(c: Calling, a: Args) -> dict[str, Any]:
        for name in names:
            if name in a.raw and a.raw[name] is None:
                del a.raw[name]
        return run(c, a)

    return call


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
            run=handlers.create,
        ),
        Tool(
            "start",
            "Start a backlog task: its branch and worktree are made and its agent runs (→ working).",
            _schema(["task"], task=_TASK, message=_s("said to the agent with the goal and prompt")),
            run=handlers.start,
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
            run=handlers.unblock,
        ),
        Tool(
            "resume",
            "Continue an interrupted task without feedback (pending feedback is redelivered).",
            _schema(["task"], task=_TASK),
            run=handlers.resume,
        ),
        Tool(
            "ask",
            "Ask a task's agent a question, read-only; waits for the answer (bounded) and returns it.",
            _schema(["task", "question"], task=_TASK, question=_s("the question"), timeout_seconds=_WAIT),
            block=blocking.ask,
        ),
        Tool(
            "wait",
            "Wait until the task rests (its turn ended), bounded per call. Returns the task's projection and "
            "rests=true, or rests=false and call_again=true: then call wait again.",
            _schema(["task"], task=_TASK, timeout_seconds=_WAIT),
            block=blocking.wait,
        ),
        Tool(
            "stop",
            "End the task's running turn; its feedback stays pending.",
            _schema(["task"], task=_TASK),
            run=handlers.stop,
        ),
        Tool(
            "sync",
            "Merge the task's target into its branch while it rests.",
            _schema(["task"], task=_TASK),
            run=handlers.sync,
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
            run=handlers.edit,
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
            run=handlers.show,
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
            run=handlers.listing,
        ),
        Tool(
            "logs",
            "The readable harness output of a turn (the latest by default), its last lines.",
            _schema(
                ["task"],
                task=_TASK,
                turn={"type": "integer", "description": "the turn's number, as show numbers it"},
                tail_lines={"type": "integer", "minimum": 1},
            ),
            run=handlers.logs,
        ),
        Tool(
            "diff",
            "What the task's branch changed since it started, read from its commits; tip is the commit shown "
            "(accept merges it), uncommitted the worktree's paths accept does not merge.",
            _schema(["task"], task=_TASK, stat={"type": "boolean"}),
            run=handlers.diff,
        ),
        Tool(
            "accept",
            "Merge a task into its target and complete it. A task agent may accept its direct subtasks "
            "only (into its own branch), never its own task. When the branch moved since your last diff of "
            "it, accept refuses (tip-moved) naming the new commits: look at them, then accept with tip.",
            _schema(
                ["task"], task=_TASK, tip=_s("the commit to merge (diff's tip): refused unless the branch is at it")
            ),
            run=handlers.accept,
        ),
        Tool(
            "submit",
            "Push the task's branch to the remote (and open a pull request where a forge is set).",
            _schema(
                ["task"],
                task=_TASK,
                draft={"type": "boolean", "description": "open the pull request as a draft (with a forge)"},
            ),
            run=handlers.submit,
        ),
        Tool(
            "reject",
            "Abandon a resting task's work as wrong (it is saved and archived).",
            _schema(["task", "reason"], task=_TASK, reason=_s("why")),
            run=handlers.ender("reject"),
        ),
        Tool(
            "close",
            "Abandon a resting task as no longer needed (its work is saved and archived).",
            _schema(["task", "reason"], task=_TASK, reason=_s("why")),
            run=handlers.ender("close"),
        ),
        Tool(
            "reopen",
            "Bring back a complete or abandoned task.",
            _schema(["task"], task=_TASK, reason=_s("why (needed for a complete task)")),
            run=handlers.reopen,
        ),
        Tool(
            "comment",
            "Leave a comment on the task's timeline.",
            _schema(["task", "body"], task=_TASK, body=_s("the comment")),
            run=handlers.comment,
        ),
        Tool(
            "journal",
            "Read the task's decision journal; with entry, add one first (rationale, decisions, deferrals).",
            _schema(["task"], task=_TASK, entry=_s("a journal entry to add")),
            run=handlers.journal,
        ),
        Tool(
            "update_progress",
            "Post a short line saying what you are doing now (task agents only; latest wins, never stored). "
            "Shown as working(agent: <message>).",
            _schema(["message"], message=_s("at most 120 characters; longer is cut, and the result says so")),
            run=handlers.update_progress,
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
                timeout_seconds=_optional({"type": "number", "minimum": 1, "maximum": shell.SHELL_MAX_SECONDS}),
                operationId=_optional({"type": "string", "pattern": ID_PATTERN}),
                attemptId=_optional({"type": "string", "pattern": ID_PATTERN}),
                expectedExitCodes=_optional(
                    {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 0, "maximum": 255},
                        "maxItems": MAX_EXPECTED,
                    }
                ),
            ),
            run=_null_is_absent(handlers.bash, "timeout_seconds"),
            agents_only=True,
            failed=lambda doc: doc.get("exit_code") != 0 and not doc.get("expected"),
        ),
        Tool(
            "failure_disposition",
            "Classify your own failed tool calls (confined turns only): recovered (evidence: a successful "
            "attempt of the same operation that started after the failure), superseded (evidence: another "
            "successful attempt that started after it), expected, or open (it needs the person; "
            "permissionResource says which permission blocked it). A refused request records nothing.",
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
                evidence=_optional(
                    {"type": "string", "maxLength": 200},
                    "the attemptId or call id of a later success (recovered: of the same operation)",
                ),
                permissionResource=_optional({"type": "string", "enum": list(PERMISSION_RESOURCES)}),
            ),
            run=handlers.failure_disposition,
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
            run=handlers.failures,
        ),
    )
}


def visible(caller: Caller) -> list[Tool]:
    """The tools a caller is offered (``update_progress`` to task agents only)."""
    return [t for t in TOOLS.values() if caller.is_agent or not t.agents_only]
