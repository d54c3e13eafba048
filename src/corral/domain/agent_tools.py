"""The agent door's fixed terms: how long a tool call may take, how a turn's agent finds corral.

A task agent reaches corral's tools through the daemon's MCP endpoint with a bearer token
minted for its turn (docs/mcp.md). These are the terms every piece reads from here: the
launch (which sets the client's own tool timeout), the harness adapters (which pass the URL
and the token's variable), the ``wait`` tool (which returns before the client gives up) and
the progress line's cap.
"""

from __future__ import annotations

#: The MCP server's name as the agent's harness knows it: its tools read ``mcp__corral__<tool>``.
SERVER_NAME = "corral"

#: The tool timeout corral sets in the agent's client at launch (Claude Code's MCP_TOOL_TIMEOUT,
#: Codex's tool_timeout_sec): long enough for one ``wait`` call and a slow ``accept``.
TOOL_TIMEOUT_SECONDS = 600.0

#: One ``wait`` call returns by then, rested or not, well inside the client's timeout; the
#: agent calls again when the result says so.
WAIT_CALL_SECONDS = 240.0

#: An agent's progress line: one line (``sanitize.one_line``), capped at write and again at read,
#: and when another host's shipped line is read.
PROGRESS_CAP = 120

#: A subtask an agent waits on, as a surface names it (one line, capped alike).
WAIT_TARGET_CAP = 80

#: The variable that carries a turn's bearer token to its agent (and to a corral CLI it runs):
#: the environment, never argv, which any process on the machine can read.
TOKEN_ENV = "CORRAL_AGENT_TOKEN"

#: The variable that carries the daemon's MCP endpoint to the agent.
URL_ENV = "CORRAL_MCP_URL"

#: A token's random part, in bytes (256 bits; the issue asks for at least 128).
TOKEN_BYTES = 32
