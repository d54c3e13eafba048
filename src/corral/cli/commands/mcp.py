"""``mcp``: serve corral's tools to a builder agent over stdio."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.options import pass_app


@click.command(
    epilog="""\b
Examples (add it to your own agent, in the repository whose tasks it drives):
  claude mcp add corral -- corral mcp
  codex mcp add corral -- corral mcp
\b
Everything it does is recorded with actor `builder`. Task agents get the same tools from the
daemon, each turn with its own token (docs/mcp.md).
"""
)
@pass_app
def mcp(app: App) -> None:
    """An MCP server on stdin/stdout for a builder agent: every lifecycle operation as a tool."""
    from corral.mcp.stdio import serve

    project = app.project  # a directory that is no repository fails here, in one line, before serving
    serve(project.repo)
