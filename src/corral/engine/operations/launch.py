"""Launching a turn: write ``command.json``, start the detached supervisor, see it alive.

Called only after the human turn and the move to ``working`` are committed (save
first, act second). An exception here, after the task went working, rests the task
interrupted with the cause "internal fault" instead of leaving it with no owner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from corral import crashpoints
from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id, rfc3339
from corral.domain.prompts import system_text
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause, Session, Task, Turn
from corral.domain.status import Status
from corral.engine.config import harness_settings
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import pid_alive
from corral.engine.runtime.processes import reap_turn
from corral.errors import CorralError, LaunchFailed

SUPERVISOR_START_TIMEOUT = 15.0


@dataclass(frozen=True)
class Launched:
    command_id: str
    supervisor_pid: int
    protocol_dir: Path
    log_dir: Path


def budgets(project: Project) -> dict[str, Any]:
    cfg = project.config
    return {
        "overload_seconds": cfg["budget_overload"],
        "network_seconds": cfg["budget_network"],
        "unreachable_attempts": cfg["budget_unreachable"],
        "unknown_attempts": cfg["budget_unknown"],
    }


def build_command(
    project: Project,
    task: Task,
    session: Session,
    human_turn: Turn,
    *,
    kind: str,
    body: str,
    delivered: list[str],
    target: str,
    sync_before_work: bool,
    announce_merge: bool = True,
    read_only: bool = False,
) -> dict[str, Any]:
    cfg = project.config
    assert session.worktree is not None
    protected = sorted({*cfg["protected"], *task.protected})
    return {
        "command_id": human_turn.command_id,
        "task_id": task.id,
        "task_ref": task.ref,
        "kind": kind,
        "turn_id": human_turn.id,
        "sequence": human_turn.sequence,
        "log_dir": str(project.paths.turn_dir(task.id, human_turn.sequence)),
        "harness": task.harness or cfg["harness"],
        "harness_settings": harness_settings(project.config),
        "model": task.model or cfg["model"],
        "posture": {
            "permission_mode": cfg["permission_mode"],
            "allowed_tools": list(cfg["allowed_tools"]),
            "read_only": read_only,
            "is_sandbox": cfg["is_sandbox"],
        },
        "prompt_body": body,
        "system": system_text(session.worktree, session.branch or task.branch),
        "resume_id": session.harness_session_id,
        "worktree": session.worktree,
        "branch": session.branch or task.branch,
        "target": target,
        "sync_before_work": sync_before_work,
        "announce_merge": announce_merge,
        "git_start_sha": session.git_start_sha or session.base_commit,
        "delivered": delivered,
        "watchdog_timeout": cfg["watchdog_timeout"],
        "budgets": budgets(project),
        "post_turn_check": cfg["post_turn_check"],
        "post_turn_check_timeout": cfg["post_turn_check_timeout"],
        "protected": protected,
        "created_at": rfc3339(project.clock()),
    }


def clear_protocol(protocol_dir: Path, keep_into: Path | None = None) -> None:
    """Remove the previous turn's files; a receipt never processed is kept aside, not deleted."""
    protocol_dir.mkdir(parents=True, exist_ok=True)
    stale = protocol_dir / proto.RESPONSE
    if stale.exists() or stale.is_symlink():
        dest = (keep_into or protocol_dir) / f"stale-response-{new_id()}.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stale, dest)
    for name in (proto.STATUS, proto.PROGRESS, proto.STOP, proto.COMMAND):
        try:
            (protocol_dir / name).unlink()
        except FileNotFoundError:
            pass


def file_claimed_receipt(project: Project, task: Task) -> None:
    """A receipt already recorded (a reconciler died before filing it) goes to its own turn."""
    from corral.engine.recovery import receipts

    path = project.paths.protocol_dir(task.id) / proto.RESPONSE
    data = proto.read(path)
    if data is None or not isinstance(data.get("command_id"), str):
        return
    with project.store.read() as tx:
        claimed = tx.turn_by_command(data["command_id"], Role.AGENT) is not None
    if claimed:
        receipts.file_away(project, task, path, data)


def spawn_supervisor(protocol_dir: Path, log_path: Path) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral.engine.runtime.supervisor", str(protocol_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def wait_alive(protocol_dir: Path, pid: int, timeout: float = SUPERVISOR_START_TIMEOUT) -> bool:
    """Until the supervisor's ``status.json`` names it (or its receipt is already there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = proto.read(protocol_dir / proto.STATUS)
        if status and status.get("pid") == pid:
            return True
        if (protocol_dir / proto.RESPONSE).exists():
            return True
        if not pid_alive(pid):
            return (protocol_dir / proto.RESPONSE).exists()
        time.sleep(0.01)
    return False


def launch(project: Project, task: Task, command: dict[str, Any]) -> Launched:
    protocol_dir = project.paths.protocol_dir(task.id)
    log_dir = Path(command["log_dir"])
    try:
        # Never two live agents for one task: whatever the previous command left alive goes first.
        reap_turn(project, task.id)
        file_claimed_receipt(project, task)
        clear_protocol(protocol_dir, keep_into=log_dir)
        proto.write_json(protocol_dir / proto.COMMAND, command)
        crashpoints.hit("launch.command-written")
        pid = spawn_supervisor(protocol_dir, project.paths.logs / "supervisor.log")
        crashpoints.hit("launch.supervisor-spawned")
        with project.store.write() as tx:
            tx.register_process(task.id, "supervisor", pid, command["command_id"])
        crashpoints.hit("launch.supervisor-registered")
        if not wait_alive(protocol_dir, pid):
            raise LaunchFailed(
                f"The supervisor of {task.ref} did not start within {int(SUPERVISOR_START_TIMEOUT)} s.",
                hint=f"See {project.paths.logs / 'supervisor.log'}.",
            )
    except Exception as exc:
        internal_fault(project, task, exc)
        if isinstance(exc, CorralError):
            raise
        raise LaunchFailed(f"corral could not launch the turn of {task.ref}: {exc}") from exc
    return Launched(command["command_id"], pid, protocol_dir, log_dir)


def internal_fault(project: Project, task: Task, exc: BaseException, *, phase: str = "launch") -> None:
    """Rest a task that went working but whose turn could not run: interrupted, never auto-resumed.

    The fault is recorded as the turn's failure (an agent turn of kind ``error`` that does
    not claim the command, so a receipt that still arrives is recorded too), with its
    detailed diagnostic — the translated cause and stack — written first.
    """
    import traceback

    from corral.engine.read import diagnostics

    t = diagnostics.Translator()
    error = t.text(f"{type(exc).__name__}: {exc}", 500)
    evidence = FailureEvidence(
        source="corral",
        code="internal-fault",
        phase=phase,
        category="internal",
        possible_effects=PossibleEffects.NONE,
        details={"error": error},
    )
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    ref = diagnostics.try_write(
        project.paths,
        task.id,
        f"{new_id()}-fault",
        {
            "kind": "internal-fault",
            "task_id": task.id,
            "cause": diagnostics.cause_json(evidence, t),
            "stack": t.tail(stack, diagnostics.STACK_BYTES),
        },
        project.clock(),
    )
    evidence = replace(evidence, diagnostic=ref)
    cause = RestingCause(
        code="internal-fault",
        at=project.clock(),
        actor=Actor.SYSTEM,
        evidence=evidence,
        details={"summary": t.text(error, 300)},
    )
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return
        tx.add_turn(
            task.id,
            role=Role.AGENT,
            kind="error",
            content=f"The turn could not run: internal fault: {error}",
            session_id=current.session_id,
            failure=evidence,
        )
        from corral.engine.recovery.receipts import interrupt

        # Never auto-resumed (its cause says so), so the breaker does not count it.
        interrupt(
            tx,
            current,
            f"internal fault: {error}",
            cause,
            status_reason=f"internal fault while {'launching' if phase == 'launch' else phase}",
            counts=False,
        )
