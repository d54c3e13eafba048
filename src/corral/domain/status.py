"""Task statuses, their categories and the one transition table corral obeys.

The transition table is the one in docs/lifecycle.md. Every status change anywhere in corral
is validated here (:func:`check_transition`); which operation may run from which status is
the operations table, :mod:`corral.domain.operations_table`.
"""

from __future__ import annotations

from enum import StrEnum

from corral.domain.actors import Actor
from corral.errors import IllegalTransition


class Status(StrEnum):
    BACKLOG = "backlog"
    WORKING = "working"
    BLOCKED = "blocked"
    CONFLICT = "conflict"
    PAIRING = "pairing"
    INTERRUPTED = "interrupted"
    MERGING = "merging"
    SUBMITTED = "submitted"
    ZOMBIE = "zombie"
    COMPLETE = "complete"
    ABANDONED = "abandoned"


S = Status

TERMINAL: frozenset[Status] = frozenset({S.COMPLETE, S.ABANDONED})
#: The two labels a paused task wears (waiting for a person); which one is derived by the park function.
PAUSED: frozenset[Status] = frozenset({S.BLOCKED, S.CONFLICT})
ACTIVE: frozenset[Status] = frozenset({S.WORKING, S.INTERRUPTED, S.PAIRING, S.MERGING})
#: The active statuses in which exactly one actor is in the task's worktree, and it is the one
#: calling: its own agent (working) or the person pairing. A subtask may be accepted into such a
#: parent by that caller only (engine/operations/accept.py, the one exemption; docs/mcp.md#accept).
SOLE_ACTOR: frozenset[Status] = frozenset({S.WORKING, S.PAIRING})
#: Statuses a task can rest in with no turn running and none starting by itself.
RESTING: frozenset[Status] = frozenset({S.BACKLOG, S.BLOCKED, S.CONFLICT, S.INTERRUPTED, S.SUBMITTED})


#: What each status means, in plain words: every surface (CLI, watch, the dashboard, MCP) shows a status
#: beside its meaning (:func:`status_text`) and reads it here (docs/lifecycle.md#statuses).
MEANING: dict[Status, str] = {
    S.BACKLOG: "not started yet",
    S.WORKING: "the agent is working",
    S.BLOCKED: "waiting for you",
    S.CONFLICT: "a protected file awaits your decision",
    S.PAIRING: "someone is working in its worktree",
    S.INTERRUPTED: "the turn stopped before it finished",
    S.MERGING: "its work is being merged",
    S.SUBMITTED: "waiting for review on the remote",
    S.ZOMBIE: "being completed (its work is already on its target)",
    S.COMPLETE: "accepted: its work is on its target",
    S.ABANDONED: "closed without its work",
}


def meaning(status: Status | str) -> str:
    """The plain meaning of a status (an unknown one, from a newer corral, has none: an empty string)."""
    try:
        return MEANING[Status(status)]
    except ValueError:
        return ""


def status_text(status: Status | str) -> str:
    """A status as a person reads it: ``blocked — waiting for you``; an internal status (zombie) by its
    meaning alone."""
    value = status.value if isinstance(status, Status) else str(status)
    said = meaning(status)
    if value == S.ZOMBIE.value:
        return said
    return f"{value} — {said}" if said else value


def is_terminal(status: Status) -> bool:
    return status in TERMINAL


def is_active(status: Status) -> bool:
    return status in ACTIVE


def is_blocked(status: Status) -> bool:
    return status in PAUSED


# (from, to) -> what moves a task along that edge. The triggers are documentation
# and the source of `corral help`-style explanations; legality is the key set.
_EDGES: dict[tuple[Status, Status], str] = {
    (S.BACKLOG, S.WORKING): "start",
    (S.BACKLOG, S.ABANDONED): "close, reject",
    (S.WORKING, S.BLOCKED): "the park after a turn ends",
    (S.WORKING, S.CONFLICT): "the park after a turn ends, with violations pending",
    (S.WORKING, S.INTERRUPTED): "the reconciler: the turn crashed",
    (S.WORKING, S.SUBMITTED): "an accept's pre-accept turn ends on a submitted task",
    (S.BLOCKED, S.WORKING): "unblock, ask, an accept's pre-accept turn",
    (S.BLOCKED, S.CONFLICT): "a park re-derivation that finds pending violations",
    (S.BLOCKED, S.PAIRING): "pair",
    (S.BLOCKED, S.MERGING): "accept",
    (S.BLOCKED, S.SUBMITTED): "submit",
    (S.BLOCKED, S.ABANDONED): "reject, close",
    (S.BLOCKED, S.BACKLOG): "the reconciler: blocked with no session",
    (S.CONFLICT, S.WORKING): "unblock (deciding every pending file), ask",
    (S.CONFLICT, S.BLOCKED): "a park after every violation is decided",
    (S.CONFLICT, S.PAIRING): "pair",
    (S.CONFLICT, S.ABANDONED): "reject, close",
    (S.INTERRUPTED, S.WORKING): "auto-resume, resume, unblock, the stale-response sweep",
    (S.INTERRUPTED, S.PAIRING): "pair",
    (S.INTERRUPTED, S.ABANDONED): "reject, close",
    (S.INTERRUPTED, S.BLOCKED): "the reconciler, doctor T: a merge conflict resolved by hand",
    (S.PAIRING, S.BLOCKED): "the pairing ends",
    (S.PAIRING, S.CONFLICT): "the pairing ends, with violations pending",
    (S.MERGING, S.COMPLETE): "accept",
    (S.MERGING, S.BLOCKED): "an accept that aborts (task was blocked); the forge: checks failed, changes requested,"
    " the pull request closed outside",
    (S.MERGING, S.SUBMITTED): "an accept that aborts (task was submitted)",
    (S.SUBMITTED, S.MERGING): "accept",
    (S.SUBMITTED, S.WORKING): "unblock, an accept's pre-accept turn",
    (S.SUBMITTED, S.BLOCKED): "the reconciler: the remote branch was closed unmerged",
    (S.SUBMITTED, S.ABANDONED): "reject, close",
    (S.ZOMBIE, S.COMPLETE): "the reconciler",
    (S.COMPLETE, S.BLOCKED): "reopen --reason",
    (S.COMPLETE, S.BACKLOG): "reopen, when it has no session",
    (S.ABANDONED, S.BLOCKED): "reopen, when agent work exists",
    (S.ABANDONED, S.BACKLOG): "reopen, when no agent work exists",
}
# Any non-terminal status may become zombie, and only the system actor may do it.
for _s in Status:
    if _s not in TERMINAL and _s is not S.ZOMBIE:
        _EDGES[(_s, S.ZOMBIE)] = "the reconciler: the work is on its target"

TRANSITIONS: dict[Status, tuple[Status, ...]] = {
    src: tuple(dst for dst in Status if (src, dst) in _EDGES) for src in Status
}


def trigger(src: Status, dst: Status) -> str | None:
    """What moves a task from ``src`` to ``dst``, or None when nothing may."""
    return _EDGES.get((src, dst))


def allowed_targets(src: Status, actor: Actor | None = None) -> tuple[Status, ...]:
    """Where a task in ``src`` may go; with ``actor``, only the moves it may make."""
    targets = TRANSITIONS[src]
    if actor is not None and actor is not Actor.SYSTEM:
        targets = tuple(t for t in targets if t is not S.ZOMBIE)
    return targets


def is_noop(src: Status, dst: Status) -> bool:
    """Whether ``src`` → ``dst`` changes nothing: the same status again is legal and writes no
    status-change record (so the system's zombie → zombie, any non-terminal status → zombie, is one)."""
    return src is dst


def is_allowed(src: Status, dst: Status, actor: Actor) -> bool:
    if dst is S.ZOMBIE and actor is not Actor.SYSTEM:
        return False
    return is_noop(src, dst) or (src, dst) in _EDGES


def check_transition(src: Status, dst: Status, actor: Actor, *, what: str | None = None) -> None:
    """Raise :class:`IllegalTransition` naming the allowed targets unless src → dst is legal (the same
    status again is, as a no-op: :func:`is_noop`)."""
    if is_allowed(src, dst, actor):
        return
    hint = None
    if dst is S.ZOMBIE and (src, dst) in _EDGES:
        hint = "Only corral's reconciler (the system actor) completes a task whose work is already on its target."
    raise IllegalTransition(src.value, dst.value, [t.value for t in allowed_targets(src, actor)], what=what, hint=hint)


def sources_for(dst: Status) -> tuple[Status, ...]:
    """Every status from which ``dst`` is reachable in one step (reverse lookup)."""
    return tuple(src for src in Status if (src, dst) in _EDGES)
