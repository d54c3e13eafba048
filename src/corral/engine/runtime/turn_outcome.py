"""``response.json``: the supervisor's receipt for one turn, its outcome, attempts, evidence and git facts
(``protocol``'s face).

Version 3 nests the git facts (``git``) and each attempt's failure evidence as their records are;
an older receipt (flat git fields, ``git_error``, the evidence's ``native`` object) is read in that
shape first (:meth:`Receipt.upgraded`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

import msgspec

from corral.domain.records import FailureEvidence
from corral.engine.readonly import Kept
from corral.engine.runtime.ref_guard import RefGuard
from corral.engine.runtime.wire import JSON, RESPONSE, Wire

#: At most this many reaped processes are named in a receipt (a fork bomb's leftovers stay bounded).
REAPED_KEPT = 50


class ReceiptStatus(StrEnum):
    COMPLETED = "completed"  # an attempt succeeded
    FAILED = "failed"  # a classified failure stopped the ladder (fatal, or the budget ran out)
    STOPPED = "stopped"  # a person or a gate ended the turn
    ERROR = "error"  # a crash, a crash loop, a watchdog kill after work, merge-and-fix, a fault


class ErrorKind(StrEnum):
    CRASH = "crash"
    CRASH_LOOP = "crash_loop"
    WATCHDOG = "watchdog"
    MERGE_AND_FIX = "merge_and_fix"
    INTERNAL = "internal"
    RECEIPT = "receipt"


class TurnError(Wire, frozen=True):
    """The evidence of an error receipt: what ended the turn, in which phase, and the output's tail."""

    kind: ErrorKind
    phase: str | None
    reason: str
    exit_code: int | None = None
    signal: int | None = None
    tail: str = ""
    receipt_problem: str | None = None  # for kind "receipt": why response.json could not be used
    receipt_size: int | None = None


class AttemptRecord(Wire, frozen=True):
    """One launch of the harness inside the turn, as the supervisor saw it."""

    number: int
    started_at: str
    ended_at: str | None
    outcome: str  # succeeded | failed | indeterminate | cancelled
    failure_class: str | None = None
    failure: FailureEvidence | None = None
    log: tuple[int, int] = (0, 0)  # the attempt's byte range in output.log


class SyncReport(Wire, frozen=True):
    """How the upstream merge before the work phase went."""

    state: str  # merged | up-to-date | skipped-dirty | conflict | none
    target: str = ""
    files: tuple[str, ...] = ()


class CheckResult(Wire, frozen=True):
    """The post-turn check's outcome: its exit, whether it timed out, and its output's (masked) tail."""

    command: str
    exit_code: int | None
    timed_out: bool
    timeout: float
    tail: str = ""
    #: Where it ran: "bwrap" (the turn's sandbox), or "unconfined" (no sandbox, or the person's choice).
    confinement: str | None = None


class GitFacts(Wire, frozen=True):
    """What the turn changed in git: the head, its commits since the last checked commit, the paths.

    The lists are bounded (their first items); the ``*_count`` fields are the whole counts
    (None in a receipt from before they were written: its lists are whole).
    """

    head: str | None = None
    commits: tuple[str, ...] = ()
    check_from: str | None = None
    changed_paths: tuple[str, ...] = ()
    protected_changes: tuple[str, ...] = ()
    dirty: bool = False
    error: str | None = None  # git could not be read; the other facts are unknown
    changed_count: int | None = None
    protected_count: int | None = None
    commit_count: int | None = None

    @property
    def changed_total(self) -> int:
        return len(self.changed_paths) if self.changed_count is None else self.changed_count

    @property
    def protected_total(self) -> int:
        return len(self.protected_changes) if self.protected_count is None else self.protected_count

    @property
    def commit_total(self) -> int:
        return len(self.commits) if self.commit_count is None else self.commit_count


class Reaped(Wire, frozen=True):
    """A process the supervisor ended at an attempt's end: left behind by the agent (a background
    child, a ``setsid`` grandchild), found by its group, its session or the command's tag."""

    pid: int
    command: str = ""


#: The git facts' fields as a receipt before version 3 wrote them, at its top level.
_FLAT_GIT = (
    "head",
    "commits",
    "check_from",
    "changed_paths",
    "protected_changes",
    "dirty",
    "changed_count",
    "protected_count",
    "commit_count",
)


class Receipt(Wire, frozen=True, omit_defaults=True):
    """The supervisor's receipt for one command (``response.json``); the reconciler records it once."""

    FILE: ClassVar[str] = RESPONSE

    command_id: str | None
    task_id: str | None
    kind: str
    status: ReceiptStatus
    started_at: str | None = None
    ended_at: str | None = None
    harness_session_id: str | None = None
    delivered: tuple[str, ...] = ()
    attempts: tuple[AttemptRecord, ...] = ()
    sync: SyncReport | None = None
    result: str | None = None
    usage: JSON | None = None
    check: CheckResult | None = None
    git: GitFacts | None = None
    failure_class: str | None = None
    failure_code: str | None = None
    failure_reason: str | None = None
    failure_attempts: int | None = None
    stop_reason: str | None = None  # fatal | budget-exhausted | crash-loop
    stopped_by: str | None = None
    error: TurnError | None = None
    #: The end of the turn's output.log (its last attempt's part) and stderr.log, masked by the
    #: supervisor with its own secrets: what a failed turn's diagnostic reads instead of the logs.
    output_window: str | None = None
    stderr_window: str | None = None
    reaped: tuple[Reaped, ...] = ()  # what the agent left running, ended by the supervisor (the first REAPED_KEPT)
    #: What a read-only turn changed, kept on ``refs/corral/kept/<ref>/<turn>`` and reverted.
    kept: Kept | None = None
    #: Refs other than the task's branch the agent moved, kept and put back (``runtime/ref_guard``).
    refs: RefGuard | None = None

    def __post_init__(self) -> None:
        if len(self.reaped) > REAPED_KEPT:
            msgspec.structs.force_setattr(self, "reaped", self.reaped[:REAPED_KEPT])

    @classmethod
    def upgraded(cls, data: JSON, version: int) -> JSON:
        """A receipt before version 3: its git facts flat at the top level (``git_error`` when git
        could not be read), and each attempt's evidence with its exit, errno and signal in ``native``."""
        if version >= 3:
            return data
        out = dict(data)
        # a version-1 receipt may leave out whose it is and its kind
        out.setdefault("command_id", None)
        out.setdefault("task_id", None)
        out["kind"] = out.get("kind") or "work"
        if "git" not in out:
            if isinstance(out.get("git_error"), str):
                out["git"] = {"error": out["git_error"]}
            elif any(key in out for key in ("head", "changed_paths", "commits")):
                out["git"] = {key: out[key] for key in _FLAT_GIT if key in out and out[key] is not None}
        for key in (*_FLAT_GIT, "git_error"):
            out.pop(key, None)
        attempts = out.get("attempts")
        if isinstance(attempts, list):
            out["attempts"] = [_attempt_v2(a) for a in attempts]
        return out


def _attempt_v2(attempt: Any) -> Any:
    if not isinstance(attempt, dict) or not isinstance(attempt.get("failure"), dict):
        return attempt
    failure = dict(attempt["failure"])
    native = failure.pop("native", None)
    if isinstance(native, dict):
        failure.update({key: native[key] for key in ("exit_code", "errno", "signal") if key in native})
    return {**attempt, "failure": failure}
