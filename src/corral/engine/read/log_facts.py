"""What the store knows of a log turn: the human turn that launched it, the agent turn that
answered, and what each attempt ended with (exit, class); and the retry a running turn's
supervisor waits on, from its ``status.json``.
"""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct, field

from corral.domain.actors import Role
from corral.domain.records import Task
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto


class AttemptFacts(Struct, frozen=True):
    number: int
    started_at: datetime | None
    outcome: str
    failure_class: str | None
    exit_code: int | None
    signal: int | None


class TurnFacts(Struct, frozen=True):
    """A log turn as recorded: the human turn that launched it, and the agent turn that answered."""

    sequence: int
    kind: str | None  # the launching turn's kind: start, unblock, resume, auto-resume, ask …
    started_at: datetime | None
    answer: int | None  # the agent turn's sequence, once the turn is recorded
    answer_kind: str | None  # its kind: the command's kind when it completed, stopped, error
    attempts: dict[int, AttemptFacts] = field(default_factory=dict)


def turn_facts(project: Project, task: Task, seq: int) -> TurnFacts:
    with project.store.read() as tx:
        human = next((t for t in tx.turns(task.id) if t.sequence == seq and t.role is Role.HUMAN), None)
        agent = tx.turn_by_command(human.command_id, Role.AGENT) if human and human.command_id else None
    if human is None:
        return TurnFacts(seq, None, None, None, None)
    attempts: dict[int, AttemptFacts] = {}
    for a in agent.attempts if agent else ():
        f = a.failure
        exit_code = f.exit_code if f else (0 if a.outcome.value == "succeeded" else None)
        attempts[a.number] = AttemptFacts(
            a.number, a.started_at, a.outcome.value, a.failure_class, exit_code, f.signal if f else None
        )
    return TurnFacts(
        seq,
        human.kind,
        human.started_at,
        agent.sequence if agent else None,
        agent.kind if agent else None,
        attempts,
    )


def live_retry(project: Project, task: Task) -> proto.RetryState | None:
    """The attempt the running turn's supervisor is waiting to retry (its ``status.json``), if any."""
    status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    return status.retry if status is not None else None
