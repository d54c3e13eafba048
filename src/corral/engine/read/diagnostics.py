"""Detailed diagnostics: the technical detail of a failure, kept for 90 days
(docs/architecture.md#failure-evidence-wording-and-diagnostics).

A failure's lasting record is its typed :class:`FailureEvidence` on the turn or attempt
(and the task's resting cause); this module keeps the rest — the translated cause and
stack, a bounded output tail, the harness's partial output, the retry evidence and a
lost turn's last observation — as one JSON file per failed turn under the state
directory's ``diagnostics/<task id>/``. The evidence names it by a reference relative
to ``diagnostics/`` (``FailureEvidence.diagnostic``).

Rules:

* **Written before the row that references it**, atomically (temp file, fsync, rename,
  fsync of the directory). The file name is derived from the turn's command id, so two
  reconcilers racing on one receipt write the same file, and no row ever points at a
  file that was not there when the row was written.
* **Everything passes through the one safe translator** (:class:`Translator`): an
  allowlist of fields, :func:`corral.domain.redact.redact` masking (known secret shapes,
  and the values of environment variables named like ``*KEY*``, ``*TOKEN*``, …), and
  bounded sizes. Raw harness protocol (a JSON line of the agent's stream) is never
  copied: such a line is read through the harness's own parser and only allowlisted
  event fields are kept (assistant text, tool names, tool errors, the result), so
  thinking blocks, tool inputs, the prompt and environment values never enter. Plain
  output lines (a command's stdout, stderr) stay exact apart from masking.
* **Retention**: :func:`prune` removes a diagnostic once it is 90 days old (its mtime,
  set to the project clock's time at writing, so an injected clock decides ages), and
  the diagnostics of tasks that no longer exist. Evidence and resting causes stay
  until the task is deleted; a reference whose file is gone reads
  ``"Expired after 90 days"`` (:data:`EXPIRED`). Only prune removes diagnostics, so a
  missing file is taken to be an expired one.

The translator masks with the secrets of the process that writes the diagnostic (the
reconciler); the supervisor masks its own tails with its environment's secrets before
they reach the receipt, so a secret only the supervisor's environment held is masked
there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.adapters.files import write_atomic
from corral.domain.bounded_json import Decoded, decode
from corral.domain.clock import rfc3339
from corral.domain.record import asdict, replace
from corral.domain.records import FailureEvidence
from corral.domain.redact import RESULT_BYTES, bounded, masked_head, redact, secret_values
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG, ProjectPaths, plain

if TYPE_CHECKING:  # the protocol and the harnesses load only when a diagnostic is written
    from corral.adapters.harness.base import Harness
    from corral.engine.runtime import protocol as proto

RETENTION = timedelta(days=90)
EXPIRED = "Expired after 90 days"
DIAGNOSTIC_VERSION = 1

#: Size bounds (bytes of UTF-8).
TEXT_BYTES = 1000  # one reason or message
EVENT_TEXT_BYTES = 500  # one partial-output event
TAIL_BYTES = 16 * 1024  # the exact output tail
STDERR_BYTES = 8 * 1024
STACK_BYTES = 8 * 1024
LOG_WINDOW_BYTES = 64 * 1024  # how much of a log is read at all
PARTIAL_EVENTS = 30
TAIL_LINES = 200
ATTEMPTS_KEPT = 24
LIST_ITEMS = 50

#: The evidence ``details`` keys that may be stored, and the only ones.
DETAIL_KEYS = frozenset(
    {
        "reason",
        "summary",
        "error",
        "stop",
        "attempts",
        "receipt",
        "problem",
        "size",
        "executable",
        "timeout_seconds",
        "relaunches",
        "files",
        "last_phase",
        "last_heartbeat",
        "lost_command",
        "retry_class",
    }
)


# -- the safe cause translator ----------------------------------------------------------


class Translator:
    """The one safe cause translator: allowlisted fields, masked secrets, bounded sizes.

    Shared by diagnostics, evidence details, any tail corral keeps about a failure, and the
    texts a turn keeps from its harness (its result, the check's tail).
    """

    def __init__(self, secrets: Iterable[str] | None = None) -> None:
        self.secrets = list(secrets) if secrets is not None else secret_values(os.environ)

    def mask(self, text: str) -> str:
        return redact(text, self.secrets)

    def text(self, value: Any, limit: int = TEXT_BYTES) -> str:
        """A message: masked, then cut to ``limit`` bytes from its start."""
        text = value if isinstance(value, str) else str(value)
        window = text[: limit * 2 + 512]
        masked = self.mask(window)
        data = masked.encode("utf-8", "replace")
        if len(data) <= limit and len(window) == len(text):
            return masked
        return data[: max(0, limit - 3)].decode("utf-8", "ignore") + "…"

    def content(self, value: str, limit: int = RESULT_BYTES) -> str:
        """A text a turn keeps whole (its result): masked, then cut to ``limit`` bytes with a note."""
        return masked_head(value, self.secrets, limit)

    def tail(self, value: str, limit: int) -> str:
        """An output tail: masked, then its last ``limit`` bytes; exact apart from that.

        Masking runs on a window a little larger than the tail; when the window cut a
        line, that partial line is dropped, so a secret cut in half never survives.
        """
        margin = 4096
        if len(value) > limit + margin:
            window = value[-(limit + margin) :]
            newline = window.find("\n")
            window = window[newline + 1 :] if 0 <= newline < margin else window[margin:]
        else:
            window = value
        return bounded(self.mask(window), limit)

    def details(self, details: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in details.items():
            if key not in DETAIL_KEYS:
                continue
            safe = self.value(value)
            if safe is not _DROP:
                out[key] = safe
        return out

    def value(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            items = [self.value(v) for v in list(value)[:LIST_ITEMS]]
            return [v for v in items if v is not _DROP and not isinstance(v, dict | list)]
        return _DROP

    def evidence(self, evidence: FailureEvidence | None) -> FailureEvidence | None:
        if evidence is None:
            return None
        return replace(evidence, details=self.details(evidence.details))


_DROP = object()


# -- references and paths --------------------------------------------------------------


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: receipts are read defensively."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def reference(task_id: str, key: str) -> str:
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in key)[:80] or "diagnostic"
    return f"{task_id}/{safe}.json"


def path_of(paths: ProjectPaths, ref: str) -> Path:
    return paths.diagnostic(ref)


def present(diagnostics_dir: Path, task_id: str) -> set[str]:
    """The references of the task's diagnostics that still exist (one directory listing)."""
    try:
        return {f"{task_id}/{name}" for name in os.listdir(diagnostics_dir / plain(task_id, "task id"))}
    except OSError:
        return set()


# -- writing -----------------------------------------------------------------------------


def write(paths: ProjectPaths, task_id: str, key: str, content: dict[str, Any], now: datetime) -> str:
    """Write one diagnostic atomically and durably; returns its reference.

    The file's mtime is set to ``now`` (the project clock), which is what retention
    measures. Mode 0600, like the output log.
    """
    ref = reference(task_id, key)
    path = path_of(paths, ref)
    doc = {"diagnostic_version": DIAGNOSTIC_VERSION, "created_at": rfc3339(now), **content}
    payload = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")
    write_atomic(path, payload, mtime=now.timestamp())
    return ref


def try_write(paths: ProjectPaths, task_id: str, key: str, content: dict[str, Any], now: datetime) -> str | None:
    """:func:`write`, or None when the disk refuses: a diagnostic that cannot be kept must never
    keep the failure itself (its evidence, its resting cause) from being recorded."""
    try:
        return write(paths, task_id, key, content, now)
    except OSError:
        return None


def discard(paths: ProjectPaths, ref: str) -> None:
    """Remove a diagnostic no row came to reference (its write transaction found nothing to do)."""
    try:
        path_of(paths, ref).unlink()
    except OSError:
        pass


def remove_for_task(paths: ProjectPaths, task_id: str) -> None:
    import shutil  # deleting is rare; reading diagnostics is not

    shutil.rmtree(paths.diagnostics_dir(task_id), ignore_errors=True)


# -- what goes in -----------------------------------------------------------------------


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
        if stripped.startswith("{") and _is_json_object(stripped):
            out.protocol_lines += 1
            if harness is not None:
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
            "budgets": asdict(command.budgets) if command else None,
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


# -- retention ------------------------------------------------------------------------------


class PruneReport:
    def __init__(self) -> None:
        self.removed: list[str] = []  # references
        self.orphaned: list[str] = []  # task directories of deleted tasks
        self.kept = 0

    def to_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "orphaned_tasks": self.orphaned, "kept": self.kept}


def prune(paths: ProjectPaths, now: datetime, live_tasks: set[str] | None = None) -> PruneReport:
    """Remove diagnostics 90 days old or older, and those of tasks that no longer exist.

    ``live_tasks`` is every task id the store holds; None skips the orphan check.
    Half-written temp files older than a day go too.
    """
    import shutil  # pruning is rare; reading diagnostics is not

    report = PruneReport()
    root = paths.diagnostics
    try:
        task_dirs = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return report
    cutoff = (now - RETENTION).timestamp()
    stale_tmp = (now - timedelta(days=1)).timestamp()
    for entry in task_dirs:
        if not entry.is_dir(follow_symlinks=False):
            continue
        if live_tasks is not None and entry.name not in live_tasks:
            shutil.rmtree(entry.path, ignore_errors=True)
            report.orphaned.append(entry.name)
            continue
        for item in os.scandir(entry.path):
            try:
                mtime = item.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            temp = item.name.startswith(".")
            if (temp and mtime <= stale_tmp) or (not temp and mtime <= cutoff):
                try:
                    os.unlink(item.path)
                except OSError:
                    continue
                if not temp:
                    report.removed.append(f"{entry.name}/{item.name}")
            elif not temp:
                report.kept += 1
        try:
            os.rmdir(entry.path)  # only when it is empty now
        except OSError:
            pass
    return report
