"""``corral mcp``: the builder's door, an MCP server on stdin and stdout for the person's own agent.

A person adds it to their agent (``claude mcp add corral -- corral mcp``, or Codex's
``mcp_servers``); everything that agent does through it is recorded with actor ``builder``,
unrestricted like the CLI. It serves the project of the directory it was started in (or
``--repo``). It needs no daemon: its reads settle the project first, as the CLI's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.domain.actors import Actor
from corral.engine.api import person
from corral.mcp.calling import Calling
from corral.mcp.server import Projects, build


def serve(repo: str | Path) -> None:
    """Serve ``repo``'s project to a builder on stdio until the client closes it."""
    import anyio
    from mcp.server.stdio import stdio_server

    projects = Projects()
    caller = person(Actor.BUILDER)

    def resolve(_ctx: Any) -> Calling:
        return Calling(lambda: projects.get(repo), caller, settles=True)

    server = build(resolve)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
