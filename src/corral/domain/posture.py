"""What an agent may do in a turn: the permission mode, the tools it may use, read-only, sandboxed.

Resolved from trusted settings only (a repository's corral.toml never widens it) and carried
in the turn's command; each harness adapter turns it into its own flags.
"""

from __future__ import annotations

from msgspec import Struct

from corral.domain.settings import default


class Posture(Struct, frozen=True):
    permission_mode: str = default("permission_mode", str)
    allowed_tools: tuple[str, ...] = ()
    read_only: bool = False
    is_sandbox: bool = False
