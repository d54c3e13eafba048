"""The MCP surface: corral's lifecycle operations as tools, for a builder agent and for task agents.

Two doors, one set of tools (docs/mcp.md): ``corral mcp`` serves a builder over stdio
(:mod:`corral.mcp.stdio`), and the daemon serves each turn's task agent over streamable HTTP
on loopback, the caller known by its turn's bearer token (:mod:`corral.mcp.http`). The tools
(:mod:`corral.mcp.tools`) are thin calls of the operations the CLI calls; the gates an agent
meets are the engine's (:mod:`corral.engine.operations.gates`). The SDK is imported only here,
and only when a server starts: it is slow to load.
"""
