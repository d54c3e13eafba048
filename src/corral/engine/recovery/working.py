"""The working sweep's core: a turn's receipt becomes its turn, and a supervisor gone without one
leaves its turn lost (→ interrupted), with what was seen.

Loaded only when a pass has a working or interrupted task to look at.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from corral.adapters.files import entry_exists
from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id
from corral.domain.delays import Delays
from corral.domain.explain import RECEIPT_PROBLEMS
from corral.domain.records import (
    INCIDENTS,
    READ_ONLY_KEPT,
    FailureEvidence,
    PossibleEffects,
    RestingCause,
    Task,
    TaskHead,
)
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import Observed, live_of, protocol_path
from corral.engine.runtime.processes import GONE, reap_turn, supervisor_alive, supervisor_lost
from corral.errors import CorralError, StoreCorrupt
from corral.store.sqltx import UNREADABLE


def process_receipt(project: Project, task: Task, protocol_dir: str | Path | None = None) -> bool:
    """A completed or failed receipt in the task's protocol dir becomes its turn. True if one was there.

    A receipt that cannot be used (not a regular file, a symlink, too large, invalid
    UTF-8, blank, not a JSON object, the wrong shape, a newer protocol) is itself the
    evidence: once its supervisor is gone (its agent reaped), the turn is recorded as failed
    with that receipt problem as a durable code. An exception while recording a receipt is an
    execution fault: the task rests interrupted with the cause "internal fault", never
    working with no owner.
    """
    where = protocol_dir or protocol_path(project, task.id)
    # the common case, asked of every running turn on every read: one look-up, no Path built
    if not entry_exists(f"{where}{os.sep}{proto.RESPONSE}"):
        return False
    protocol_dir = Path(where)
    path = protocol_dir / proto.RESPONSE
    found = proto.read(path, proto.Receipt)
    if isinstance(found, proto.Unreadable) and found.problem is proto.Problem.MISSING:
        return False
    import traceback  # a receipt to record: what recording it takes loads here, not in every sweep

    from corral.engine.recovery import receipts

    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    if isinstance(found, proto.Unreadable):
        status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.phase != "done" and supervisor_alive(status):
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
    if command is not None:
        receipt = _swept(project, receipt, command)
    try:
        receipts.apply(project, task, receipt, command)
    except (CorralError, OSError):
        raise  # the store (its StoreError: it translates its driver's faults) or the disk: the next pass tries again
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
    teardown(protocol_dir)
    return True


def sweep_strays(project: Project, ended: float) -> Any:
    """What the agent left under corral's ref namespaces and as lock files, removed (the whole
    store's tasks are corral's: ``corral.engine.runtime.stray_refs``); the report."""
    from corral.engine.runtime import stray_refs

    def known() -> list[str]:
        with project.store.read() as tx:
            return list(tx.refs())  # every task's ref, whatever its status

    report = stray_refs.sweep(project.git, project.repo, known, turn_ended=ended)
    for name in report.task_refs:  # a task's own branch that was a symbolic ref or unreadable: back to verified
        if name.startswith("refs/heads/corral/"):
            from corral.engine.runtime import branch_check

            verified = branch_check.verified_tip(project.git, project.repo, name.removeprefix("refs/heads/corral/"))
            if verified is not None:
                project.git.run("update-ref", name, verified, "0" * 40, cwd=project.repo, check=False)
    return report


def _swept(project: Project, receipt: proto.Receipt, command: proto.Command) -> proto.Receipt:
    """The receipt with the stray-ref sweep's report in its refs report, when it removed or left anything."""
    from corral.domain.clock import parse_time
    from corral.engine.runtime.ref_guard import RefGuard

    when = parse_time(receipt.ended_at)
    report = sweep_strays(project, when.timestamp() if when else time.time())
    common = command.sandbox.git_common_dir if command.sandbox is not None else None
    if common:  # the settled quarantines' files, set aside at the turn's end, go now
        from corral.engine.runtime import quarantine

        quarantine.purge(common)
    # The turn's own branch, should the sweep have removed what stood in its place (a directory of refs
    # at its name, where the put-back could not go): back to its verified tip now. A sweep that removed
    # nothing changed no ref, and the supervisor checked the branch before its receipt: nothing to ask git
    # then (the common case, on a crash's way to its resume), unless that check could not be made.
    from corral.engine.runtime import branch_check

    restored = None
    unchecked = receipt.refs is not None and receipt.refs.error is not None
    swept = report.removed or report.task_refs or report.error is not None or unchecked
    if swept and command.branch and not project.git.ref_exists(f"refs/heads/{command.branch}", cwd=project.repo):
        restored, _ = branch_check.check(
            project.git,
            project.repo,
            task_ref=command.task_ref,
            branch=command.branch,
            target=None,
            turn=command.sequence,
            objects=None,
            confined=False,
        )
    if report.clean and report.error is None and restored is None:
        return receipt
    guard = receipt.refs or RefGuard()
    moves = (restored, *guard.moves) if restored is not None else guard.moves
    strays = report.to_json() if not (report.clean and report.error is None) else guard.strays
    return replace(receipt, refs=replace(guard, strays=strays, moves=moves))


def _finish_ref_guard(project: Project, task: Task) -> None:
    """A supervisor that died after its agent ran left the ref guard's check undone: done here
    (idempotent; it never raises), so a ref the agent moved is put back even with no receipt."""
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    if command is None:
        return
    from corral.engine.runtime import ref_restore

    sweep_strays(project, time.time())  # its agent was reaped just now: a stray lock would block the put-back
    ref_restore.for_command(project.git, command)


def teardown(protocol_dir: Path) -> None:
    """A recorded turn's ephemera go: its agent's token, its wait markers and progress line."""
    from corral.engine.runtime import agent_marks, agent_tokens

    agent_tokens.revoke_command(protocol_dir)
    agent_marks.clear(protocol_dir)


def reconcile_working(project: Project, head: TaskHead, grace: timedelta, *, observed: Observed | None = None) -> bool:
    """True when the task's turn ended in this pass.

    ``head`` is what the sweep read of the task (``Tx.task_heads``). Its current command id
    is trusted only to confirm that a supervisor alive and beating runs that very command.
    Anything that could end the turn reads the task and its command afresh, so a launch
    between the two reads is never taken for a loss (and the common case, a supervisor alive,
    decodes no task). ``observed`` collects what was seen of each supervisor found running. A task
    whose row does not decode is passed over, never a problem of every pass: ``doctor`` names it.
    """
    try:
        return _reconcile_working(project, head, grace, observed)
    except StoreCorrupt as exc:
        if exc.code != UNREADABLE:
            raise
        return False  # a row that does not decode is skipped, as every read skips it; doctor names it


def _reconcile_working(project: Project, head: TaskHead, grace: timedelta, observed: Observed | None) -> bool:
    protocol_dir = protocol_path(project, head.id)  # a string: this runs for every running turn on every read
    if entry_exists(f"{protocol_dir}{os.sep}{proto.RESPONSE}"):  # a receipt waits (rare): recorded with the task
        task = _task(project, head.id)
        if task is not None and process_receipt(project, task, protocol_dir):
            return True
    if head.status is not Status.WORKING:
        return False
    status = proto.read_record(f"{protocol_dir}{os.sep}{proto.STATUS}", proto.SupervisorStatus)
    why = supervisor_lost(status, stale=Delays.of(project.config).stale_heartbeat) if status is not None else None
    if status is not None and why is None and head.command_id is not None and status.command_id == head.command_id:
        if observed is not None:
            observed[head.id] = live_of(status, alive=True)
        return False
    with project.store.read() as tx:
        task = tx.get_task(head.id)
        current = tx.current_command(head.id)
        # A turn a worker claimed was launched at its claim, not when it was queued (docs/workers.md).
        lease = project.placement.turn_lease(tx, head.id)
    if task is None:
        return False  # deleted since the sweep read it: no turn of it is left to reconcile
    if status is not None and current is not None and status.command_id != current.command_id:
        # The previous turn's supervisor: the current one has not been seen alive yet (a launch
        # may be between its commit and its spawn), so only the grace period applies.
        status, why = None, None
    if status is not None and why is None:
        if observed is not None:
            observed[task.id] = live_of(status, alive=True)
        return False
    if status is None:
        # Never seen alive: only the grace period protects it, counted from the launching turn.
        since = current.started_at if current is not None else task.last_interaction_at
        claimed = lease is not None and current is not None and lease.command_id == current.command_id
        if claimed and lease is not None and lease.claimed_at is not None:
            since = max(since, lease.claimed_at)
        # Bounded whatever the clocks say: a start stored further ahead than the grace period itself
        # (a clock set wrong, a row another host wrote) protects nothing, so the turn is still judged.
        if -grace < project.clock() - since < grace:
            return False
    if not process_receipt(project, task, protocol_dir):  # it may have finished between our two looks
        lost(project, task, status, why)
    return True


def _task(project: Project, task_id: str) -> Task | None:
    with project.store.read() as tx:
        return tx.get_task(task_id)


#: What is unknown about a lost turn, by the phase its supervisor was last seen in.
LOST_PHASES_DONE = frozenset({"response", "done"})


def lost(project: Project, task: Task, status: proto.SupervisorStatus | None, why: str | None = None) -> None:
    """The supervisor is gone (or frozen: ``why`` says so) and left no receipt: the turn is lost →
    interrupted, with what was seen.

    The lost turn is recorded as an agent turn of kind ``error`` carrying the evidence
    (its diagnostic — the last observation of the supervisor and the output so far — is
    written first). It does not claim the command, so a completed receipt that still
    arrives later is recorded too. A supervisor alive with a stale heartbeat is stopped with
    its agent (each only if it is still the process recorded).
    """
    from corral.engine.read import diagnostic_content, diagnostics  # a lost turn: what recording it takes loads here
    from corral.engine.read.translator import Translator
    from corral.engine.recovery import receipts
    from corral.engine.runtime.observer import observe_lost  # the harness's log reader: only for a lost turn
    from corral.engine.runtime.receipt import output_tail

    reap_turn(project, task.id)  # an orphaned agent must not work on beside the next turn
    _finish_ref_guard(project, task)
    teardown(project.paths.protocol_dir(task.id))
    phase = status.phase if status else None
    reason = "the supervisor ended without a receipt" if status else "the supervisor never started"
    frozen = why is not None and why != GONE
    if frozen:
        reason = f"the supervisor was lost: {why}"
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    command_id = command.command_id if command else None
    code = "receipt-missing" if phase in LOST_PHASES_DONE and not frozen else "turn-lost"
    t = Translator()
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
    kept = None
    if command is not None and command.read_only_before is not None:
        # A read-only turn lost with no receipt is held to read-only all the same: what it
        # changed is kept aside and reverted before the task rests again.
        with project.store.read() as tx:
            launched = tx.turn_by_command(command.command_id, Role.HUMAN)
        kept = receipts.keep_read_only_aside(project, task, command, launched.sequence if launched else None)
    if command is not None:
        observe_lost(command, reason, t.secrets)  # the turn's last observation: its log, and that it was lost
    incidents = receipts.incident_summary(command)  # list's badge, as show reads the journal now
    content = diagnostic_content.for_lost(task_id=task.id, status=status, command=command, evidence=evidence, t=t)
    ref = diagnostics.try_write(project.paths, task.id, f"{command_id or new_id()}-lost", content, project.clock())
    evidence = replace(evidence, diagnostic=ref)
    cause = RestingCause(code, project.clock(), Actor.SYSTEM, evidence=evidence, details={"summary": reason})
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return
        if incidents is not None:
            tx.update_task(task.id, metadata={**current.metadata, INCIDENTS: incidents}, touch=False)
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
                    details={"kept": kept.to_json()} if kept is not None else None,
                )
            held = receipts.kept_evidence(kept, t) if kept is not None else None
            tx.park(
                task.id,
                Actor.SYSTEM,
                f"ask lost: {reason}",
                expected_from=Status.WORKING,
                resting_cause=RestingCause(READ_ONLY_KEPT, project.clock(), Actor.SYSTEM, evidence=held)
                if held is not None
                else None,
            )
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
