"""The MCP server both doors share: the tool table offered through the SDK, errors as tool errors.

A door gives :func:`build` a function that tells, for each request, who calls and in which
project (:class:`~corral.mcp.calling.Calling`); the rest is the same for a builder over stdio
and an agent over HTTP. A refused or failed call is an MCP tool error (``isError``) whose text
and structured content carry corral's ``{"error": {"code", "message", "hint"}}``, never a
traceback; a fault corral did not foresee is logged whole and answered ``internal-error``.
Operations are blocking (git, SQLite), so each runs in a worker thread, and the event loop
stays free for the other calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.engine.api import Project
from corral.errors import CorralError, UsageError
from corral.mcp.calling import Args, Calling
from corral.mcp.tools import TOOLS, visible

#: What a door answers per request: who calls, in which project (raises CorralError to refuse).
Resolve = Callable[[Any], Calling]

log = logging.getLogger("corral.mcp")

#: Worker threads that run the operations of tool calls (a blocking tool holds none while it waits).
WORKER_THREADS = 8


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("corral")
    except PackageNotFoundError:
        return "0"


class Projects:
    """One open project per thread and state directory: a store connection is never shared by threads."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, repo: str | Path, state: str | Path | None = None) -> Project:
        cache: dict[str, Project] = self._local.__dict__.setdefault("open", {})
        key = str(state or repo)
        project = cache.get(key)
        if project is None:
            project = Project.open(repo)
            if state is not None and project.paths.root != Path(state):
                raise CorralError(
                    f"The checkout {repo} no longer holds the project this token was minted for.",
                    code="project-moved",
                    hint="The turn's repository moved or was replaced; its agent's tools are gone with it.",
                )
            cache[key] = project
        return project


def error_json(exc: CorralError) -> dict[str, Any]:
    return {"error": exc.to_json()}


def _result(doc: dict[str, Any], *, error: bool = False) -> Any:
    import mcp_types as types

    from corral.cli.app import dumps

    return types.CallToolResult(content=[types.TextContent(text=dumps(doc))], structured_content=doc, is_error=error)


def build(resolve: Resolve, name: str = "corral") -> Any:
    """The SDK server offering corral's tools to whoever ``resolve`` names."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    # A bounded pool of worker threads: each keeps an open project (a store connection and its
    # decoded rows), so the pool's size bounds the memory, whatever the number of calls in flight.
    limiter = anyio.CapacityLimiter(WORKER_THREADS)

    async def off(fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn, limiter=limiter)

    async def on_list_tools(ctx: Any, _params: Any) -> Any:
        calling = await off(lambda: resolve(ctx))
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.schema,
                    annotations=types.ToolAnnotations(read_only_hint=t.read_only, open_world_hint=False),
                )
                for t in visible(calling.caller)
            ]
        )

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        tool = TOOLS.get(params.name)
        try:
            if tool is None:
                raise UsageError(
                    f"corral has no tool named '{params.name}'.",
                    code="unknown-tool",
                    hint="List the tools: " + ", ".join(TOOLS),
                )
            calling = await off(lambda: resolve(ctx))
            args = Args(tool.name, params.arguments)
            if tool.agents_only and not calling.caller.is_agent:
                from corral.engine.api import require_agent

                require_agent(calling.caller, tool.name)
            if not tool.read_only and calling.caller.fence is not None:
                from corral.engine.api import hold_fence

                # A worker's turn that lost its lease starts nothing (a push, a merge, a file); each store
                # write checks the fence again in its own transaction.
                await off(lambda: hold_fence(calling.project(), calling.caller))
            if tool.block is not None:
                doc = await tool.block(calling, args, off)
            else:
                assert tool.run is not None
                run = tool.run
                doc = await off(lambda: run(calling, args))
            if args.matched is not None:  # the task a prefix matched (docs/cli.md#task-references)
                doc = {**doc, "matched_by_prefix": args.matched}
            return _result(doc, error=tool.failed is not None and tool.failed(doc))
        except CorralError as exc:
            return _result(error_json(exc), error=True)
        except Exception as exc:  # a fault corral did not foresee: logged whole, answered in one line
            log.exception("tool %s failed", params.name)
            fault = CorralError(
                f"corral failed inside the {params.name} tool: {type(exc).__name__}: {exc}",
                code="internal-error",
                hint="The daemon's log (or corral mcp's stderr) has the details; the call may be retried.",
            )
            return _result(error_json(fault), error=True)

    return Server(
        name,
        version=version(),
        instructions=(
            "corral runs coding agents on tasks in git worktrees. Create tasks, start them, wait for them "
            "to rest, read their projection (status, substate, stopped_because, next), give feedback with "
            "unblock, and accept finished work."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
