"""The reconciler: sweeps that bring stored status in line with what is true on disk.

It runs before read commands (and on every daemon tick) and is idempotent: a
receipt is claimed in a transaction, so two reconcilers never process it twice.
"""

from __future__ import annotations

import os
import sqlite3
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from corral.adapters.process import pid_alive, stop_group
from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id
from corral.domain.explain import RECEIPT_PROBLEMS
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.read import diagnostics
from corral.engine.recovery import receipts
from corral.engine.recovery.merged import sweep_merged_branches
from corral.engine.recovery.merges import recover_stranded
from corral.engine.recovery.pairs import sweep_stale_pairs
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from corral.engine.runtime.receipt import output_tail
from corral.errors import CorralError


def sweep_blocked_without_session(project: Project) -> int:
    """Seed 002 sweep 6: a blocked task with no session has nothing to review → backlog."""
    with project.store.read() as tx:
        stray = [t.id for t in tx.tasks([Status.BLOCKED]) if t.session_id is None]
    moved = 0
    if stray:
        with project.store.write() as tx:
            for task_id in stray:
                task = tx.get_task(task_id)
                if task is not None and task.status is Status.BLOCKED and task.session_id is None:
                    tx.set_status(
                        task_id, Status.BACKLOG, Actor.SYSTEM, "blocked with no session", expected_from=Status.BLOCKED
                    )
                    moved += 1
    return moved


def process_receipt(project: Project, task: Task) -> bool:
    """A completed or failed receipt in the task's protocol dir becomes its turn. True if one was there.

    A receipt that cannot be used (not a regular file, a symlink, too large, invalid
    UTF-8, blank, not a JSON object, the wrong shape, a newer protocol) is itself the
    evidence: once its supervisor is gone (its agent reaped), the turn is recorded as failed
    with that receipt problem as a durable code. An exception while recording a receipt is an
    execution fault: the task rests interrupted with the cause "internal fault", never
    working with no owner.
    """
    protocol_dir = project.paths.protocol_dir(task.id)
    path = protocol_dir / proto.RESPONSE
    found = proto.read(path, proto.Receipt)
    if isinstance(found, proto.Unreadable) and found.problem is proto.Problem.MISSING:
        return False
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    if isinstance(found, proto.Unreadable):
        status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.phase != "done" and pid_alive(status.pid):
            return False  # its supervisor still runs and will write the real receipt over it
        reap_turn(project, task.id)  # its supervisor is gone: an orphaned agent must not work on
        try:
            size: int | None = os.lstat(path).st_size
        except OSError:
            size = None
        receipt = proto.Receipt(
            command_id=command.command_id if command else None,
            task_id=task.id,
            kind=command.kind if command else "work",
            status=proto.ReceiptStatus.ERROR,
            error=proto.TurnError(
                kind=proto.ErrorKind.RECEIPT,
                phase="response",
                reason="the receipt response.json is unusable: "
                + RECEIPT_PROBLEMS.get(found.problem.value, found.problem.value),
                receipt_problem=found.problem.value,
                receipt_size=size,
            ),
        )
    else:
        receipt = found
        if command is not None and receipt.command_id != command.command_id:
            # A receipt of an earlier command: recorded as its own turn if it never was (nothing is
            # lost), but it never moves the current turn's status (receipts recognise it as stale).
            receipts.apply(project, task, receipt, None)
            receipts.file_away(project, task, path, receipt.command_id)
            return True
    try:
        receipts.apply(project, task, receipt, command)
    except (CorralError, OSError, sqlite3.Error):
        raise  # the store or the disk: the next pass tries again
    except Exception as exc:  # the receipt's content broke corral's own code: an execution fault
        fault = proto.Receipt(
            command_id=receipt.command_id,
            task_id=task.id,
            kind=command.kind if command else "work",
            status=proto.ReceiptStatus.ERROR,
            error=proto.TurnError(
                kind=proto.ErrorKind.INTERNAL,
                phase="reconcile",
                reason=f"internal fault: corral could not record the turn's receipt: {type(exc).__name__}: {exc}",
                tail=traceback.format_exc(),
            ),
        )
        if fault.command_id is None or not receipts.apply(project, task, fault, command):
            raise
    receipts.file_away(project, task, path, receipt.command_id)
    return True


def sweep_working(project: Project, problems: list[str] | None = None) -> list[str]:
    """Seed 002 sweeps 1 and 2: receipts become turns; a supervisor gone without one → interrupted.

    Returns the ids of the tasks whose turn ended in this pass (a receipt recorded or a
    turn found lost): the candidates for auto-resume. One task that cannot be reconciled
    is reported in ``problems`` and never stops the others.
    """
    with project.store.read() as tx:
        candidates = tx.tasks([Status.WORKING, Status.INTERRUPTED])
    grace = timedelta(seconds=float(project.config["grace_period"]))
    ended: list[str] = []
    for task in candidates:
        try:
            if _reconcile_working(project, task, grace):
                ended.append(task.id)
        except Exception as exc:  # isolated per task; reported, not swallowed
            if problems is None:
                raise
            problems.append(f"{task.ref}: {type(exc).__name__}: {exc}")
    return ended


def _reconcile_working(project: Project, task: Task, grace: timedelta) -> bool:
    """True when the task's turn ended in this pass."""
    if process_receipt(project, task):
        return True
    if task.status is not Status.WORKING:
        return False
    protocol_dir = project.paths.protocol_dir(task.id)
    with project.store.read() as tx:
        current = tx.current_command(task.id)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    if status is not None and current is not None and status.command_id != current.command_id:
        # The previous turn's supervisor: the current one has not been seen alive yet (a launch
        # may be between its commit and its spawn), so only the grace period applies.
        status = None
    if status is not None and pid_alive(status.pid):
        return False
    if status is None:
        # Never seen alive: only the grace period protects it, counted from the launching turn.
        since = current.started_at if current is not None else task.last_interaction_at
        if project.clock() - since < grace:
            return False
    if not process_receipt(project, task):  # it may have finished between our two looks
        lost(project, task, status)
    return True


#: What is unknown about a lost turn, by the phase its supervisor was last seen in.
LOST_PHASES_DONE = frozenset({"response", "done"})


def lost(project: Project, task: Task, status: proto.SupervisorStatus | None) -> None:
    """The supervisor is gone and left no receipt: the turn is lost → interrupted, with what was seen.

    The lost turn is recorded as an agent turn of kind ``error`` carrying the evidence
    (its diagnostic — the last observation of the supervisor and the output so far — is
    written first). It does not claim the command, so a completed receipt that still
    arrives later is recorded too.
    """
    reap_turn(project, task.id)  # an orphaned agent must not work on beside the next turn
    phase = status.phase if status else None
    reason = "the supervisor ended without a receipt" if status else "the supervisor never started"
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    command_id = command.command_id if command else None
    code = "receipt-missing" if phase in LOST_PHASES_DONE else "turn-lost"
    t = diagnostics.Translator()
    evidence = FailureEvidence(
        source="supervisor",
        code=code,
        phase=phase,
        category="receipt" if code == "receipt-missing" else "crash",
        # No status.json: the supervisor died before it could start the agent.
        possible_effects=PossibleEffects.UNKNOWN if status else PossibleEffects.NONE,
        details=t.details(
            {
                "reason": "the supervisor finished the turn, but its receipt response.json is missing"
                if code == "receipt-missing"
                else reason,
                "receipt": "response.json" if code == "receipt-missing" else None,
                "problem": "missing" if code == "receipt-missing" else None,
                "last_phase": phase,
                "last_heartbeat": status.heartbeat_at if status else None,
                "lost_command": command_id,
            }
        ),
    )
    content = diagnostics.for_lost(task_id=task.id, status=status, command=command, evidence=evidence, t=t)
    ref = diagnostics.try_write(project.paths, task.id, f"{command_id or new_id()}-lost", content, project.clock())
    evidence = replace(evidence, diagnostic=ref)
    cause = RestingCause(code, project.clock(), Actor.SYSTEM, evidence=evidence, details={"summary": reason})
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return
        if command is not None and command.kind == "ask":
            # An ask is never resumed as a work turn: record it lost and restore the pre-ask status.
            if command_id is not None and tx.turn_by_command(command_id, Role.AGENT) is None:
                tx.add_turn(
                    task.id,
                    role=Role.AGENT,
                    kind="error",
                    content=f"The ask was lost: {reason}.",
                    session_id=current.session_id,
                    failure=evidence,
                    command_id=command_id,
                )
            tx.park(task.id, Actor.SYSTEM, f"ask lost: {reason}", expected_from=Status.WORKING)
            return
        if command_id is None or tx.turn_by_command(command_id, Role.AGENT) is None:
            human = tx.turn_by_command(command_id, Role.HUMAN) if command_id else None
            details: dict[str, object] = {"lost_command": command_id}
            if human is not None:
                details["log_turn"] = human.sequence
            tx.add_turn(
                task.id,
                role=Role.AGENT,
                kind="error",
                content=f"The turn was lost: {reason}.",
                session_id=current.session_id,
                failure=evidence,
                details=details,
            )
        tail = output_tail(Path(command.log_dir), t.secrets) if command else ""
        receipts.interrupt(tx, current, reason, cause, logs=tail or None)
        tx.unregister_process(task.id, "supervisor")


def sweep_terminal(project: Project) -> int:
    """Seed 002 sweep 3: processes still alive for complete/abandoned tasks are stopped, records cleared."""
    with project.store.read() as tx:
        records = [(p, tx.get_task(p.task_id)) for p in tx.processes()]
    stopped = 0
    for record, task in records:
        if task is None or task.status not in (Status.COMPLETE, Status.ABANDONED):
            continue
        if record.kind == "supervisor":
            stopped += len(reap_turn(project, task.id))
        if pid_alive(record.pid):
            stop_group(record.pid, 1.0)
            stopped += 1
        with project.store.write() as tx:
            tx.unregister_process(task.id, record.kind, pid=record.pid)
    return stopped


def sweep_stranded_merges(project: Project) -> int:
    """A task in merging with no live accept holding its lock: completed if the merge landed, else restored."""
    with project.store.read() as tx:
        merging = tx.tasks([Status.MERGING])
    return sum(recover_stranded(project, task) != "left" for task in merging)


@dataclass(frozen=True)
class Reconciled:
    """What one pass found: the problems met (one line each) and the tasks whose turn ended."""

    problems: list[str]
    ended: list[str]


def reconcile(project: Project) -> Reconciled:
    """Run every sweep; problems never stop the others. Auto-resume is the caller's (``settle``)."""
    problems: list[str] = []
    ended = sweep_working(project, problems)
    for sweep in (
        sweep_stranded_merges,
        sweep_merged_branches,
        sweep_terminal,
        sweep_stale_pairs,
        sweep_blocked_without_session,
    ):
        try:
            sweep(project)
        except Exception as exc:  # one broken sweep must not hide the state the others repair
            problems.append(f"{sweep.__name__}: {type(exc).__name__}: {exc}")
    return Reconciled(problems, ended)
