"""Turning a supervisor's receipt into the turn, its attempts and the status change, once.

The claim is the agent turn's unique ``command_id``: two reconcilers racing on one
``response.json`` insert one agent turn; the loser sees it and only tidies up.

A failed turn (or one whose attempts failed on the way) gets its detailed diagnostic
written first (``corral.engine.read.diagnostics``), then the row that references it. Every
piece of evidence taken from a receipt passes the safe translator: allowlisted detail
fields, masked secrets, bounded sizes — and so does every text the turn keeps from the
harness (its result, the check's tail, an interrupt's log). The supervisor masked them with
its secrets before they reached the receipt; this masks them again with the reconciler's.

A read-only turn (an ask) is held to it here too: when its receipt carries no kept-aside
result (its supervisor did not compare, or crashed before it could), the branch and worktree
are compared with the command's before-state and any change is kept on
``refs/corral/kept/<ref>/<turn>`` and reverted (:mod:`corral.engine.readonly`) before the turn
is recorded. The turn then carries the typed cause ``read-only-changes-kept`` (and, for an
ask, so does the status it returns to), which ``show`` explains.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from corral import crashpoints
from corral.adapters.locks import lock
from corral.domain.actors import Actor, Role
from corral.domain.breaker import Breaker, Counters
from corral.domain.clock import parse_time
from corral.domain.explain import NOTHING_RAN
from corral.domain.records import (
    INCIDENTS,
    READ_ONLY_KEPT,
    AttemptOutcome,
    FailureEvidence,
    PossibleEffects,
    RestingCause,
    Task,
)
from corral.domain.status import Status
from corral.engine import readonly
from corral.engine.private_state import make_private_dir
from corral.engine.project import Project
from corral.engine.read import diagnostic_content, diagnostics
from corral.engine.read.translator import Translator
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.check import CHECK_TAIL_BYTES
from corral.engine.runtime.journal import Journal
from corral.engine.runtime.ref_guard import RefGuard
from corral.store import Tx

#: error kinds of a receipt -> the resting cause code of the interrupted task.
ERROR_CAUSES = {
    proto.ErrorKind.CRASH: "turn-crashed",
    proto.ErrorKind.CRASH_LOOP: "crash-loop",
    proto.ErrorKind.WATCHDOG: "watchdog-no-progress",
    proto.ErrorKind.MERGE_AND_FIX: "merge-and-fix-failed",
    proto.ErrorKind.INTERNAL: "internal-fault",
}

#: The flock two reconcilers take before comparing one read-only turn, and how long one waits.
READ_ONLY_LOCK = "read-only.lock"
READ_ONLY_LOCK_SECONDS = 30.0


#: Why a receipt could not be used (``protocol.Problem``) -> its evidence code.
RECEIPT_CODES = {
    proto.Problem.MISSING: "receipt-missing",
    proto.Problem.TOO_LARGE: "receipt-too-large",
}


def receipt_code(problem: str | None) -> str:
    """The evidence code of a receipt that could not be used: missing, too large, or invalid."""
    for known, code in RECEIPT_CODES.items():
        if problem == known.value:
            return code
    return "receipt-invalid"


def _evidence(evidence: FailureEvidence | None, t: Translator, ref: str | None) -> FailureEvidence | None:
    safe = t.evidence(evidence)
    if safe is not None and ref is not None:
        safe = replace(safe, diagnostic=ref)
    return safe


_OUTCOMES = {o.value: o for o in AttemptOutcome}


def _record_attempts(tx: Tx, turn_id: str, receipt: proto.Receipt, t: Translator, ref: str | None) -> None:
    for a in receipt.attempts:
        tx.add_attempt(
            turn_id,
            number=a.number,
            started_at=parse_time(a.started_at) or tx.now(),
            ended_at=parse_time(a.ended_at),
            outcome=_OUTCOMES.get(a.outcome, AttemptOutcome.INDETERMINATE),
            failure_class=a.failure_class,
            failure=_evidence(a.failure, t, ref),
        )


def _native(receipt: proto.Receipt) -> tuple[int | None, int | None, int | None]:
    """The native codes (exit code, errno, signal) of the last attempt: the one that ended the turn."""
    last = receipt.attempts[-1].failure if receipt.attempts else None
    if last is None:
        return None, None, None
    return last.exit_code, last.errno, last.signal


def possible_effects(receipt: proto.Receipt, code: str) -> PossibleEffects:
    """none when the harness never ran or git shows nothing changed; partial when it shows changes."""
    if code in NOTHING_RAN and len(receipt.attempts) <= 1:
        return PossibleEffects.NONE
    git = receipt.git
    if git is None or git.error is not None:
        return PossibleEffects.UNKNOWN
    changed = bool(git.changed_paths) or bool(git.commits) or git.dirty
    unknown = [a for a in receipt.attempts if a.failure and a.failure.possible_effects is PossibleEffects.UNKNOWN]
    if not changed and code == "crash-loop" and unknown:
        return PossibleEffects.UNKNOWN  # what its attempts did beyond the worktree is unknown: so is the loop's
    return PossibleEffects.PARTIAL if changed else PossibleEffects.NONE


def failure_of(
    receipt: proto.Receipt,
    command: proto.Command | None = None,
    t: Translator | None = None,
) -> FailureEvidence | None:
    """The turn's failure evidence, from its receipt, through the safe translator."""
    t = t or Translator()
    exit_code, errno_, signal = _native(receipt)
    if receipt.status is proto.ReceiptStatus.FAILED:
        code = receipt.failure_code or "harness-error"
        details: dict[str, Any] = {
            "reason": receipt.failure_reason or "",
            "attempts": receipt.failure_attempts,
            "stop": receipt.stop_reason,
        }
        if code == "harness-missing":
            harness = diagnostic_content.harness_for(command)
            if harness is not None and getattr(harness, "executable", None):
                details["executable"] = str(harness.executable)
        return t.evidence(
            FailureEvidence(
                source="harness",
                code=code,
                phase="work",
                category=receipt.failure_class,
                possible_effects=possible_effects(receipt, code),
                exit_code=exit_code,
                errno=errno_,
                signal=signal,
                details=details,
            )
        )
    if receipt.status is proto.ReceiptStatus.ERROR:
        err = receipt.error or proto.TurnError(kind=proto.ErrorKind.CRASH, phase=None, reason="")
        if err.kind is proto.ErrorKind.RECEIPT:
            problem = err.receipt_problem or "invalid-json"
            details = {"reason": err.reason, "receipt": proto.RESPONSE, "problem": problem}
            if err.receipt_size is not None:
                details["size"] = err.receipt_size
            return t.evidence(
                FailureEvidence(
                    source="corral",
                    code=receipt_code(problem),
                    phase="response",
                    category="receipt",
                    possible_effects=PossibleEffects.UNKNOWN,
                    details=details,
                )
            )
        code = ERROR_CAUSES.get(err.kind, "turn-crashed")
        details = {"reason": err.reason}
        if err.kind is proto.ErrorKind.WATCHDOG:
            if command is not None:
                details["timeout_seconds"] = command.watchdog.timeout_seconds
            # how often it was relaunched after a kill in this turn: once says it hung again after a relaunch
            kills = sum(1 for a in receipt.attempts if a.failure is not None and a.failure.code == code)
            details["relaunches"] = max(kills - 1, 0)
        effects = possible_effects(receipt, code)
        if err.kind is proto.ErrorKind.MERGE_AND_FIX:
            effects = PossibleEffects.PARTIAL  # the merge stands half done in the worktree
        signal = err.signal
        if signal is None and err.exit_code is not None and err.exit_code > 128 and err.kind is proto.ErrorKind.CRASH:
            signal = err.exit_code - 128
        kind = err.kind.value
        return t.evidence(
            FailureEvidence(
                source="supervisor" if err.kind is proto.ErrorKind.INTERNAL else "harness",
                code=code,
                phase=err.phase,
                category="crash" if err.kind in (proto.ErrorKind.CRASH, proto.ErrorKind.CRASH_LOOP) else kind,
                possible_effects=effects,
                exit_code=err.exit_code,
                errno=errno_,
                signal=signal,
                details=details,
            )
        )
    return None


def _failed_attempts(receipt: proto.Receipt) -> bool:
    return any(a.outcome == "failed" for a in receipt.attempts)


def write_diagnostic(
    project: Project,
    task: Task,
    receipt: proto.Receipt,
    command: proto.Command | None,
    failure: FailureEvidence | None,
    log_seq: int | None,
    t: Translator,
) -> str | None:
    """The turn's detailed diagnostic, written before its row; None when nothing failed."""
    if failure is None and not _failed_attempts(receipt):
        return None
    log_dir = project.paths.turn_dir(task.id, log_seq) if log_seq is not None else None
    content = diagnostic_content.for_receipt(
        task_id=task.id, receipt=receipt, command=command, log_dir=log_dir, failure=failure, t=t
    )
    return diagnostics.try_write(project.paths, task.id, f"{receipt.command_id}", content, project.clock())


def apply(project: Project, task: Task, receipt: proto.Receipt, command: proto.Command | None = None) -> bool:
    """Record one receipt; True when this call claimed it, False when it was already claimed.

    ``command`` is the turn's ``command.json`` when the caller has it (for the watchdog's
    bound and the harness that reads the output); the diagnostic of a failed turn is
    written before the transaction that records the turn.
    """
    command_id = receipt.command_id
    if command_id is None:
        return False
    with project.store.read() as tx:
        if tx.turn_by_command(command_id, Role.AGENT) is not None:
            return False
        human = tx.turn_by_command(command_id, Role.HUMAN)
    receipt = hold_read_only(project, task, receipt, command, human.sequence if human else None)
    t = Translator()
    failure = failure_of(receipt, command, t)
    ref = write_diagnostic(project, task, receipt, command, failure, human.sequence if human else None, t)
    if failure is not None and ref is not None:
        failure = replace(failure, diagnostic=ref)
    if failure is None and receipt.kept is not None:
        failure = kept_evidence(receipt.kept, t)
    if command is not None:
        from corral.engine.runtime.observer import catch_up  # the harness's log reader: only when a turn ends

        catch_up(command, t.secrets)  # what the supervisor saw but the journal refused, before it is summed up
    incidents = incident_summary(command)
    with project.store.write() as tx:
        if command is not None and command.fence is not None:
            # A worker's turn: recorded only while its epoch still holds the lease (docs/workers.md).
            tx.check_fence(task.id, command.fence.epoch)
        if tx.turn_by_command(command_id, Role.AGENT) is not None:
            return False  # another reconciler claimed it meanwhile; its row references the same file
        current = tx.get_task(task.id)
        if current is None:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return False
        _record(tx, current, receipt, command_id, human.sequence if human else None, failure, ref, t)
        if incidents is not None:
            again = tx.get_task(task.id)
            if again is not None:
                tx.update_task(task.id, metadata={**again.metadata, INCIDENTS: incidents}, touch=False)
    crashpoints.hit("reconcile.after-claim")
    return True


def incident_summary(command: proto.Command | None) -> dict[str, object] | None:
    """What the session's journal says when its turn is recorded: the badge ``list`` shows, read once."""
    if command is None or not command.journal_dir:
        return None
    state = Journal(Path(command.journal_dir)).read()
    return {"needs_action": len(state.needs_action), "session_id": Path(command.journal_dir).name}


def hold_read_only(
    project: Project, task: Task, receipt: proto.Receipt, command: proto.Command | None, turn: int | None
) -> proto.Receipt:
    """The receipt with its read-only turn's changes kept aside and reverted (when its supervisor did not).

    Only for the command this receipt answers, with a before-state recorded at launch; safe
    to run twice (a crash after the kept ref was written finishes the revert).
    """
    if receipt.kept is not None or command is None or command.command_id != receipt.command_id:
        return receipt
    kept = keep_read_only_aside(project, task, command, turn)
    return replace(receipt, kept=kept) if kept is not None else receipt


def keep_read_only_aside(
    project: Project, task: Task, command: proto.Command, turn: int | None = None
) -> readonly.Kept | None:
    """A read-only command's changes kept aside and reverted; None when it is not read-only or changed nothing.

    Also for a read-only turn lost with no receipt (``working.lost``). ``turn`` is the
    sequence of the turn that launched it (the kept ref's name), else the command's.
    """
    if command.read_only_before is None:
        return None
    number = turn if turn is not None else command.sequence
    ref = readonly.kept_ref(task.ref, number)
    # Two reconcilers may record one receipt at once: one compares and reverts, the other then
    # finds the worktree as it was and the kept ref there (so it reports the same keep-aside).
    fd = lock(project.paths.protocol_dir(task.id) / READ_ONLY_LOCK, READ_ONLY_LOCK_SECONDS)
    try:
        kept = readonly.keep_aside(
            project.git, Path(command.worktree), command.read_only_before, ref, f"read-only turn {number} of {task.ref}"
        )
    finally:
        if fd is not None:
            os.close(fd)
    crashpoints.hit("reconcile.read-only-kept")
    return kept


def kept_summary(kept: readonly.Kept) -> str:
    """One plain line: what a read-only turn changed, where it is kept, whether it was reverted."""
    parts = []
    if kept.commits:
        parts.append(f"{kept.commits} commit{'' if kept.commits == 1 else 's'}")
    if kept.path_count:
        parts.append(f"{kept.path_count} file{'' if kept.path_count == 1 else 's'}")
    what = " and ".join(parts) or "the branch"
    done = "reverted" if kept.reverted else f"NOT reverted ({kept.error or 'the revert failed'})"
    return f"{what} changed, kept on {kept.ref} and {done}"


def kept_evidence(kept: readonly.Kept, t: Translator) -> FailureEvidence | None:
    """The typed cause a read-only turn that changed something records."""
    return t.evidence(
        FailureEvidence(
            source="corral",
            code=READ_ONLY_KEPT,
            phase="work",
            category="read-only",
            possible_effects=PossibleEffects.NONE if kept.reverted else PossibleEffects.PARTIAL,
            details={"summary": kept_summary(kept), "files": list(kept.paths), "reason": kept.ref},
        )
    )


def _details(receipt: proto.Receipt, human_seq: int | None, t: Translator) -> dict[str, Any]:
    """What a turn keeps of its receipt beside its content: git facts, the check, the sync, the stop."""
    details: dict[str, Any] = {}
    git = receipt.git
    if git is not None and git.error is None:
        details.update(
            {
                "commits": list(git.commits),
                "head": git.head,
                "changed_paths": list(git.changed_paths),
                "protected_changes": list(git.protected_changes),
                "dirty": git.dirty,
                "changed_count": git.changed_total,
                "changed_paths_truncated": git.changed_total > len(git.changed_paths),
                "protected_count": git.protected_total,
                "protected_changes_truncated": git.protected_total > len(git.protected_changes),
                "commit_count": git.commit_total,
                "commits_truncated": git.commit_total > len(git.commits),
            }
        )
    if receipt.check is not None:
        check = receipt.check.to_json()
        check["tail"] = t.tail(receipt.check.tail, CHECK_TAIL_BYTES)
        check["command"] = t.mask(receipt.check.command)
        details["check"] = check
    if receipt.sync is not None:
        details["sync"] = receipt.sync.to_json()
    if receipt.stop_reason is not None:
        details["stop_reason"] = receipt.stop_reason
    if receipt.reaped:  # what the agent left running when its turn ended, and corral stopped
        details["reaped"] = [{**r.to_json(), "command": t.mask(r.command)} for r in receipt.reaped]
    if receipt.kept is not None:  # a read-only turn's changes, kept aside and reverted
        kept = receipt.kept.to_json()
        kept["paths"] = [t.text(p, 1024) for p in receipt.kept.paths]
        kept["error"] = t.text(receipt.kept.error, 500) if receipt.kept.error else None
        details["kept"] = kept
    if receipt.refs is not None and ref_guard_worth_keeping(receipt.refs):  # refs the agent moved, put back
        details["refs"] = guarded_json(receipt.refs, t)
    details = {k: v for k, v in details.items() if v is not None}
    if human_seq is not None:
        details["log_turn"] = human_seq
    return details


def ref_guard_worth_keeping(guard: RefGuard) -> bool:
    """A report with something to say: a move put back, an error, objects refused, strays removed."""
    rejected = bool(guard.objects and guard.objects.get("rejected"))
    return bool(guard.moves or guard.error or rejected or guard.strays)


def guarded_json(guard: RefGuard, t: Translator) -> dict[str, Any]:
    """The ref guard's report as a turn keeps it: ref names and errors are the agent's text, masked."""
    doc = guard.to_json()
    for move in doc["moves"]:
        move["ref"] = t.text(move["ref"], 300)
        move["kept"] = t.text(move["kept"], 400) if move["kept"] else None
        move["error"] = t.text(move["error"], 300) if move["error"] else None
    doc["error"] = t.text(guard.error, 300) if guard.error else None
    if "objects" in doc:
        doc["objects"]["problems"] = [t.text(str(p), 300) for p in doc["objects"].get("problems") or []][:20]
        doc["objects"]["kept"] = t.text(str(doc["objects"]["kept"]), 400) if doc["objects"].get("kept") else None
    if "strays" in doc:
        from corral.engine.runtime.stray_report import StrayReport

        try:  # the names are the agent's: masked and bounded, as every other text it wrote
            strays = StrayReport.from_json(doc["strays"]).to_json()
        except (ValueError, TypeError):
            strays = {"error": "the stray-ref report could not be read"}
        doc["strays"] = _masked_tree(strays, t)
    return doc


def _masked_tree(value: Any, t: Translator) -> Any:
    if isinstance(value, str):
        return t.text(value, 400)
    if isinstance(value, list):
        return [_masked_tree(v, t) for v in value[:40]]
    if isinstance(value, dict):
        return {k: _masked_tree(v, t) for k, v in value.items()}
    return value


def _record(
    tx: Tx,
    task: Task,
    receipt: proto.Receipt,
    command_id: str,
    human_seq: int | None,
    failure: FailureEvidence | None,
    diagnostic: str | None,
    t: Translator,
) -> None:
    status = receipt.status
    kind = receipt.kind or "work"
    is_ask = kind in ("ask", "pre-accept")  # status-neutral turns: they restore, and consume no feedback
    session_id = task.session_id
    latest = tx.current_command(task.id)
    # A receipt of an earlier command (a newer one was launched meanwhile) is recorded as its
    # turn, but it moves nothing: the status and the session belong to the newer command.
    stale = latest is not None and latest.command_id != command_id
    S = proto.ReceiptStatus
    if status is S.COMPLETED:
        turn_kind, content = kind, t.content(receipt.result or "")
    elif status is S.STOPPED:
        turn_kind = "stopped"
        content = f"Stopped by {receipt.stopped_by or 'system'}."
    else:
        turn_kind = "error"
        content = str((failure.details.get("reason") if failure else "") or "The turn failed.")
    turn = tx.add_turn(
        task.id,
        role=Role.AGENT,
        kind=turn_kind,
        content=content,
        session_id=session_id,
        started_at=parse_time(receipt.started_at),
        ended_at=parse_time(receipt.ended_at) or tx.now(),
        usage=receipt.usage,
        failure=failure,
        details=_details(receipt, human_seq, t),
        command_id=command_id,
    )
    _record_attempts(tx, turn.id, receipt, t, diagnostic)
    for record in tx.processes(task.id):
        if record.kind == "supervisor" and record.command_id == command_id:
            tx.unregister_process(task.id, "supervisor", pid=record.pid)
    session_updates: dict[str, Any] = {}
    if receipt.harness_session_id:
        session_updates["harness_session_id"] = receipt.harness_session_id
    if status is S.COMPLETED and not is_ask:
        tx.mark_feedback_consumed(receipt.delivered)
    if stale:
        return
    git = receipt.git if receipt.git is not None and receipt.git.error is None else None
    if status is S.COMPLETED and not is_ask:
        session = tx.get_session(session_id) if session_id else None
        session_updates.update(Breaker().on_success(Counters.of(session)).fields())
        if git is not None and git.head:
            session_updates["git_start_sha"] = git.head
        if git is not None and git.protected_changes:
            tx.record_violations(task.id, git.protected_changes, turn_id=turn.id, check_from=git.check_from)
    if session_id and session_updates:
        tx.update_session(session_id, **session_updates)
    if task.status is not Status.WORKING and not (task.status is Status.INTERRUPTED and status is S.COMPLETED):
        return  # moved on meanwhile (stopped, closed): the turn is on record, the status stays
    if task.status is Status.INTERRUPTED:
        # A completed receipt written after the task was marked interrupted: through working to the park.
        tx.set_status(
            task.id, Status.WORKING, Actor.SYSTEM, "a completed response arrived late", expected_from=Status.INTERRUPTED
        )
    if is_ask or status in (S.COMPLETED, S.STOPPED, S.FAILED):
        cause = None
        if status is S.STOPPED:
            actor = receipt.stopped_by or "system"
            cause = RestingCause(
                "stopped",
                tx.now(),
                Actor(actor) if actor in Actor._value2member_map_ else None,
                details={"summary": f"Stopped by {actor}."},
            )
        elif status is S.FAILED and not is_ask:
            cause = RestingCause(failure.code if failure else "harness-error", tx.now(), Actor.SYSTEM, evidence=failure)
            if session_id:  # recorded as an interrupt too, though it parks: the breaker's count stays
                tail = receipt.error.tail if receipt.error is not None else ""
                tx.update_session(
                    session_id,
                    interrupt_reason=t.text(content, 500),
                    interrupt_exit_code=failure.exit_code if failure is not None else None,
                    interrupt_at=tx.now(),
                    interrupt_logs=t.tail(tail, diagnostic_content.TAIL_BYTES) if tail else None,
                )
        if receipt.kept is not None and (cause is None or is_ask):
            # The read-only turn's changes were taken away: the task says so until its next turn.
            kept = failure if failure is not None and failure.code == READ_ONLY_KEPT else kept_evidence(receipt.kept, t)
            summary = str(kept.details.get("summary") or "") if kept else ""
            cause = RestingCause(READ_ONLY_KEPT, tx.now(), Actor.SYSTEM, evidence=kept, details={"summary": summary})
        if kind == "pre-accept" and task.metadata.get("accept_in_flight_from") == Status.SUBMITTED.value:
            # The pre-accept turn of a submitted task restores submitted, not a park label.
            tx.set_status(
                task.id,
                Status.SUBMITTED,
                Actor.SYSTEM,
                f"{kind} turn {status.value}",
                expected_from=Status.WORKING,
                resting_cause=cause,
            )
            return
        tx.park(task.id, Actor.SYSTEM, f"{kind} turn {status.value}", expected_from=Status.WORKING, resting_cause=cause)
        return
    # An error receipt: a crash, a crash loop, a watchdog kill after work, a failed merge-and-fix, a fault.
    err = receipt.error
    code = (
        failure.code if failure is not None else ERROR_CAUSES.get(err.kind, "turn-crashed") if err else "turn-crashed"
    )
    reason = t.text((err.reason if err else "") or "the turn crashed", 500)
    cause = RestingCause(code, tx.now(), Actor.SYSTEM, evidence=failure, details={"summary": t.text(reason, 300)})
    tail = err.tail if err else ""
    interrupt(
        tx,
        task,
        reason,
        cause,
        status_reason=t.text(reason, 300),
        exit_code=err.exit_code if err else None,
        logs=t.tail(tail, diagnostic_content.TAIL_BYTES) if tail else None,
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
    interrupt record (reason, exit code, time, log tail, and what the breaker's ``on_interrupt``
    returns: one more consecutive interruption, unless ``counts`` is False), in the caller's
    transaction. Whether the breaker tripped is asked at auto-resume, with the task's own settings."""
    tx.set_status(
        task.id,
        Status.INTERRUPTED,
        Actor.SYSTEM,
        status_reason or reason[:300],
        expected_from=Status.WORKING,
        resting_cause=cause,
    )
    if task.session_id:
        update = Breaker().on_interrupt(Counters.of(tx.get_session(task.session_id)), counted=counts)
        tx.update_session(
            task.session_id,
            interrupt_reason=reason[:500],
            interrupt_exit_code=exit_code,
            interrupt_at=tx.now(),
            interrupt_logs=logs,
            **update.fields(),
        )


def file_away(project: Project, task: Task, response_path: Path, command_id: str | None) -> None:
    """Move a processed receipt next to its turn's output, so the protocol dir holds only live files."""
    with project.store.read() as tx:
        human = tx.turn_by_command(str(command_id), Role.HUMAN)
    dest_dir = project.paths.turn_dir(task.id, human.sequence if human else 0)
    make_private_dir(dest_dir)
    try:
        os.replace(response_path, dest_dir / proto.RESPONSE)
    except FileNotFoundError:
        pass  # another reconciler filed it first
