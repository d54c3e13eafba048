"""Who caused a turn or a status change: provenance, never a gate on behaviour.

docs/lifecycle.md#actors. The channel decides the actor, not the author of the words:
the CLI is ``human``, MCP is ``builder`` (or ``agent`` for a task agent acting on
its own subtree), the reconciler and auto-resume are ``system``, and the
supervisor's own prompts are ``supervisor``. corral records the actor explicitly
on every status change and every human-role turn, ``human`` included; an
agent-role turn never carries one.
"""

from __future__ import annotations

from enum import StrEnum


class Actor(StrEnum):
    HUMAN = "human"
    BUILDER = "builder"
    AGENT = "agent"
    SYSTEM = "system"
    SUPERVISOR = "supervisor"


class Role(StrEnum):
    HUMAN = "human"
    AGENT = "agent"


def turn_actor(role: Role, actor: Actor | None) -> Actor | None:
    """The actor a turn of ``role`` must record; raises ValueError when the pair is wrong."""
    if role is Role.AGENT:
        if actor is not None:
            raise ValueError("an agent-role turn records no actor")
        return None
    if actor is None:
        raise ValueError("a human-role turn records its actor explicitly")
    return actor
