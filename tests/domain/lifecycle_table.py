"""DESIGN.md's "Lifecycle" table, copied here as literal data.

Deliberately NOT imported from ``corral.domain.status``: the tests compare the
implementation against this independent transcription of the design.

Each row of DESIGN.md's table is one entry below (``blocked, conflict`` in the
"to" column is two targets). "any non-terminal → zombie (system actor only)" is
kept apart in ``ZOMBIE_SOURCES``; the same status again (zombie → zombie
included) is a no-op that is always legal and records nothing (issue 29), so it
is kept out of the table and its targets.
"""

from __future__ import annotations

STATUSES: tuple[str, ...] = (
    "backlog",
    "working",
    "blocked",
    "conflict",
    "pairing",
    "interrupted",
    "merging",
    "submitted",
    "zombie",
    "complete",
    "abandoned",
)

# from -> targets any actor may move a task to (the zombie rule excluded).
TABLE: dict[str, frozenset[str]] = {
    "backlog": frozenset({"working", "abandoned"}),
    "working": frozenset({"blocked", "conflict", "interrupted", "submitted"}),
    "blocked": frozenset({"working", "conflict", "pairing", "merging", "submitted", "abandoned", "backlog"}),
    "conflict": frozenset({"working", "blocked", "pairing", "abandoned"}),
    "interrupted": frozenset({"working", "pairing", "abandoned", "blocked"}),
    "pairing": frozenset({"blocked", "conflict"}),
    "merging": frozenset({"complete", "blocked", "submitted"}),
    "submitted": frozenset({"merging", "working", "blocked", "abandoned"}),
    "zombie": frozenset({"complete"}),
    "complete": frozenset({"blocked", "backlog"}),
    "abandoned": frozenset({"blocked", "backlog"}),
}

# Categories (DESIGN.md, below the table).
TERMINAL = frozenset({"complete", "abandoned"})
BLOCKED = frozenset({"blocked", "conflict"})
ACTIVE = frozenset({"working", "interrupted", "pairing", "merging"})
RESTING_NOT_ACTIVE = frozenset({"submitted", "backlog"})

# "any non-terminal → zombie": the reconciler, system actor only.
ZOMBIE_SOURCES = frozenset(s for s in STATUSES if s not in TERMINAL and s != "zombie")

ACTORS: tuple[str, ...] = ("human", "builder", "agent", "system", "supervisor")

# The statuses a task rests in (DESIGN.md "Words used here", seed 002 §Status Categories).
RESTING = frozenset({"backlog", "blocked", "conflict", "interrupted", "submitted"})


def allowed(src: str, dst: str, actor: str) -> bool:
    """Whether DESIGN.md lets ``actor`` move a task from ``src`` to ``dst``."""
    if dst == "zombie" and actor != "system":
        return False
    if src == dst:
        return True
    if dst == "zombie":
        return actor == "system" and src in ZOMBIE_SOURCES
    return dst in TABLE[src]


def targets(src: str, actor: str) -> frozenset[str]:
    """Where a task can go: the no-op of staying is not a target."""
    return frozenset(dst for dst in STATUSES if dst != src and allowed(src, dst, actor))
