"""The records corral keeps (docs/architecture.md#records), as plain immutable values.

A store returns these; nothing here reads or writes anything.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from msgspec import Struct, field

from corral.domain.actors import Actor, Role
from corral.domain.clock import parse_time, rfc3339
from corral.domain.status import Status
from corral.domain.violations import Decision

JSON = dict[str, Any]

#: The version of every ``--json`` document corral prints (docs/cli.md): raised when one changes shape.
SCHEMA_VERSION = 2

#: The task metadata key of an accept whose merge stands but whose destination's local changes
#: were kept in a stash (what ``show`` says until the person restores them).
RESTORE_CONFLICT = "destination_restore_conflict"
#: The task metadata key of what its agent had of corral's tools in its latest turn: ``{"command_id",
#: "mcp": bool, "absent": why it had no MCP endpoint, or None}`` (written by the launch, shown by ``show``).
AGENT_TOOLS = "agent_tools"
#: The task metadata key of the permission blockers a person released with ``unblock --retry-blocked``
#: (their incident ids): each allowed one retry, and holds the task no more.
PERMISSION_RELEASED = "permission_released"
#: The task metadata key of the settings the task keeps as its own: ``{name: {"value": v, "source":
#: "task" | "env", "origin": where}}`` ("task": ``corral edit --set``; "env": the environment a person
#: launched one of its turns with). Its turns run with them, whoever launches them.
TASK_SETTINGS = "settings"
#: The task metadata key of what its session's failure journal said when its last turn was
#: recorded: ``{"needs_action": n, "session_id": id}`` (the badge ``list`` shows; docs/incidents.md).
INCIDENTS = "incidents"
#: The task metadata key of its latest interruption as the same-cause breaker saw it
#: (``domain.failures.Interruption.to_json`` and how many in a row had that cause).
LAST_INTERRUPTION = "last_interruption"
#: The resting cause of a read-only turn (ask, chat) whose changes corral took away: a note for
#: the person, not a failure.
READ_ONLY_KEPT = "read-only-changes-kept"


class FeedbackDelivery(StrEnum):
    NONE = "none"
    PENDING = "pending"
    CONSUMED = "consumed"


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"
    CANCELLED = "cancelled"


class PossibleEffects(StrEnum):
    NONE = "none"
    PARTIAL = "partial"
    UNKNOWN = "unknown"


class FailureEvidence(Struct, frozen=True):
    """What is kept about one failure: typed codes and small safe facts; wording is derived on read."""

    source: str
    code: str
    phase: str | None = None
    category: str | None = None
    possible_effects: PossibleEffects = PossibleEffects.UNKNOWN
    exit_code: int | None = None
    errno: int | None = None
    signal: int | None = None
    details: JSON = field(default_factory=dict)
    diagnostic: str | None = None

    def to_json(self) -> JSON:
        return {
            "source": self.source,
            "code": self.code,
            "phase": self.phase,
            "category": self.category,
            "possible_effects": self.possible_effects.value,
            "native": {"exit_code": self.exit_code, "errno": self.errno, "signal": self.signal},
            "details": dict(self.details),
            "diagnostic": self.diagnostic,
        }

    @classmethod
    def from_json(cls, data: JSON) -> FailureEvidence:
        native = data.get("native") or {}
        effects = data.get("possible_effects", "unknown")
        return cls(
            source=str(data.get("source", "unknown")),
            code=str(data.get("code", "unknown")),
            phase=data.get("phase"),
            category=data.get("category"),
            possible_effects=PossibleEffects(effects)
            if effects in PossibleEffects._value2member_map_
            else PossibleEffects.UNKNOWN,
            exit_code=native.get("exit_code"),
            errno=native.get("errno"),
            signal=native.get("signal"),
            details=dict(data.get("details") or {}),
            diagnostic=data.get("diagnostic"),
        )


class RestingCause(Struct, frozen=True):
    """Why a task rests parked after a failure or a gate; written with the status change."""

    code: str
    at: datetime
    actor: Actor | None = None
    evidence: FailureEvidence | None = None
    details: JSON = field(default_factory=dict)

    def to_json(self) -> JSON:
        return {
            "code": self.code,
            "at": rfc3339(self.at),
            "actor": self.actor.value if self.actor else None,
            "evidence": self.evidence.to_json() if self.evidence else None,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, data: JSON) -> RestingCause:
        actor = data.get("actor")
        evidence = data.get("evidence")
        return cls(
            code=str(data.get("code", "unknown")),
            at=parse_time(data.get("at")) or datetime.fromtimestamp(0, UTC),
            actor=Actor(actor) if isinstance(actor, str) and actor in Actor._value2member_map_ else None,
            evidence=FailureEvidence.from_json(evidence) if evidence else None,
            details=dict(data.get("details") or {}),
        )


class Task(Struct, frozen=True):
    id: str
    ref: str
    goal: str
    prompt: str
    parent_id: str | None
    status: Status
    harness: str | None
    model: str | None
    target_branch: str | None
    protected: tuple[str, ...]
    metadata: JSON
    resting_cause: RestingCause | None
    session_id: str | None
    created_at: datetime
    updated_at: datetime
    last_interaction_at: datetime

    @property
    def branch(self) -> str:
        return f"corral/{self.ref}"

    @property
    def settings(self) -> dict[str, JSON]:
        """The settings the task keeps as its own (see :data:`TASK_SETTINGS`), by name."""
        found = self.metadata.get(TASK_SETTINGS)
        if not isinstance(found, dict):
            return {}
        return {str(k): dict(v) for k, v in found.items() if isinstance(v, dict) and "value" in v}


class TaskHead(Struct, frozen=True):
    """What the working sweep reads of each task it looks at (``Tx.task_heads``): no whole task.

    ``command_id`` is a working task's current command (its latest human turn's, as
    ``Tx.current_command`` names it); None for a task in any other status, or with none.
    """

    id: str
    ref: str
    status: Status
    command_id: str | None


class Session(Struct, frozen=True):
    id: str
    task_id: str
    worktree: str | None
    branch: str | None
    base_commit: str | None
    git_start_sha: str | None
    harness_session_id: str | None
    interrupt_reason: str | None
    interrupt_exit_code: int | None
    interrupt_at: datetime | None
    interrupt_logs: str | None
    consecutive_interruptions: int
    auto_resumed: bool
    outcome: str | None
    created_at: datetime
    ended_at: datetime | None


class Attempt(Struct, frozen=True):
    turn_id: str
    number: int
    started_at: datetime
    ended_at: datetime | None
    outcome: AttemptOutcome
    failure_class: str | None = None
    failure: FailureEvidence | None = None


class Turn(Struct, frozen=True):
    id: str
    task_id: str
    session_id: str | None
    sequence: int
    role: Role
    actor: Actor | None
    kind: str
    content: str
    feedback_delivery: FeedbackDelivery
    delivered: tuple[str, ...]
    started_at: datetime
    ended_at: datetime | None
    usage: JSON | None = None
    failure: FailureEvidence | None = None
    details: JSON = field(default_factory=dict)
    attempts: tuple[Attempt, ...] = ()
    command_id: str | None = None


class StatusChange(Struct, frozen=True):
    task_id: str
    from_status: Status | None
    to_status: Status
    actor: Actor
    reason: str | None
    at: datetime


class Violation(Struct, frozen=True):
    task_id: str
    session_id: str
    path: str
    turn_id: str | None
    decision: Decision
    decided_by: Actor | None
    decided_at: datetime | None
    created_at: datetime
    check_from: str | None = None  # the commit a revert restores the file from


class ProcessRecord(Struct, frozen=True):
    """A process corral started for a task, kept until it is known to be gone.

    ``owner``: on the shared store, the identity of the host (its ``CORRAL_HOME``) it runs on, the only
    host that may judge or signal it by its pid; None on SQLite (one host) and for an older corral's record.
    """

    task_id: str
    kind: str  # supervisor | pair | chat | accept
    pid: int
    command_id: str | None
    started_at: datetime
    owner: str | None = None

    def elsewhere(self, me: str | None) -> bool:
        """Another host's process: its pid means nothing here (never judged, never signalled)."""
        return self.owner is not None and self.owner != me


class Note(Struct, frozen=True):
    """A comment (a person's note on the timeline) or a decision-journal entry."""

    id: str
    task_id: str
    actor: Actor
    body: str
    at: datetime
