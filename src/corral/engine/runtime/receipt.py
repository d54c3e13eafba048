"""The pieces of a supervisor's receipt: each attempt's record and evidence, the output tail an
interrupted turn keeps, and the receipt of a turn that could not be set up.

Every receipt is fitted within the protocol's one bound before it is written (``runtime/receipt_fit``).
"""

from __future__ import annotations

import os
from pathlib import Path

from corral.domain.clock import rfc3339
from corral.domain.failures import FailureClass
from corral.domain.records import FailureEvidence, PossibleEffects
from corral.domain.redact import CUT_MARGIN, RESULT_BYTES, masked_head, redact, redact_lines
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG, TURN_LOGS
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.attempts import AttemptRun
from corral.engine.runtime.heartbeat import now

#: How much of each log an interrupted turn's tail reads, and how many lines it keeps.
TAIL_WINDOW_BYTES = 64 * 1024
INTERRUPT_TAIL_LINES = 50
REASON_BYTES = 500
#: The most of any output tail a receipt keeps (the check's, an error's).
TAIL_BYTES = 64 * 1024


def result_text(text: str | None, secrets: list[str]) -> str | None:
    """A turn's result as a receipt keeps it: masked with the capturing process's secrets, bounded."""
    return None if text is None else masked_head(text, secrets, RESULT_BYTES)


def attempt_record(a: AttemptRun, secrets: list[str]) -> proto.AttemptRecord:
    """The typed record of one attempt: its outcome, class and evidence code."""
    verdict = a.verdict
    cls: str | None
    if a.stopped:
        outcome, cls, code = "cancelled", None, "stopped"
    elif a.watchdog:
        outcome, cls, code = "failed", None, "watchdog-no-progress"
    elif a.signal is not None and not a.we_signalled:
        outcome, cls, code = "failed", None, "harness-killed"
    elif a.spawn_error:
        outcome, cls = "failed", FailureClass.FATAL_CONFIG.value
        code = "prompt-unrenderable" if a.argv_error else "harness-missing"
    elif verdict is not None and verdict.succeeded:
        outcome, cls, code = "succeeded", None, None
    elif verdict is not None:
        outcome, cls, code = "failed", (verdict.failure_class or FailureClass.UNKNOWN).value, verdict.code
    else:
        outcome, cls, code = "indeterminate", None, None
    failure = None
    if code is not None:
        reason = verdict.reason if verdict else a.spawn_error or ""
        failure = FailureEvidence(
            source="harness",
            code=code,
            phase="work",
            category=cls or "process",
            possible_effects=PossibleEffects.UNKNOWN if outcome != "cancelled" else PossibleEffects.PARTIAL,
            exit_code=a.exit_code,
            errno=a.spawn_errno,
            signal=a.signal,
            details={"reason": redact(reason[: REASON_BYTES + CUT_MARGIN], secrets)[:REASON_BYTES]},
        )
    return proto.AttemptRecord(
        number=a.number,
        started_at=rfc3339(a.started_at) or "",
        ended_at=rfc3339(a.ended_at),
        outcome=outcome,
        failure_class=cls,
        failure=failure,
        log=(a.log_start, a.log_end),
    )


def output_tail(log_dir: Path, secrets: list[str], lines: int = INTERRUPT_TAIL_LINES) -> str:
    """The last lines of a turn's output and stderr, masked: what an interrupted turn keeps."""
    text = ""
    for name in TURN_LOGS:
        path = log_dir / name
        try:
            with path.open("rb") as fh:
                fh.seek(max(0, path.stat().st_size - TAIL_WINDOW_BYTES))
                text += fh.read().decode("utf-8", "replace")
        except OSError:
            continue
    return redact_lines("\n".join(text.splitlines()[-lines:]), secrets)


def log_windows(log_dir: Path, secrets: list[str], span: tuple[int, int] | None) -> tuple[str, str]:
    """The end of output.log (within ``span``, the last attempt's bytes) and of stderr.log, masked.

    What a failed turn's diagnostic shows of its output, masked here with this process's
    secrets, so a reconciler without them never reads the raw log for it. A line the window
    cut is dropped, so no secret is cut in half before it is masked.
    """
    windows = []
    for name, (start, end) in ((OUTPUT_LOG, span or (0, 0)), (STDERR_LOG, (0, 0))):
        try:
            with (log_dir / name).open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                stop = min(size, end) if end > 0 else size
                first = max(start, stop - TAIL_WINDOW_BYTES)
                fh.seek(first)
                data = fh.read(max(0, stop - first))
        except OSError:
            windows.append("")
            continue
        text = data.decode("utf-8", "replace")
        if first > start and "\n" in text:
            text = text.split("\n", 1)[1]
        windows.append(redact_lines(text, secrets))  # a protocol line masked field by field: still JSON
    return windows[0], windows[1]


def refused(command: proto.Command | None, raw: dict[str, object] | None, reason: str) -> proto.Receipt:
    """The receipt of a turn whose harness could not even be set up: one failed attempt, no process."""
    at = rfc3339(now()) or ""
    evidence = FailureEvidence(
        source="corral",
        code="harness-unknown",
        phase="command",
        category=FailureClass.FATAL_CONFIG.value,
        possible_effects=PossibleEffects.NONE,
        details={"reason": reason},
    )
    source = raw or {}
    command_id = command.command_id if command else source.get("command_id")
    task_id = command.task_id if command else source.get("task_id")
    kind = command.kind if command else source.get("kind")
    return proto.Receipt(
        command_id=command_id if isinstance(command_id, str) else None,
        task_id=task_id if isinstance(task_id, str) else None,
        kind=kind if isinstance(kind, str) else "work",
        status=proto.ReceiptStatus.FAILED,
        started_at=at,
        ended_at=at,
        delivered=command.delivered if command else (),
        failure_class=FailureClass.FATAL_CONFIG.value,
        failure_code="harness-unknown",
        failure_reason=reason,
        failure_attempts=1,
        stop_reason="fatal",
        attempts=(
            proto.AttemptRecord(
                number=1,
                started_at=at,
                ended_at=at,
                outcome="failed",
                failure_class=FailureClass.FATAL_CONFIG.value,
                failure=evidence,
            ),
        ),
    )


def internal(
    command_id: str | None, task_id: str | None, kind: str, phase: str, reason: str, tail: str = ""
) -> proto.Receipt:
    """The receipt of an internal fault: explained, never silent."""
    return proto.Receipt(
        command_id=command_id,
        task_id=task_id,
        kind=kind,
        status=proto.ReceiptStatus.ERROR,
        error=proto.TurnError(kind=proto.ErrorKind.INTERNAL, phase=phase, reason=reason, tail=tail),
    )
