"""A turn's bearer token for corral's tools: minted by its launch, known only by its hash, dead when the turn ends.

The launching operation mints one random token per turn (:data:`TOKEN_BYTES`, 256 bits) and
hands it to the supervisor in its environment; the supervisor hands it to the agent the same
way. What corral keeps is the token's SHA-256 and the grant it stands for, one file per
token under ``$CORRAL_HOME/agent-tokens/`` (0600 in a 0700 directory): whoever reads the
files cannot call a tool with them.

A grant names its task, the turn's command and the project; the caller's task comes from
it alone, never from a request's words. It holds while the turn runs: the supervisor
deletes the file when it exits, the next launch of the task deletes its predecessor's, and
whoever honours a token checks that its command is still the task's current one on a
working task (:func:`corral.mcp.identity` does), so a token outlives nothing it stood for
even when a supervisor was killed before it could clean up.

A turn a worker runs under a lease carries its fence (epoch, worker, host) in the grant too:
every write its agent makes checks that the lease still holds
(:func:`corral.engine.operations.turn_fence.fenced`), so an agent whose worker lost the turn writes
nothing, even before its worker gets round to stopping it.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path
from typing import Any

from msgspec import Struct, to_builtins

from corral.domain.agent_tools import TOKEN_BYTES
from corral.domain.clock import rfc3339, utcnow
from corral.engine.private_state import make_private_dir
from corral.engine.runtime import protocol as proto

#: Under ``CORRAL_HOME``: one file per live token, named by the token's hash.
TOKENS_DIR = "agent-tokens"
_HASH = re.compile(r"^[0-9a-f]{64}$")


class Grant(Struct, frozen=True):
    """What one token lets its holder be: the agent of one turn of one task."""

    token_hash: str
    task_id: str
    task_ref: str
    command_id: str
    state: str  # the project's state directory
    repo: str  # the checkout the turn was launched from
    minted_at: str
    fence: proto.Fence | None = None  # the lease a worker runs the turn under (None: a local turn)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = to_builtins(self)
        return doc


def tokens_dir(home: Path) -> Path:
    return home / TOKENS_DIR


def grant_file(home: Path, token_hash: str) -> Path:
    return tokens_dir(home) / f"{token_hash}.json"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def mint(
    home: Path,
    *,
    task_id: str,
    task_ref: str,
    command_id: str,
    state: Path,
    repo: Path,
    fence: proto.Fence | None = None,
) -> tuple[str, Grant]:
    """A new token for the turn ``command_id`` of ``task_id``, and its grant (written before it is handed out);
    ``fence``: the lease a worker runs the turn under."""
    token = "crl_" + secrets.token_urlsafe(TOKEN_BYTES)
    grant = Grant(
        token_hash=digest(token),
        task_id=task_id,
        task_ref=task_ref,
        command_id=command_id,
        state=str(state),
        repo=str(repo),
        minted_at=rfc3339(utcnow()) or "",
        fence=fence,
    )
    make_private_dir(tokens_dir(home))
    # Not fsynced: a crash that loses it loses the turn it was minted for, too.
    proto.write_json(grant_file(home, grant.token_hash), grant.to_json(), durable=False)
    return token, grant


def find(home: Path, token: str) -> Grant | None:
    """The grant a presented token stands for, or None (unknown, revoked, or a file that is not one)."""
    if not token or len(token) > 200:
        return None
    return _read(grant_file(home, digest(token)))


def _read(path: Path) -> Grant | None:
    data = proto.read_raw(path) if not path.is_symlink() else None
    if data is None:
        return None
    try:
        fence = data.get("fence")
        return Grant(
            token_hash=str(data["token_hash"]),
            task_id=str(data["task_id"]),
            task_ref=str(data["task_ref"]),
            command_id=str(data["command_id"]),
            state=str(data["state"]),
            repo=str(data["repo"]),
            minted_at=str(data.get("minted_at") or ""),
            # A fence that cannot be read is no grant at all: never a fenced turn's agent let write unfenced.
            fence=proto.Fence.from_json(fence) if fence is not None else None,
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def revoke(path: str | Path | None) -> None:
    """Forget a token by its grant's file (its turn ended); a token already gone is no error."""
    if not path:
        return
    path = Path(path)
    if path.parent.name != TOKENS_DIR or not _HASH.match(path.stem):
        return  # only ever a grant file: a command's words never make corral delete anything else
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def revoke_command(protocol_dir: Path) -> None:
    """Forget the token of the command now in ``protocol_dir`` (before a new launch replaces it)."""
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    if command is not None and command.agent_tools is not None:
        revoke(command.agent_tools.token_file)
