"""Turning a supervisor's receipt into the turn, its attempts and the status change, once.

The claim is the agent turn's unique ``command_id``: two reconcilers racing on one
``response.json`` insert one agent turn; the loser sees it and only tidies up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.domain.actors import Actor, Role
from corral.domain.clock import parse_time
from corral.domain.records import AttemptOutcome, FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status
from corral.engine import protocol as proto
from corral.engine.project import Project
from corral.store import Tx

#: error kinds of a receipt -> the resting cause code of the interrupted task.
ERROR_CAUSES = {
    "crash": "turn-crashed",
    "crash_loop": "crash-loop",
    "watchdog": "watchdog-no-progress",
    "merge_and_fix": "merge-and-fix-failed",
    "internal": "internal-fault",
}
#: Causes after which auto-resume must never fire.
NO_AUTO_RESUME = frozenset({"merge-and-fix-failed", "internal-fault"})


def _evidence(data: dict[str, Any] | None) -> FailureEvidence | None:
    return FailureEvidence.from_json(data) if isinstance(data, dict) else None


def _record_attempts(tx: Tx, turn_id: str, response: dict[str, Any]) -> None:
    for a in response.get("attempts") or []:
        started = parse_time(a.get("started_at")) or tx.now()
        outcome = a.get("outcome", "indeterminate")
        tx.add_attempt(
            turn_id,
            number=int(a.get("number", 1)),
            started_at=started,
            ended_at=parse_time(a.get("ended_at")),
            outcome=AttemptOutcome(outcome)
            if outcome in AttemptOutcome._value2member_map_
            else AttemptOutcome.INDETERMINATE,
            failure_class=a.get("failure_class"),
            failure=_evidence(a.get("failure")),
        )


def failure_of(response: dict[str, Any]) -> FailureEvidence | None:
    status = response.get("status")
    if status == "failed":
        return FailureEvidence(
            source="harness",
            code=str(response.get("failure_code") or "harness-error"),
            phase="work",
            category=response.get("failure_class"),
            possible_effects=PossibleEffects.UNKNOWN,
            details={
                "reason": str(response.get("failure_reason") or "")[:1000],
                "attempts": response.get("failure_attempts"),
                "stop": response.get("stop_reason"),
            },
        )
    if status == "error":
        err = response.get("error") or {}
        kind = str(err.get("kind") or "crash")
        return FailureEvidence(
            source="supervisor" if kind == "internal" else "harness",
            code=ERROR_CAUSES.get(kind, "turn-crashed"),
            phase=err.get("phase"),
            category="crash" if kind in ("crash", "crash_loop") else kind,
            possible_effects=PossibleEffects.UNKNOWN,
            exit_code=err.get("exit_code"),
            signal=err.get("signal"),
            details={"reason": str(err.get("reason") or "")[:1000]},
        )
    return None


def apply(project: Project, task: Task, response: dict[str, Any]) -> bool:
    """Record one receipt; True when this call claimed it, False when it was already claimed."""
    command_id = response.get("command_id")
    if not isinstance(command_id, str):
        return False
    with project.store.write() as tx:
        if tx.turn_by_command(command_id, Role.AGENT) is not None:
            return False
        current = tx.get_task(task.id)
        if current is None:
            return False
        human = tx.turn_by_command(command_id, Role.HUMAN)
        _record(tx, current, response, human.sequence if human else None)
    crashpoints.hit("reconcile.after-claim")
    return True


def _record(tx: Tx, task: Task, response: dict[str, Any], human_seq: int | None) -> None:
    status = response.get("status")
    kind = str(response.get("kind") or "work")
    is_ask = kind in ("ask", "pre-accept")  # status-neutral turns: they restore, and consume no feedback
    failure = failure_of(response)
    session_id = task.session_id
    if status == "completed":
        turn_kind, content = kind, str(response.get("result") or "")
    elif status == "stopped":
        turn_kind = "stopped"
        content = f"Stopped by {response.get('stopped_by') or 'system'}."
    else:
        turn_kind = "error"
        content = str((failure.details.get("reason") if failure else "") or "The turn failed.")
    details = {
        k: response.get(k)
        for k in ("commits", "head", "check", "sync", "changed_paths", "protected_changes", "dirty", "stop_reason")
        if response.get(k) is not None
    }
    if human_seq is not None:
        details["log_turn"] = human_seq
    turn = tx.add_turn(
        task.id,
        role=Role.AGENT,
        kind=turn_kind,
        content=content,
        session_id=session_id,
        started_at=parse_time(response.get("started_at")),
        ended_at=parse_time(response.get("ended_at")) or tx.now(),
        usage=response.get("usage"),
        failure=failure,
        details=details,
        command_id=response["command_id"],
    )
    _record_attempts(tx, turn.id, response)
    for record in tx.processes(task.id):
        if record.kind == "supervisor" and record.command_id == response["command_id"]:
            tx.unregister_process(task.id, "supervisor", pid=record.pid)
    session_updates: dict[str, Any] = {}
    if response.get("harness_session_id"):
        session_updates["harness_session_id"] = response["harness_session_id"]
    if status == "completed" and not is_ask:
        tx.mark_feedback_consumed(response.get("delivered") or [])
        session_updates["consecutive_interruptions"] = 0
        if response.get("head"):
            session_updates["git_start_sha"] = response["head"]
        if response.get("protected_changes"):
            tx.record_violations(
                task.id, response["protected_changes"], turn_id=turn.id, check_from=response.get("check_from")
            )
    if session_id and session_updates:
        tx.update_session(session_id, **session_updates)
    if task.status is not Status.WORKING and not (task.status is Status.INTERRUPTED and status == "completed"):
        return  # moved on meanwhile (stopped, closed): the turn is on record, the status stays
    if task.status is Status.INTERRUPTED:
        # A completed receipt written after the task was marked interrupted: through working to the park.
        tx.set_status(
            task.id, Status.WORKING, Actor.SYSTEM, "a completed response arrived late", expected_from=Status.INTERRUPTED
        )
    if is_ask or status in ("completed", "stopped") or status == "failed":
        cause = None
        if status == "stopped":
            actor = str(response.get("stopped_by") or "system")
            cause = RestingCause(
                "stopped",
                tx.now(),
                Actor(actor) if actor in Actor._value2member_map_ else None,
                details={"summary": f"Stopped by {actor}."},
            )
        elif status == "failed" and not is_ask:
            cause = RestingCause(failure.code if failure else "harness-error", tx.now(), Actor.SYSTEM, evidence=failure)
        if kind == "pre-accept" and task.metadata.get("accept_in_flight_from") == Status.SUBMITTED.value:
            # The pre-accept turn of a submitted task restores submitted, not a park label.
            tx.set_status(
                task.id,
                Status.SUBMITTED,
                Actor.SYSTEM,
                f"{kind} turn {status}",
                expected_from=Status.WORKING,
                resting_cause=cause,
            )
            return
        tx.park(task.id, Actor.SYSTEM, f"{kind} turn {status}", expected_from=Status.WORKING, resting_cause=cause)
        return
    # An error receipt: a crash, a crash loop, a watchdog kill after work, a failed merge-and-fix, a fault.
    err = response.get("error") or {}
    code = ERROR_CAUSES.get(str(err.get("kind")), "turn-crashed")
    cause = RestingCause(
        code, tx.now(), Actor.SYSTEM, evidence=failure, details={"summary": str(err.get("reason") or "")[:300]}
    )
    tx.set_status(
        task.id,
        Status.INTERRUPTED,
        Actor.SYSTEM,
        str(err.get("reason") or "the turn crashed")[:300],
        expected_from=Status.WORKING,
        resting_cause=cause,
    )
    if session_id:
        session = tx.get_session(session_id)
        tx.update_session(
            session_id,
            interrupt_reason=str(err.get("reason") or "the turn crashed")[:500],
            interrupt_exit_code=err.get("exit_code"),
            interrupt_at=tx.now(),
            interrupt_logs=err.get("tail"),
            consecutive_interruptions=(session.consecutive_interruptions if session else 0) + 1,
        )


def file_away(project: Project, task: Task, response_path: Path, response: dict[str, Any]) -> None:
    """Move a processed receipt next to its turn's output, so the protocol dir holds only live files."""
    with project.store.read() as tx:
        human = tx.turn_by_command(str(response.get("command_id")), Role.HUMAN)
    dest_dir = project.paths.turn_dir(task.id, human.sequence if human else 0)
    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(response_path, dest_dir / proto.RESPONSE)
    except FileNotFoundError:
        pass  # another reconciler filed it first
