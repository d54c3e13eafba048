"""What goes into a diagnostic: a failed or lost turn's cause, attempts and output, translated.

Everything passes through the one safe translator (``read/translator``). Raw harness protocol
(a JSON line of the agent's stream) is never copied: such a line is read through the harness's
own parser and only allowlisted event fields are kept (assistant text, tool names, tool
errors, the result), masked after they are parsed, so thinking blocks, tool inputs, the prompt
and environment values never enter. A line that opens as an object and no longer parses (a
secret masked inside it by the supervisor broke its JSON) is a protocol line too: omitted, never
taken for plain output. Plain output lines (a command's stdout, stderr) stay exact apart from
masking.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import to_builtins

from corral.domain.bounded_json import Decoded, decode
from corral.domain.records import FailureEvidence
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG
from corral.engine.read.translator import TEXT_BYTES, Translator

if TYPE_CHECKING:  # the protocol and the harnesses load only when a diagnostic is written
    from corral.adapters.harness.base import Harness
    from corral.engine.runtime import protocol as proto

#: Size bounds (bytes of UTF-8).
EVENT_TEXT_BYTES = 500  # one partial-output event
TAIL_BYTES = 16 * 1024  # the exact output tail
STDERR_BYTES = 8 * 1024
STACK_BYTES = 8 * 1024
LOG_WINDOW_BYTES = 64 * 1024  # how much of a log is read at all
PARTIAL_EVENTS = 30
TAIL_LINES = 200
ATTEMPTS_KEPT = 24


def _read_window(path: Path, start: int | None = None, end: int | None = None) -> tuple[str, bool]:
    """The last ``LOG_WINDOW_BYTES`` of ``path`` (or of its ``[start, end)`` range); True when cut."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            stop = min(size, end) if end is not None and end > 0 else size
            first = max(start or 0, stop - LOG_WINDOW_BYTES)
            fh.seek(first)
            data = fh.read(max(0, stop - first))
    except OSError:
        return "", False
    return data.decode("utf-8", "replace"), first > (start or 0)


class Output:
    """The translated output of a turn: exact plain lines, and allowlisted events of protocol lines."""

    def __init__(self) -> None:
        self.tail = ""
        self.stderr_tail = ""
        self.partial: list[dict[str, Any]] = []
        self.protocol_lines = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tail": self.tail,
            "stderr_tail": self.stderr_tail,
            "partial_output": self.partial,
            "protocol_lines_omitted": self.protocol_lines,
        }


def _event_json(event: Any, t: Translator) -> dict[str, Any] | None:
    """An allowlisted view of one harness event; None for events a diagnostic never keeps."""
    kind = event.kind
    if kind == "text" and event.text:
        return {"kind": "assistant_text", "text": t.text(event.text, EVENT_TEXT_BYTES)}
    if kind == "tool_start":
        return {"kind": "tool_call", "name": t.text(event.name or "?", 100)}
    if kind == "tool_end" and event.is_error:
        return {"kind": "tool_error", "text": t.text(event.text or "", EVENT_TEXT_BYTES)}
    if kind == "model_error":
        return {"kind": "model_error", "status": event.status, "text": t.text(event.text or "", EVENT_TEXT_BYTES)}
    if kind == "retry":
        return {"kind": "harness_retry"}  # its text is a raw protocol line: never copied
    if kind == "result":
        return {
            "kind": "result",
            "is_error": event.is_error,
            "status": event.status,
            "text": t.text(event.text or "", EVENT_TEXT_BYTES),
        }
    return None


def translate_output(
    log_dir: Path | None,
    harness: Harness | None,
    t: Translator,
    log_range: Sequence[int] | None = None,
    windows: tuple[str, str] | None = None,
) -> Output:
    """Read a turn's logs through the translator (never the raw protocol), parsed by ``harness``.

    ``windows`` (the output and stderr ends the supervisor masked and put in its receipt)
    stand in for the logs: the supervisor's secrets were masked in them, the translator's
    are masked on top. Without them, the logs themselves are read.
    """
    out = Output()
    if log_dir is None and windows is None:
        return out
    if windows is not None:
        lines, err_given = windows[0].splitlines(), windows[1]
    else:
        assert log_dir is not None
        start, end = (int(log_range[0]), int(log_range[1])) if log_range and len(log_range) == 2 else (None, None)
        text, cut = _read_window(log_dir / OUTPUT_LOG, start, end)
        lines = text.splitlines()
        if cut and lines:
            lines = lines[1:]  # the first line was cut by the window
        err_given = None
    plain: list[str] = []
    events: list[dict[str, Any]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("{"):
            # A protocol line (or what is left of one: masking a secret inside it may have broken its
            # JSON) is never copied; one that parses gives its allowlisted fields, masked as read.
            out.protocol_lines += 1
            if harness is not None and _is_json_object(stripped):
                try:
                    parsed = harness.parse(stripped.encode("utf-8"))
                except Exception:
                    parsed = []
                for event in parsed:
                    view = _event_json(event, t)
                    if view is not None:
                        events.append(view)
            continue
        plain.append(line)
    out.partial = events[-PARTIAL_EVENTS:]
    out.tail = t.tail("\n".join(plain[-TAIL_LINES:]), TAIL_BYTES)
    if err_given is not None:
        err_lines = err_given.splitlines()
    else:
        assert log_dir is not None
        err, _cut = _read_window(log_dir / STDERR_LOG)
        err_lines = err.splitlines()
        if _cut and err_lines:
            err_lines = err_lines[1:]
    out.stderr_tail = t.tail("\n".join(err_lines[-TAIL_LINES:]), STDERR_BYTES)
    return out


def _is_json_object(line: str) -> bool:
    decoded = decode(line)  # the agent's output: bounded (a deep line is text here, never a fault)
    return isinstance(decoded, Decoded) and isinstance(decoded.value, dict)


def harness_for(command: proto.Command | None) -> Harness | None:
    """The adapter that reads the turn's output, or None when it cannot be made."""
    if command is None:
        return None
    try:
        from corral.adapters.harness import make_harness

        return make_harness(command.harness, command.harness_settings.as_mapping())
    except Exception:
        return None


def cause_json(evidence: FailureEvidence, t: Translator) -> dict[str, Any]:
    safe = t.evidence(evidence)
    assert safe is not None
    doc = safe.to_json()
    doc.pop("diagnostic", None)
    return doc


def attempts_json(attempts: Sequence[proto.AttemptRecord], t: Translator) -> list[dict[str, Any]]:
    """Each attempt's outcome and failure, allowlisted; the first few and the last ones when there are many."""
    kept = list(attempts)
    if len(kept) > ATTEMPTS_KEPT:
        kept = kept[:4] + kept[-(ATTEMPTS_KEPT - 4) :]
    out = []
    for a in kept:
        f = a.failure
        native = {"exit_code": f.exit_code, "errno": f.errno, "signal": f.signal} if f else {}
        out.append(
            {
                "number": a.number,
                "outcome": t.text(a.outcome, 40),
                "failure_class": t.text(a.failure_class, 40) if a.failure_class else None,
                "code": t.text(f.code, 80) if f else None,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                "native": {k: v for k, v in native.items() if v is not None},
                "reason": t.text(f.details.get("reason") or "" if f else "", TEXT_BYTES),
            }
        )
    return out


def for_receipt(
    *,
    task_id: str,
    receipt: proto.Receipt,
    command: proto.Command | None,
    log_dir: Path | None,
    failure: FailureEvidence | None,
    t: Translator,
) -> dict[str, Any]:
    """The diagnostic of a turn whose receipt says it failed (or that failed attempts on the way)."""
    last_range = receipt.attempts[-1].log if failure is not None and receipt.attempts else None
    given = receipt.output_window, receipt.stderr_window
    windows = (given[0] or "", given[1] or "") if given != (None, None) else None
    output = translate_output(log_dir, harness_for(command), t, last_range, windows)
    doc: dict[str, Any] = {
        "kind": "turn-failure" if failure is not None else "retried-attempts",
        "task_id": task_id,
        "command_id": receipt.command_id,
        "turn_kind": t.text(receipt.kind or (command.kind if command else "work"), 40),
        "harness": t.text(command.harness, 40) if command else None,
        "cause": cause_json(failure, t) if failure is not None else None,
        "attempts": attempts_json(receipt.attempts, t),
        "retry": {
            "failure_class": receipt.failure_class,
            "attempts_in_streak": receipt.failure_attempts,
            "stop": receipt.stop_reason,
            "budgets": to_builtins(command.budgets) if command else None,
            "watchdog_timeout_seconds": command.watchdog.timeout_seconds if command else None,
        },
        "output": output.to_json(),
    }
    err = receipt.error
    if err is not None:
        from corral.engine.runtime import protocol as proto

        if err.kind is proto.ErrorKind.INTERNAL and err.tail:
            doc["stack"] = t.tail(err.tail, STACK_BYTES)
        if err.receipt_problem is not None:
            doc["receipt"] = {
                "file": proto.RESPONSE,
                "problem": t.text(err.receipt_problem, 40),
                "size": err.receipt_size,
            }
    return doc


def for_lost(
    *,
    task_id: str,
    status: proto.SupervisorStatus | None,
    command: proto.Command | None,
    evidence: FailureEvidence,
    t: Translator,
) -> dict[str, Any]:
    """The diagnostic of a lost turn: what was last seen of its supervisor, and its output so far."""
    output = translate_output(Path(command.log_dir) if command else None, harness_for(command), t)
    observation: dict[str, Any] | None = None
    if status is not None:
        retry = status.retry
        observation = {
            "phase": t.text(status.phase, 40) or None,
            "heartbeat_at": status.heartbeat_at,
            "started_at": status.started_at,
            "attempt": status.attempt,
            "supervisor_pid": status.pid,
            "agent_pid": status.agent_pid,
            "retry": {
                "attempt": retry.attempt,
                "failure_class": t.text(retry.failure_class, 40) or None,
                "reason": t.text(retry.reason, TEXT_BYTES),
                "next_delay_ms": retry.next_delay_ms,
            }
            if retry is not None
            else None,
        }
    return {
        "kind": "turn-lost",
        "task_id": task_id,
        "command_id": command.command_id if command else None,
        "turn_kind": t.text(command.kind if command else "work", 40),
        "harness": t.text(command.harness, 40) if command else None,
        "cause": cause_json(evidence, t),
        "last_observation": observation,
        "output": output.to_json(),
    }
