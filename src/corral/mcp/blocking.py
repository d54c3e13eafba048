"""The MCP tools that block (``wait``, ``ask``): they poll with the event loop free, so other calls (and
other waits) are answered meanwhile; each call returns within :data:`WAIT_CALL_SECONDS`, saying
whether to call again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import Any

from corral.domain.actors import Role
from corral.domain.agent_tools import WAIT_CALL_SECONDS
from corral.domain.records import Task
from corral.engine.api import Project, control, lookups, notices, turns
from corral.mcp.calling import Args, Calling, projection, task_of

#: How often a blocking tool looks again.
POLL_SECONDS = 0.5
#: The channel whose receipts record which incident notices a tool caller was shown.
NOTICE_CHANNEL = "mcp"


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


async def wait(c: Calling, a: Args, off: Callable[[Callable[[], Any]], Awaitable[Any]]) -> dict[str, Any]:
    task = await off(lambda: task_of(c, "wait", a))
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


async def ask(c: Calling, a: Args, off: Callable[[Callable[[], Any]], Awaitable[Any]]) -> dict[str, Any]:
    task = await off(lambda: task_of(c, "ask", a))
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
            "next": {"tool": "show", "arguments": {"task": task.ref}},  # the answer lands in its turns, later
        }
    return {
        "answered": answer.kind == "ask",
        "answer": answer.content,
        "kind": answer.kind,
        "failure": answer.failure.to_json() if answer.failure else None,
        "command_id": started.launched.command_id,
    }
