"""Turning a supervisor's receipt into the turn, its attempts and the status change, once.

The claim is the agent turn's unique ``command_id``: two reconcilers racing on one
``response.json`` insert one agent turn; the loser sees it and only tidies up.

A failed turn (or one whose attempts failed on the way) gets its detailed diagnostic
written first (``corral.engine.read.diagnostics``), then the row that references it. Every
piece of evidence taken from a receipt passes the safe translator: allowlisted detail
fields, masked secrets, bounded sizes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.domain.actors import Actor, Role
from corral.domain.clock import parse_time
from corral.domain.explain import NOTHING_RAN
from corral.domain.records import AttemptOutcome, FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.read import diagnostics
from corral.engine.runtime import protocol as proto
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

#: Why a receipt could not be used (``protocol.Receipt.problem``) -> its evidence code.
RECEIPT_CODES = {
    "missing": "receipt-missing",
    "too-large": "receipt-too-large",
    "not-regular": "receipt-invalid",
    "symlink": "receipt-invalid",
    "invalid-utf8": "receipt-invalid",
    "blank": "receipt-invalid",
    "invalid-json": "receipt-invalid",
}


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: receipts are read defensively."""
    return value if isinstance(value, dict) else {}


def receipt_code(problem: str | None) -> str:
    return RECEIPT_CODES.get(problem or "", "receipt-invalid")


def _evidence(data: Any, t: diagnostics.Translator, ref: str | None = None) -> FailureEvidence | None:
    if not isinstance(data, dict):
        return None
    evidence = t.evidence(FailureEvidence.from_json(data))
    if evidence is not None and ref is not None:
        evidence = replace(evidence, diagnostic=ref)
    return evidence


def _record_attempts(
    tx: Tx, turn_id: str, response: dict[str, Any], t: diagnostics.Translator, ref: str | None
) -> None:
    for a in response.get("attempts") or []:
        if not isinstance(a, dict):
            continue
        started = parse_time(a.get("started_at")) or tx.now()
        outcome = a.get("outcome", "indeterminate")
        number = a.get("number")
        tx.add_attempt(
            turn_id,
            number=number if isinstance(number, int) else 1,
            started_at=started,
            ended_at=parse_time(a.get("ended_at")),
            outcome=AttemptOutcome(outcome)
            if outcome in AttemptOutcome._value2member_map_
            else AttemptOutcome.INDETERMINATE,
            failure_class=a.get("failure_class") if isinstance(a.get("failure_class"), str) else None,
            failure=_evidence(a.get("failure"), t, ref),
        )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _native(response: Mapping[str, Any]) -> dict[str, int | None]:
    """The native codes of the last attempt (the one that ended the turn)."""
    attempts = response.get("attempts")
    last = attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else {}
    failure = _obj(last.get("failure"))
    native = _obj(failure.get("native"))
    return {k: _int(native.get(k)) for k in ("exit_code", "errno", "signal")}


def possible_effects(response: Mapping[str, Any], code: str) -> PossibleEffects:
    """none when the harness never ran or git shows nothing changed; partial when it shows changes."""
    attempts = response.get("attempts")
    if code in NOTHING_RAN and (not isinstance(attempts, list) or len(attempts) <= 1):
        return PossibleEffects.NONE
    if "changed_paths" not in response and "commits" not in response:
        return PossibleEffects.UNKNOWN
    changed = bool(response.get("changed_paths")) or bool(response.get("commits")) or bool(response.get("dirty"))
    return PossibleEffects.PARTIAL if changed else PossibleEffects.NONE


def failure_of(
    response: dict[str, Any],
    command: Mapping[str, Any] | None = None,
    t: diagnostics.Translator | None = None,
) -> FailureEvidence | None:
    """The turn's failure evidence, from its receipt, through the safe translator."""
    t = t or diagnostics.Translator()
    command = command or {}
    status = response.get("status")
    if status == "failed":
        code = str(response.get("failure_code") or "harness-error")
        native = _native(response)
        details: dict[str, Any] = {
            "reason": str(response.get("failure_reason") or ""),
            "attempts": _int(response.get("failure_attempts")),
            "stop": response.get("stop_reason"),
        }
        if code == "harness-missing":
            harness = diagnostics.harness_for(command)
            if harness is not None and getattr(harness, "executable", None):
                details["executable"] = str(harness.executable)
        return t.evidence(
            FailureEvidence(
                source="harness",
                code=code,
                phase="work",
                category=response.get("failure_class") if isinstance(response.get("failure_class"), str) else None,
                possible_effects=possible_effects(response, code),
                exit_code=native["exit_code"],
                errno=native["errno"],
                signal=native["signal"],
                details=details,
            )
        )
    if status == "error":
        err = _obj(response.get("error"))
        kind = str(err.get("kind") or "crash")
        problem = err.get("receipt_problem")
        if isinstance(problem, str):
            code = receipt_code(problem)
            details = {"reason": str(err.get("reason") or ""), "receipt": "response.json", "problem": problem}
            if _int(err.get("receipt_size")) is not None:
                details["size"] = err["receipt_size"]
            return t.evidence(
                FailureEvidence(
                    source="corral",
                    code=code,
                    phase="response",
                    category="receipt",
                    possible_effects=PossibleEffects.UNKNOWN,
                    details=details,
                )
            )
        code = ERROR_CAUSES.get(kind, "turn-crashed")
        details = {"reason": str(err.get("reason") or "")}
        if kind == "watchdog" and isinstance(command.get("watchdog_timeout"), int | float):
            details["timeout_seconds"] = command["watchdog_timeout"]
        effects = possible_effects(response, code)
        if kind == "merge_and_fix":
            effects = PossibleEffects.PARTIAL  # the merge stands half done in the worktree
        signal = _int(err.get("signal"))
        exit_code = _int(err.get("exit_code"))
        if signal is None and exit_code is not None and exit_code > 128 and kind == "crash":
            signal = exit_code - 128
        return t.evidence(
            FailureEvidence(
                source="supervisor" if kind == "internal" else "harness",
                code=code,
                phase=err.get("phase") if isinstance(err.get("phase"), str) else None,
                category="crash" if kind in ("crash", "crash_loop") else kind,
                possible_effects=effects,
                exit_code=exit_code,
                errno=_native(response)["errno"],
                signal=signal,
                details=details,
            )
        )
    return None


def _failed_attempts(response: Mapping[str, Any]) -> bool:
    attempts = response.get("attempts")
    return isinstance(attempts, list) and any(isinstance(a, dict) and a.get("outcome") == "failed" for a in attempts)


def write_diagnostic(
    project: Project,
    task: Task,
    response: dict[str, Any],
    command: Mapping[str, Any],
    failure: FailureEvidence | None,
    log_seq: int | None,
    t: diagnostics.Translator,
) -> str | None:
    """The turn's detailed diagnostic, written before its row; None when nothing failed."""
    if failure is None and not _failed_attempts(response):
        return None
    command_id = response.get("command_id")
    log_dir = project.paths.turn_dir(task.id, log_seq) if log_seq is not None else None
    content = diagnostics.for_receipt(
        task_id=task.id, response=response, command=command, log_dir=log_dir, failure=failure, t=t
    )
    return diagnostics.try_write(project.paths, task.id, f"{command_id}", content, project.clock())


def apply(project: Project, task: Task, response: dict[str, Any], command: Mapping[str, Any] | None = None) -> bool:
    """Record one receipt; True when this call claimed it, False when it was already claimed.

    ``command`` is the turn's ``command.json`` when the caller has it (for the watchdog's
    bound and the harness that reads the output); the diagnostic of a failed turn is
    written before the transaction that records the turn.
    """
    command_id = response.get("command_id")
    if not isinstance(command_id, str):
        return False
    with project.store.read() as tx:
        if tx.turn_by_command(command_id, Role.AGENT) is not None:
            return False
        human = tx.turn_by_command(command_id, Role.HUMAN)
    t = diagnostics.Translator()
    failure = failure_of(response, command, t)
    ref = write_diagnostic(project, task, response, command or {}, failure, human.sequence if human else None, t)
    if failure is not None and ref is not None:
        failure = replace(failure, diagnostic=ref)
    with project.store.write() as tx:
        if tx.turn_by_command(command_id, Role.AGENT) is not None:
            return False  # another reconciler claimed it meanwhile; its row references the same file
        current = tx.get_task(task.id)
        if current is None:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return False
        _record(tx, current, response, human.sequence if human else None, failure, ref, t)
    crashpoints.hit("reconcile.after-claim")
    return True


def _record(
    tx: Tx,
    task: Task,
    response: dict[str, Any],
    human_seq: int | None,
    failure: FailureEvidence | None,
    diagnostic: str | None,
    t: diagnostics.Translator,
) -> None:
    status = response.get("status")
    kind = str(response.get("kind") or "work")
    is_ask = kind in ("ask", "pre-accept")  # status-neutral turns: they restore, and consume no feedback
    session_id = task.session_id
    latest = tx.current_command(task.id)
    # A receipt of an earlier command (a newer one was launched meanwhile) is recorded as its
    # turn, but it moves nothing: the status and the session belong to the newer command.
    stale = latest is not None and latest.command_id != response["command_id"]
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
    _record_attempts(tx, turn.id, response, t, diagnostic)
    for record in tx.processes(task.id):
        if record.kind == "supervisor" and record.command_id == response["command_id"]:
            tx.unregister_process(task.id, "supervisor", pid=record.pid)
    session_updates: dict[str, Any] = {}
    if response.get("harness_session_id"):
        session_updates["harness_session_id"] = response["harness_session_id"]
    if status == "completed" and not is_ask:
        tx.mark_feedback_consumed(response.get("delivered") or [])
    if stale:
        return
    if status == "completed" and not is_ask:
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
    err = _obj(response.get("error"))
    code = failure.code if failure is not None else ERROR_CAUSES.get(str(err.get("kind")), "turn-crashed")
    reason = t.text(err.get("reason") or "the turn crashed", 500)
    cause = RestingCause(code, tx.now(), Actor.SYSTEM, evidence=failure, details={"summary": t.text(reason, 300)})
    tail = err.get("tail")
    interrupt(
        tx,
        task,
        reason,
        cause,
        status_reason=t.text(reason, 300),
        exit_code=_int(err.get("exit_code")),
        logs=t.tail(tail, diagnostics.TAIL_BYTES) if isinstance(tail, str) and tail else None,
    )


def interrupt(
    tx: Tx,
    task: Task,
    reason: str,
    cause: RestingCause,
    *,
    status_reason: str | None = None,
    exit_code: int | None = None,
    logs: str | None = None,
    counts: bool = True,
) -> None:
    """The one way a working task becomes interrupted: the status, its cause and the session's
    interrupt record (reason, exit code, time, log tail, and — for a crash the breaker counts —
    one more consecutive interruption), in the caller's transaction."""
    tx.set_status(
        task.id,
        Status.INTERRUPTED,
        Actor.SYSTEM,
        status_reason or reason[:300],
        expected_from=Status.WORKING,
        resting_cause=cause,
    )
    if task.session_id:
        session = tx.get_session(task.session_id)
        previous = session.consecutive_interruptions if session else 0
        tx.update_session(
            task.session_id,
            interrupt_reason=reason[:500],
            interrupt_exit_code=exit_code,
            interrupt_at=tx.now(),
            interrupt_logs=logs,
            consecutive_interruptions=previous + 1 if counts else previous,
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
