"""corral's Pi extension (TypeScript, loaded by Pi itself): a Pi turn's door to corral's tools.

Pi has no MCP client; a Pi turn that has corral's endpoint is given this extension by path
(``pi -e``, with Pi's own extension discovery off), and it registers corral's ``bash`` (in a
confined turn) and ``failure_disposition`` as Pi tools that call the daemon's MCP endpoint with
the turn's token (docs/harnesses.md, "Pi's trusted path"). It ships in corral's package, so a turn can neither
change it nor put another in its place.
"""

from __future__ import annotations

from pathlib import Path

#: The extension's entry, as Pi loads it; it imports :data:`DOOR` beside it.
EXTENSION = Path(__file__).resolve().with_name("corral_tools.ts")
#: The extension's logic in plain JavaScript (its MCP client and tool definitions): Node's test runner loads it.
DOOR = EXTENSION.with_name("mcp_door.mjs")
#: corral's MCP tools the extension registers, as the endpoint describes them (``tools/list``): a copy of
#: theirs in :data:`corral.mcp.tools.TOOLS` (tests/harness/test_pi_extension_node.py holds it equal and
#: rewrites it), so Pi's launch asks the endpoint nothing.
TOOLS_FILE = EXTENSION.with_name("mcp_tools.json")


def missing() -> list[str]:
    """The extension's files this install lacks (a package built without them): its turns then get no door."""
    return [p.name for p in (EXTENSION, DOOR, TOOLS_FILE) if not p.is_file()]
