"""The one read model of a task that every surface renders (``show``, ``list``, ``--json``).

Built from the store and the live supervisor facts; no surface derives a status,
a substate, a reason or a next step on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.domain.clock import rfc3339
from corral.domain.explain import breaker_line, next_step, stopped_because
from corral.domain.records import Attempt, Note, Session, StatusChange, Task, Turn, Violation
from corral.domain.status import Status
from corral.domain.substate import Live, substate
from corral.store import Tx

SCHEMA_VERSION = 1


def _failure(evidence: Any) -> dict[str, Any] | None:
    return evidence.to_json() if evidence is not None else None


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "outcome": a.outcome.value,
        "failure_class": a.failure_class,
        "failure": _failure(a.failure),
        "started_at": rfc3339(a.started_at),
        "ended_at": rfc3339(a.ended_at),
    }


def turn_json(t: Turn) -> dict[str, Any]:
    return {
        "sequence": t.sequence,
        "role": t.role.value,
        "actor": t.actor.value if t.actor else None,
        "kind": t.kind,
        "content": t.content,
        "feedback_delivery": t.feedback_delivery.value,
        "started_at": rfc3339(t.started_at),
        "ended_at": rfc3339(t.ended_at),
        "usage": t.usage,
        "attempts": [attempt_json(a) for a in t.attempts],
        "failure": _failure(t.failure),
    }


def change_json(c: StatusChange) -> dict[str, Any]:
    return {
        "from": c.from_status.value if c.from_status else None,
        "to": c.to_status.value,
        "actor": c.actor.value,
        "reason": c.reason,
        "at": rfc3339(c.at),
    }


def note_json(n: Note) -> dict[str, Any]:
    return {"id": n.id, "actor": n.actor.value, "body": n.body, "at": rfc3339(n.at)}


def session_json(s: Session | None) -> dict[str, Any] | None:
    if s is None:
        return None
    interrupt = None
    if s.interrupt_reason or s.interrupt_at:
        interrupt = {
            "reason": s.interrupt_reason,
            "exit_code": s.interrupt_exit_code,
            "at": rfc3339(s.interrupt_at),
            "logs": s.interrupt_logs,
        }
    return {
        "id": s.id,
        "harness_session_id": s.harness_session_id,
        "consecutive_interruptions": s.consecutive_interruptions,
        "auto_resumed": s.auto_resumed,
        "interrupt": interrupt,
        "base_commit": s.base_commit,
        "outcome": s.outcome,
    }


def violation_json(v: Violation) -> dict[str, Any]:
    return {
        "path": v.path,
        "decision": v.decision.value,
        "decided_by": v.decided_by.value if v.decided_by else None,
        "decided_at": rfc3339(v.decided_at),
    }


@dataclass(frozen=True)
class TaskView:
    """A task with what every surface shows beside it."""

    task: Task
    parent_ref: str | None
    substate: str | None
    session: Session | None
    pending: int
    stopped_because: str | None
    next: str | None

    def task_json(self) -> dict[str, Any]:
        t = self.task
        return {
            "id": t.id,
            "ref": t.ref,
            "goal": t.goal,
            "prompt": t.prompt,
            "status": t.status.value,
            "substate": self.substate,
            "parent": self.parent_ref,
            "harness": t.harness,
            "model": t.model,
            "branch": t.branch if self.session else None,
            "worktree": self.session.worktree if self.session else None,
            "target": t.target_branch,
            "protected": list(t.protected),
            "created_at": rfc3339(t.created_at),
            "updated_at": rfc3339(t.updated_at),
        }


def view(tx: Tx, task: Task, live: Live | None = None, *, breaker_threshold: int = 3) -> TaskView:
    session = tx.get_session(task.session_id) if task.session_id else None
    pending = len(tx.pending_paths(task.id)) if task.status in (Status.CONFLICT, Status.INTERRUPTED) else 0
    parent = tx.get_task(task.parent_id) if task.parent_id else None
    tripped = (
        task.status is Status.INTERRUPTED
        and session is not None
        and session.consecutive_interruptions >= breaker_threshold
    )
    because = stopped_because(task.resting_cause, task)
    if tripped and session is not None:
        because = (
            f"{because} {breaker_line(session.consecutive_interruptions)}"
            if because
            else breaker_line(session.consecutive_interruptions)
        )
    return TaskView(
        task=task,
        parent_ref=parent.ref if parent else None,
        substate=substate(task.status, live),
        session=session,
        pending=pending,
        stopped_because=because,
        next=next_step(task, pending_violations=pending, breaker=tripped),
    )


def show(tx: Tx, task: Task, live: Live | None = None, *, breaker_threshold: int = 3) -> dict[str, Any]:
    v = view(tx, task, live, breaker_threshold=breaker_threshold)
    return {
        "schema_version": SCHEMA_VERSION,
        "task": v.task_json(),
        "session": session_json(v.session),
        "turns": [turn_json(t) for t in tx.turns(task.id)],
        "status_changes": [change_json(c) for c in tx.status_changes(task.id)],
        "violations": [violation_json(x) for x in tx.violations(task.id)],
        "comments": [note_json(n) for n in tx.comments(task.id)],
        "journal": [note_json(n) for n in tx.journal(task.id)],
        "children": [{"ref": c.ref, "status": c.status.value} for c in tx.children(task.id)],
        "resting_cause": task.resting_cause.to_json() if task.resting_cause else None,
        "stopped_because": v.stopped_because,
        "next": v.next,
    }


def list_row(v: TaskView) -> dict[str, Any]:
    return {
        "id": v.task.id,
        "ref": v.task.ref,
        "status": v.task.status.value,
        "substate": v.substate,
        "goal": v.task.goal,
        "parent": v.parent_ref,
        "reason": v.stopped_because,
        "updated_at": rfc3339(v.task.updated_at),
    }
