"""The files that cross the process boundary between corral and a turn's supervisor, typed.

A turn's protocol directory holds ``command.json`` (:class:`Command`: what to do, with
every setting already resolved), ``status.json`` (:class:`SupervisorStatus`: pid, phase,
heartbeat, live retry state), ``progress.json`` (:class:`Progress`: an agent's ephemeral
progress line), ``stop.json`` (:class:`StopRequest`) and finally ``response.json``
(:class:`Receipt`: the turn's outcome, attempts, evidence and git facts). Each is a frozen
record with ``to_json`` / ``from_json`` and a ``protocol_version``.

One writer, :func:`write` (temp file, fsync, rename, fsync of the directory: a crash leaves
the old file or the new one; a command goes through :func:`write_command`), and one reader,
:func:`read`: it never follows a symlink, never blocks on a FIFO, never loads more than
:data:`MAX_BYTES` (the writer refuses to write more, so a file corral wrote is always one
corral can read), and says why a file could not be used as an :class:`Unreadable` value
(missing, not a regular file, a symlink, too large, invalid UTF-8, blank, not a JSON object,
the wrong shape, or a newer protocol version). A file from an older ``protocol_version`` is
still read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from corral.adapters.files import read_bounded, write_atomic
from corral.domain.failures import Budgets
from corral.domain.posture import Posture
from corral.domain.record import asdict, field, record
from corral.domain.records import FailureEvidence
from corral.engine.paths import make_private_dir

if TYPE_CHECKING:
    # The sandbox adapter (and shutil) load only where a command is read whole; a read-only turn's
    # records and the ref guard's only where a command or a receipt is (the sweep and ``list`` read
    # the supervisors' status files alone).
    from corral.adapters.sandbox import SandboxSpec
    from corral.engine.readonly import Before, Kept
    from corral.engine.runtime.ref_guard import RefGuard

PROTOCOL_VERSION = 2
#: The one bound on a protocol file: the writer never writes more and the reader never reads more.
MAX_BYTES = 8 * 1024 * 1024

COMMAND = "command.json"
STATUS = "status.json"
PROGRESS = "progress.json"
RESPONSE = "response.json"
STOP = "stop.json"

JSON = dict[str, Any]


class Problem(StrEnum):
    """Why a protocol file could not be used (each has its wording in ``domain.explain.RECEIPT_PROBLEMS``)."""

    MISSING = "missing"
    NOT_REGULAR = "not-regular"
    SYMLINK = "symlink"
    TOO_LARGE = "too-large"
    INVALID_UTF8 = "invalid-utf8"
    BLANK = "blank"
    INVALID_JSON = "invalid-json"
    WRONG_SHAPE = "wrong-shape"
    TOO_NEW = "too-new"


@record
class Unreadable:
    """A protocol file that could not be used, and why."""

    problem: Problem
    size: int | None = None
    detail: str = ""


class ShapeError(ValueError):
    """A document that is JSON but not the record it should be (a field missing or of the wrong type)."""


# -- field readers: every value is untrusted until it has its type ---------------------------


def _req(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if type(value) is kind:  # the common case, first: a reader of every running turn asks this of each field
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise ShapeError(f"{key}: expected {_kind_names(kind)}, found {type(value).__name__}")
    return value


def _opt(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if value is None or type(value) is kind:
        return value
    return _req(data, key, kind)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _kinds(kind))


def _num(data: Mapping[str, Any], key: str) -> float:
    return float(_req(data, key, (int, float)))


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None or type(value) is int:
        return value
    return int(_req(data, key, int))


def _strs(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ShapeError(f"{key}: expected a list of strings")
    return tuple(value)


def _obj(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ShapeError(f"{key}: expected an object, found {type(value).__name__}")
    return value


# -- command.json --------------------------------------------------------------------------


@record
class HarnessSettings:
    """The trusted settings a harness adapter is made from: its executables and provider."""

    claude_bin: str
    pi_bin: str
    codex_bin: str
    pi_provider: str | None = None
    command: str | None = None

    def as_mapping(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HarnessSettings:
        return cls(
            claude_bin=_req(data, "claude_bin", str),
            pi_bin=_req(data, "pi_bin", str),
            codex_bin=_req(data, "codex_bin", str),
            pi_provider=_opt(data, "pi_provider", str),
            command=_opt(data, "command", str),
        )


@record
class Watchdog:
    """The no-progress watchdog's limits for one turn."""

    timeout_seconds: float
    relaunches: int
    term_grace_seconds: float


@record
class CheckSpec:
    """The post-turn check: a command run in the worktree after the work phase, and its bound."""

    command: str | None
    timeout_seconds: float
    #: Run outside the sandbox (the person's user-only ``post_turn_check_unconfined``); by default
    #: the check runs in the turn's own sandbox, since it runs the agent's code (a Makefile, conftest.py).
    unconfined: bool = False


def _posture_json(p: Posture) -> JSON:
    return {
        "permission_mode": p.permission_mode,
        "allowed_tools": list(p.allowed_tools),
        "read_only": p.read_only,
        "is_sandbox": p.is_sandbox,
    }


def _posture(data: Mapping[str, Any]) -> Posture:
    return Posture(
        permission_mode=_req(data, "permission_mode", str),
        allowed_tools=_strs(data, "allowed_tools"),
        read_only=bool(_req(data, "read_only", bool)),
        is_sandbox=bool(_req(data, "is_sandbox", bool)),
    )


def _budgets_json(b: Budgets) -> JSON:
    return {
        "overload_seconds": b.overload_seconds,
        "network_seconds": b.network_seconds,
        "unreachable_attempts": b.unreachable_attempts,
        "unknown_attempts": b.unknown_attempts,
    }


def _budgets(data: Mapping[str, Any]) -> Budgets:
    return Budgets(
        overload_seconds=_num(data, "overload_seconds"),
        network_seconds=_num(data, "network_seconds"),
        unreachable_attempts=int(_req(data, "unreachable_attempts", int)),
        unknown_attempts=int(_req(data, "unknown_attempts", int)),
    )


@record
class AgentToolsSpec:
    """How a turn's agent reaches corral's tools: its token's hash and file, the daemon's MCP endpoint.

    The token itself is never written here: the launch hands it to the supervisor in its
    environment, and the supervisor to the agent (docs/mcp.md#tokens). ``url`` is None when the
    agent has no MCP endpoint (its harness takes none, or no daemon serves one): the token then
    still names it to a corral CLI it runs.
    """

    url: str | None
    token_hash: str
    token_file: str  # the grant's file, which the supervisor removes when the turn ends
    timeout_seconds: float

    def to_json(self) -> JSON:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentToolsSpec:
        return cls(
            url=_opt(data, "url", str),
            token_hash=_req(data, "token_hash", str),
            token_file=_req(data, "token_file", str),
            timeout_seconds=_num(data, "timeout_seconds"),
        )


@record
class Fence:
    """The lease a worker claimed the turn under (docs/workers.md): every write of the turn's
    results checks ``epoch`` in its own transaction, so a worker that lost the lease writes nothing."""

    epoch: int
    worker_id: str
    host: str

    def to_json(self) -> JSON:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fence:
        return cls(
            epoch=int(_req(data, "epoch", int)),
            worker_id=_req(data, "worker_id", str),
            host=_req(data, "host", str),
        )


@record
class Command:
    """What a supervisor is to do: one turn, with every setting resolved by the launching operation."""

    FILE: ClassVar[str] = COMMAND

    command_id: str
    task_id: str
    task_ref: str
    kind: str  # start | unblock | resume | auto-resume | ask | pre-accept
    turn_id: str
    sequence: int
    log_dir: str
    harness: str
    harness_settings: HarnessSettings
    model: str | None
    posture: Posture
    prompt_body: str
    system: str | None
    resume_id: str | None
    worktree: str
    branch: str
    target: str
    sync_before_work: bool
    announce_merge: bool
    git_start_sha: str | None
    delivered: tuple[str, ...]
    watchdog: Watchdog
    budgets: Budgets
    check: CheckSpec
    protected: tuple[str, ...]
    created_at: str
    #: A read-only turn's branch and worktree before it ran (``corral.engine.readonly``), taken at launch.
    read_only_before: Before | None = None
    #: The shared usage-limit pause file of the launching ``CORRAL_HOME`` (None: the supervisor's own).
    usage_limits: str | None = None
    #: The directory of the session's failure journal (None: an older launcher's command, no journal).
    journal_dir: str | None = None
    #: The agent's door to corral's tools; None, or no url in it: ``agent_tools_absent`` says why.
    agent_tools: AgentToolsSpec | None = None
    agent_tools_absent: str | None = None
    #: The sandbox the agent runs in, resolved at launch (None: an older launcher's command, unconfined).
    sandbox: SandboxSpec | None = None
    #: The worker's lease on the turn (None: a turn launched on this host, outside any worker).
    fence: Fence | None = None

    def to_json(self) -> JSON:
        doc = self._to_json()
        if self.fence is not None:
            doc["fence"] = self.fence.to_json()
        if self.sandbox is not None:
            doc["sandbox"] = self.sandbox.to_json()
        if self.agent_tools is not None:
            doc["agent_tools"] = self.agent_tools.to_json()
        if self.agent_tools_absent is not None:
            doc["agent_tools_absent"] = self.agent_tools_absent
        if self.read_only_before is not None:
            doc["read_only_before"] = self.read_only_before.to_json()
        if self.usage_limits is not None:
            doc["usage_limits"] = self.usage_limits
        if self.journal_dir is not None:
            doc["journal_dir"] = self.journal_dir
        return doc

    def _to_json(self) -> JSON:
        return {
            "command_id": self.command_id,
            "task_id": self.task_id,
            "task_ref": self.task_ref,
            "kind": self.kind,
            "turn_id": self.turn_id,
            "sequence": self.sequence,
            "log_dir": self.log_dir,
            "harness": self.harness,
            "harness_settings": self.harness_settings.as_mapping(),
            "model": self.model,
            "posture": _posture_json(self.posture),
            "prompt_body": self.prompt_body,
            "system": self.system,
            "resume_id": self.resume_id,
            "worktree": self.worktree,
            "branch": self.branch,
            "target": self.target,
            "sync_before_work": self.sync_before_work,
            "announce_merge": self.announce_merge,
            "git_start_sha": self.git_start_sha,
            "delivered": list(self.delivered),
            "watchdog": asdict(self.watchdog),
            "budgets": _budgets_json(self.budgets),
            "check": asdict(self.check),
            "protected": list(self.protected),
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> Command:
        if version < 2:
            data = _command_v1(data)
        watchdog = _obj(data, "watchdog") or {}
        check = _obj(data, "check") or {}
        before = _obj(data, "read_only_before")
        return cls(
            command_id=_req(data, "command_id", str),
            task_id=_req(data, "task_id", str),
            task_ref=_req(data, "task_ref", str),
            kind=_req(data, "kind", str),
            turn_id=_req(data, "turn_id", str),
            sequence=int(_req(data, "sequence", int)),
            log_dir=_req(data, "log_dir", str),
            harness=_req(data, "harness", str),
            harness_settings=HarnessSettings.from_json(_obj(data, "harness_settings") or {}),
            model=_opt(data, "model", str),
            posture=_posture(_obj(data, "posture") or {}),
            prompt_body=_req(data, "prompt_body", str),
            system=_opt(data, "system", str),
            resume_id=_opt(data, "resume_id", str),
            worktree=_req(data, "worktree", str),
            branch=_req(data, "branch", str),
            target=_req(data, "target", str),
            sync_before_work=bool(_req(data, "sync_before_work", bool)),
            announce_merge=bool(_req(data, "announce_merge", bool)),
            git_start_sha=_opt(data, "git_start_sha", str),
            delivered=_strs(data, "delivered"),
            watchdog=Watchdog(
                timeout_seconds=_num(watchdog, "timeout_seconds"),
                relaunches=int(_req(watchdog, "relaunches", int)),
                term_grace_seconds=_num(watchdog, "term_grace_seconds"),
            ),
            budgets=_budgets(_obj(data, "budgets") or {}),
            check=CheckSpec(
                command=_opt(check, "command", str),
                timeout_seconds=_num(check, "timeout_seconds"),
                unconfined=check.get("unconfined") is True,
            ),
            protected=_strs(data, "protected"),
            created_at=_req(data, "created_at", str),
            read_only_before=_before(before) if before is not None else None,
            usage_limits=_opt(data, "usage_limits", str),
            journal_dir=_opt(data, "journal_dir", str),
            agent_tools=AgentToolsSpec.from_json(tools) if (tools := _obj(data, "agent_tools")) is not None else None,
            agent_tools_absent=_opt(data, "agent_tools_absent", str),
            sandbox=_sandbox(_obj(data, "sandbox")),
            fence=Fence.from_json(fence) if (fence := _obj(data, "fence")) is not None else None,
        )


def _before(data: Mapping[str, Any]) -> Before:
    from corral.engine.readonly import Before

    return Before.from_json(data)


def _sandbox(data: Mapping[str, Any] | None) -> SandboxSpec | None:
    if data is None:
        return None
    try:
        from corral.adapters.sandbox import SandboxSpec

        return SandboxSpec.from_json(data)
    except ValueError as exc:
        raise ShapeError(str(exc)) from None


def _command_v1(data: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 command (flat watchdog and check fields) in version 2's shape.

    Version 1 carried no relaunch count or grace: those were the domain's fixed rules then.
    """
    from corral.domain.failures import TERM_GRACE_SECONDS, WATCHDOG_RELAUNCHES

    out = dict(data)
    out["watchdog"] = {
        "timeout_seconds": data.get("watchdog_timeout"),
        "relaunches": WATCHDOG_RELAUNCHES,
        "term_grace_seconds": TERM_GRACE_SECONDS,
    }
    out["check"] = {"command": data.get("post_turn_check"), "timeout_seconds": data.get("post_turn_check_timeout")}
    return out


# -- status.json, progress.json, stop.json ---------------------------------------------------


@record
class RetryState:
    """What is being retried right now and when the next attempt starts (rendered by ``domain.substate``).

    ``by`` says whose retry it is: ``corral`` (its ladder waits between attempts) or ``harness``
    (a harness that keeps its own retries announced one; ``next_delay_ms`` is 0 when it gave none).
    """

    attempt: int
    failure_class: str
    reason: str
    next_delay_ms: int
    by: str = "corral"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RetryState:
        return cls(
            attempt=int(_req(data, "attempt", int)),
            failure_class=_req(data, "failure_class", str),
            reason=_req(data, "reason", str),
            next_delay_ms=int(_req(data, "next_delay_ms", int)),
            by=_opt(data, "by", str) or "corral",
        )


@record
class AccountWait:
    """A turn waiting with its harness account for a usage limit's reset (``corral.engine.runtime.usage_pause``).

    ``resets_at`` is when the limit clears (RFC 3339); ``behind_first`` says the reset has passed
    and the turn waits for the first task after it to get through.
    """

    resets_at: str | None
    harness: str
    behind_first: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AccountWait:
        return cls(
            resets_at=_opt(data, "resets_at", str),
            harness=_req(data, "harness", str),
            behind_first=bool(_opt(data, "behind_first", bool)),
        )


@record
class SupervisorStatus:
    """The supervisor's live report: who it is, where the turn is, and its heartbeat.

    ``pid_start`` and ``agent_start`` are the start times (``/proc/<pid>/stat`` field 22) of
    the supervisor and its agent, so a reader never takes another process that holds the pid
    since for them; ``heartbeat_mono`` is the beat on the system's monotonic clock (no wall
    clock step, no suspend, counts as staleness). Files without them are still read.
    """

    FILE: ClassVar[str] = STATUS

    command_id: str
    pid: int
    phase: str  # command | sync | work | retrying | check | response | done
    kind: str | None = None
    agent_pid: int | None = None
    attempt: int = 0
    retry: RetryState | None = None
    started_at: str | None = None
    heartbeat_at: str | None = None
    pid_start: int | None = None
    agent_start: int | None = None
    heartbeat_mono: float | None = None
    waiting: AccountWait | None = None

    def to_json(self) -> JSON:
        return {
            "waiting": asdict(self.waiting) if self.waiting else None,
            "command_id": self.command_id,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "agent_pid": self.agent_pid,
            "agent_start": self.agent_start,
            "phase": self.phase,
            "kind": self.kind,
            "attempt": self.attempt,
            "retry": asdict(self.retry) if self.retry else None,
            "started_at": self.started_at,
            "heartbeat_at": self.heartbeat_at,
            "heartbeat_mono": self.heartbeat_mono,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> SupervisorStatus:
        retry = _obj(data, "retry")
        mono = _opt(data, "heartbeat_mono", (int, float))
        waiting = _obj(data, "waiting")
        return cls(
            waiting=AccountWait.from_json(waiting) if waiting else None,
            command_id=_req(data, "command_id", str),
            pid=int(_req(data, "pid", int)),
            phase=_req(data, "phase", str),
            kind=_opt(data, "kind", str),
            agent_pid=_opt_int(data, "agent_pid"),
            attempt=_opt_int(data, "attempt") or 0,
            retry=RetryState.from_json(retry) if retry else None,
            started_at=_opt(data, "started_at", str),
            heartbeat_at=_opt(data, "heartbeat_at", str),
            pid_start=_opt_int(data, "pid_start"),
            agent_start=_opt_int(data, "agent_start"),
            heartbeat_mono=float(mono) if mono is not None else None,
        )


@record
class Progress:
    """An agent's latest progress line: ephemeral, latest wins, never kept in the task's history (a
    worker ships the latest to the store's live row, for reviewers on other hosts: docs/workers.md)."""

    FILE: ClassVar[str] = PROGRESS

    message: str
    pid: int
    at: str

    def to_json(self) -> JSON:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> Progress:
        return cls(message=_req(data, "message", str), pid=int(_req(data, "pid", int)), at=_req(data, "at", str))


@record
class StopRequest:
    """Who asked for the running turn to end (read by the supervisor when SIGTERM arrives)."""

    FILE: ClassVar[str] = STOP

    actor: str

    def to_json(self) -> JSON:
        return {"actor": self.actor}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> StopRequest:
        return cls(actor=_req(data, "actor", str))


# -- response.json ---------------------------------------------------------------------------


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


@record
class TurnError:
    """The evidence of an error receipt: what ended the turn, in which phase, and the output's tail."""

    kind: ErrorKind
    phase: str | None
    reason: str
    exit_code: int | None = None
    signal: int | None = None
    tail: str = ""
    receipt_problem: str | None = None  # for kind "receipt": why response.json could not be used
    receipt_size: int | None = None

    def to_json(self) -> JSON:
        doc: JSON = {
            "kind": self.kind.value,
            "phase": self.phase,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "tail": self.tail,
        }
        if self.receipt_problem is not None:
            doc["receipt_problem"] = self.receipt_problem
            doc["receipt_size"] = self.receipt_size
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnError:
        kind = _req(data, "kind", str)
        if kind not in ErrorKind._value2member_map_:
            raise ShapeError(f"error.kind: unknown kind {kind!r}")
        return cls(
            kind=ErrorKind(kind),
            phase=_opt(data, "phase", str),
            reason=_req(data, "reason", str),
            exit_code=_opt_int(data, "exit_code"),
            signal=_opt_int(data, "signal"),
            tail=_opt(data, "tail", str) or "",
            receipt_problem=_opt(data, "receipt_problem", str),
            receipt_size=_opt_int(data, "receipt_size"),
        )


@record
class AttemptRecord:
    """One launch of the harness inside the turn, as the supervisor saw it."""

    number: int
    started_at: str
    ended_at: str | None
    outcome: str  # succeeded | failed | indeterminate | cancelled
    failure_class: str | None = None
    failure: FailureEvidence | None = None
    log: tuple[int, int] = (0, 0)  # the attempt's byte range in output.log

    def to_json(self) -> JSON:
        return {
            "number": self.number,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outcome": self.outcome,
            "failure_class": self.failure_class,
            "failure": self.failure.to_json() if self.failure else None,
            "log": list(self.log),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptRecord:
        failure = _obj(data, "failure")
        log = data.get("log")
        span = (0, 0)
        if isinstance(log, list) and len(log) == 2 and all(isinstance(x, int) for x in log):
            span = (int(log[0]), int(log[1]))
        return cls(
            number=int(_req(data, "number", int)),
            started_at=_req(data, "started_at", str),
            ended_at=_opt(data, "ended_at", str),
            outcome=_req(data, "outcome", str),
            failure_class=_opt(data, "failure_class", str),
            failure=FailureEvidence.from_json(dict(failure)) if failure else None,
            log=span,
        )


@record
class SyncReport:
    """How the upstream merge before the work phase went."""

    state: str  # merged | up-to-date | skipped-dirty | conflict | none
    target: str = ""
    files: tuple[str, ...] = ()

    def to_json(self) -> JSON:
        return {"state": self.state, "target": self.target, "files": list(self.files)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SyncReport:
        return cls(state=_req(data, "state", str), target=_opt(data, "target", str) or "", files=_strs(data, "files"))


@record
class CheckResult:
    """The post-turn check's outcome: its exit, whether it timed out, and its output's (masked) tail."""

    command: str
    exit_code: int | None
    timed_out: bool
    timeout: float
    tail: str
    #: Where it ran: "bwrap" (the turn's sandbox), or "unconfined" (no sandbox, or the person's choice).
    confinement: str | None = None

    def to_json(self) -> JSON:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            command=_req(data, "command", str),
            exit_code=_opt_int(data, "exit_code"),
            timed_out=bool(_req(data, "timed_out", bool)),
            timeout=_num(data, "timeout"),
            tail=_opt(data, "tail", str) or "",
            confinement=_opt(data, "confinement", str),
        )


@record
class GitFacts:
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


@record
class Reaped:
    """A process the supervisor ended at an attempt's end: left behind by the agent (a background
    child, a ``setsid`` grandchild), found by its group, its session or the command's tag."""

    pid: int
    command: str

    def to_json(self) -> JSON:
        return {"pid": self.pid, "command": self.command}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reaped:
        return cls(pid=int(_req(data, "pid", int)), command=_opt(data, "command", str) or "")


#: At most this many reaped processes are named in a receipt (a fork bomb's leftovers stay bounded).
REAPED_KEPT = 50


@record
class Receipt:
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
    reaped: tuple[Reaped, ...] = ()  # what the agent left running, ended by the supervisor
    #: What a read-only turn changed, kept on ``refs/corral/kept/<ref>/<turn>`` and reverted.
    kept: Kept | None = None
    #: Refs other than the task's branch the agent moved, kept and put back (``runtime/ref_guard``).
    refs: RefGuard | None = None
    extra: JSON = field(default_factory=dict)  # fields of a newer minor shape, kept as they came

    def to_json(self) -> JSON:
        doc: JSON = {
            "command_id": self.command_id,
            "task_id": self.task_id,
            "kind": self.kind,
            "status": self.status.value,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "harness_session_id": self.harness_session_id,
            "delivered": list(self.delivered),
            "attempts": [a.to_json() for a in self.attempts],
            "sync": self.sync.to_json() if self.sync else None,
        }
        optional: JSON = {
            "result": self.result,
            "usage": self.usage,
            "check": self.check.to_json() if self.check else None,
            "failure_class": self.failure_class,
            "failure_code": self.failure_code,
            "failure_reason": self.failure_reason,
            "failure_attempts": self.failure_attempts,
            "stop_reason": self.stop_reason,
            "stopped_by": self.stopped_by,
            "error": self.error.to_json() if self.error else None,
            "output_window": self.output_window,
            "stderr_window": self.stderr_window,
        }
        doc.update({k: v for k, v in optional.items() if v is not None})
        if self.reaped:
            doc["reaped"] = [r.to_json() for r in self.reaped[:REAPED_KEPT]]
        if self.kept is not None:
            doc["kept"] = self.kept.to_json()
        if self.refs is not None:
            doc["refs"] = self.refs.to_json()
        if self.git is not None:
            g = self.git
            if g.error is not None:
                doc["git_error"] = g.error
            else:
                doc.update(
                    {
                        "head": g.head,
                        "commits": list(g.commits),
                        "check_from": g.check_from,
                        "changed_paths": list(g.changed_paths),
                        "protected_changes": list(g.protected_changes),
                        "dirty": g.dirty,
                    }
                )
                counts = {"changed_count": g.changed_count, "protected_count": g.protected_count}
                counts["commit_count"] = g.commit_count
                doc.update({k: v for k, v in counts.items() if v is not None})
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> Receipt:
        status = _req(data, "status", str)
        if status not in ReceiptStatus._value2member_map_:
            raise ShapeError(f"status: unknown status {status!r}")
        attempts = data.get("attempts") or []
        if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
            raise ShapeError("attempts: expected a list of objects")
        sync, check, error, usage = _obj(data, "sync"), _obj(data, "check"), _obj(data, "error"), _obj(data, "usage")
        reaped = data.get("reaped") or []
        if not isinstance(reaped, list) or not all(isinstance(r, dict) for r in reaped):
            raise ShapeError("reaped: expected a list of objects")
        kept, refs = _obj(data, "kept"), _obj(data, "refs")
        git: GitFacts | None = None
        if isinstance(data.get("git_error"), str):
            git = GitFacts(error=data["git_error"])
        elif "head" in data or "changed_paths" in data or "commits" in data:
            git = GitFacts(
                head=_opt(data, "head", str),
                commits=_strs(data, "commits"),
                check_from=_opt(data, "check_from", str),
                changed_paths=_strs(data, "changed_paths"),
                protected_changes=_strs(data, "protected_changes"),
                dirty=bool(_opt(data, "dirty", bool)),
                changed_count=_opt_int(data, "changed_count"),
                protected_count=_opt_int(data, "protected_count"),
                commit_count=_opt_int(data, "commit_count"),
            )
        return cls(
            command_id=_opt(data, "command_id", str),
            task_id=_opt(data, "task_id", str),
            kind=_opt(data, "kind", str) or "work",
            status=ReceiptStatus(status),
            started_at=_opt(data, "started_at", str),
            ended_at=_opt(data, "ended_at", str),
            harness_session_id=_opt(data, "harness_session_id", str),
            delivered=_strs(data, "delivered"),
            attempts=tuple(AttemptRecord.from_json(a) for a in attempts),
            sync=SyncReport.from_json(sync) if sync else None,
            result=_opt(data, "result", str),
            usage=dict(usage) if usage else None,
            check=CheckResult.from_json(check) if check else None,
            git=git,
            failure_class=_opt(data, "failure_class", str),
            failure_code=_opt(data, "failure_code", str),
            failure_reason=_opt(data, "failure_reason", str),
            failure_attempts=_opt_int(data, "failure_attempts"),
            stop_reason=_opt(data, "stop_reason", str),
            stopped_by=_opt(data, "stopped_by", str),
            error=TurnError.from_json(error) if error else None,
            output_window=_opt(data, "output_window", str),
            stderr_window=_opt(data, "stderr_window", str),
            reaped=tuple(Reaped.from_json(r) for r in reaped),
            kept=_kept(kept) if kept is not None else None,
            refs=_refs(refs) if refs is not None else None,
        )


def _kept(data: Mapping[str, Any]) -> Kept:
    from corral.engine.readonly import Kept

    return Kept.from_json(data)


def _refs(data: Mapping[str, Any]) -> RefGuard:
    from corral.engine.runtime.ref_guard import RefGuard

    return RefGuard.from_json(data)


# -- the one writer and the one reader --------------------------------------------------------


R = TypeVar("R", Command, SupervisorStatus, Progress, StopRequest, Receipt)


_SURROGATES = re.compile("[\ud800-\udfff]")


class TooLarge(ValueError):
    """A protocol document over :data:`MAX_BYTES`: the writer refuses it rather than write what no reader takes."""


def write_json(path: Path, data: Mapping[str, Any], *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` plus ``protocol_version`` (0600)."""
    doc = {"protocol_version": PROTOCOL_VERSION, **data}
    text = json.dumps(doc, ensure_ascii=False, indent=1)
    # A lone surrogate (a harness that cut its output inside a character) is written as its JSON
    # escape: the file stays valid UTF-8, and the reader gets the very same text back.
    payload = _SURROGATES.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")
    if len(payload) > MAX_BYTES:
        raise TooLarge(f"{path.name} would be {len(payload):,} bytes; the protocol's bound is {MAX_BYTES:,}")
    write_atomic(path, payload, durable=durable)


def write(
    directory: Path, record: Command | SupervisorStatus | Progress | StopRequest | Receipt, *, durable: bool = True
) -> None:
    """Write one protocol record to its file in ``directory``."""
    write_json(directory / record.FILE, record.to_json(), durable=durable)


def write_command(directory: Path, command: Command) -> None:
    """Write a turn's ``command.json`` into ``directory``, made private (0700) first if missing.

    The one writer of a command, so its file is made one way wherever it lands: the protocol
    directory, where the supervisor reads it (``launch.launch``, once, before the supervisor
    starts), and the turn's log directory, where the settings it was launched with stay on record
    beside its logs once the next turn has replaced the protocol's copy (the launch skeleton
    ``turns._launch``, and a worker's ``claimed`` launch, before ``launch.launch``).
    """
    make_private_dir(directory)
    write(directory, command)


@record
class Document:
    """A protocol file as read: its object and version, or why it could not be used."""

    data: JSON | None
    problem: Problem | None = None
    size: int | None = None
    version: int = PROTOCOL_VERSION


def read_document(path: str | Path, max_bytes: int = MAX_BYTES) -> Document:
    """Read a protocol file defensively: no symlink followed, no FIFO waited on, no unbounded read."""
    raw, problem, size = read_bounded(path, max_bytes)
    if raw is None:
        return Document(None, Problem(problem or "missing"), size)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Document(None, Problem.INVALID_UTF8, len(raw))
    if not text.strip():
        return Document(None, Problem.BLANK, len(raw))
    try:
        data = json.loads(text)
    except ValueError:
        return Document(None, Problem.INVALID_JSON, len(raw))
    if not isinstance(data, dict):
        return Document(None, Problem.INVALID_JSON, len(raw))
    version = data.get("protocol_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        return Document(None, Problem.WRONG_SHAPE, len(raw))
    if version > PROTOCOL_VERSION:
        return Document(None, Problem.TOO_NEW, len(raw), version)
    return Document(data, None, len(raw), version)


def read(path: str | Path, kind: type[R]) -> R | Unreadable:
    """The typed record in ``path``, or why it could not be used."""
    doc = read_document(path)
    if doc.data is None:
        assert doc.problem is not None
        newer = doc.problem is Problem.TOO_NEW
        detail = f"protocol version {doc.version}, newer than {PROTOCOL_VERSION}" if newer else ""
        return Unreadable(doc.problem, doc.size, detail)
    try:
        return kind.from_json(doc.data, doc.version)
    except (ShapeError, ValueError, TypeError) as exc:
        return Unreadable(Problem.WRONG_SHAPE, doc.size, str(exc)[:300])


def read_record(path: str | Path, kind: type[R]) -> R | None:
    """The typed record in ``path``, or None when there is none that can be used."""
    found = read(path, kind)
    return None if isinstance(found, Unreadable) else found


def read_raw(path: str | Path) -> JSON | None:
    """A protocol file's object as it is on disk (for diagnostics and tests), or None."""
    return read_document(path).data


def remove(directory: Path, *names: str) -> None:
    for name in names:
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass
