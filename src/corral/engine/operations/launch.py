"""Launching a turn: resolve its settings, write ``command.json``, start the detached supervisor, see it alive.

Called only after the human turn and the move to ``working`` are committed (save
first, act second). Every setting the supervisor needs is resolved here, once, into the
typed :class:`~corral.engine.runtime.protocol.Command`. A read-only turn (an ask) gets its
branch and worktree recorded in the command before anything runs
(:func:`corral.engine.readonly.take`), so whatever it changes is kept aside and reverted
after it. An exception here, after the task went working, rests the task interrupted with
the cause "internal fault" instead of leaving it with no owner.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from corral import crashpoints
from corral.adapters.process import pid_alive, spawn_detached
from corral.domain.actors import Role
from corral.domain.clock import new_id, rfc3339
from corral.domain.failures import TERM_GRACE_SECONDS, WATCHDOG_RELAUNCHES, Budgets
from corral.domain.posture import Posture
from corral.domain.prompts import system_text
from corral.domain.record import record, replace
from corral.domain.records import Session, Task, Turn
from corral.engine import readonly
from corral.engine.config import Config, harness_settings
from corral.engine.paths import make_private_dir, usage_limits_file
from corral.engine.project import Project
from corral.engine.recovery.faults import internal_fault
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import COMMAND_TAG, reap_turn
from corral.errors import CorralError, LaunchFailed

SUPERVISOR_START_TIMEOUT = 15.0


@record
class Launched:
    command_id: str
    supervisor_pid: int
    protocol_dir: Path
    log_dir: Path


def budgets(config: Config) -> Budgets:
    return Budgets(
        overload_seconds=float(config["budget_overload"]),
        network_seconds=float(config["budget_network"]),
        unreachable_attempts=int(config["budget_unreachable"]),
        unknown_attempts=int(config["budget_unknown"]),
    )


def posture(config: Config, *, read_only: bool) -> Posture:
    """What the agent may do, from the trusted settings (a repository's corral.toml never widens it)."""
    return Posture(
        permission_mode=str(config["permission_mode"]),
        allowed_tools=tuple(config["allowed_tools"]),
        read_only=read_only,
        is_sandbox=bool(config["is_sandbox"]),
    )


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
) -> proto.Command:
    cfg = project.config
    assert session.worktree is not None and human_turn.command_id is not None
    return proto.Command(
        command_id=human_turn.command_id,
        task_id=task.id,
        task_ref=task.ref,
        kind=kind,
        turn_id=human_turn.id,
        sequence=human_turn.sequence,
        log_dir=str(project.paths.turn_dir(task.id, human_turn.sequence)),
        harness=task.harness or cfg["harness"],
        harness_settings=proto.HarnessSettings(**harness_settings(cfg)),
        model=task.model or cfg["model"],
        posture=posture(cfg, read_only=read_only),
        prompt_body=body,
        system=system_text(session.worktree, session.branch or task.branch),
        resume_id=session.harness_session_id,
        worktree=session.worktree,
        branch=session.branch or task.branch,
        target=target,
        sync_before_work=sync_before_work,
        announce_merge=announce_merge,
        git_start_sha=session.git_start_sha or session.base_commit,
        delivered=tuple(delivered),
        watchdog=proto.Watchdog(
            timeout_seconds=float(cfg["watchdog_timeout"]),
            relaunches=WATCHDOG_RELAUNCHES,
            term_grace_seconds=TERM_GRACE_SECONDS,
        ),
        budgets=budgets(cfg),
        check=proto.CheckSpec(cfg["post_turn_check"], float(cfg["post_turn_check_timeout"])),
        protected=tuple(sorted({*cfg["protected"], *task.protected})),
        created_at=rfc3339(project.clock()) or "",
        usage_limits=str(usage_limits_file(project.paths.home)),
        journal_dir=str(project.paths.journal_dir(task.id, session.id)),
    )


def clear_protocol(protocol_dir: Path, keep_into: Path | None = None) -> None:
    """Remove the previous turn's files; a receipt never processed is kept aside, not deleted."""
    make_private_dir(protocol_dir)
    stale = protocol_dir / proto.RESPONSE
    if stale.exists() or stale.is_symlink():
        dest = (keep_into or protocol_dir) / f"stale-response-{new_id()}.json"
        make_private_dir(dest.parent)
        os.replace(stale, dest)
    proto.remove(protocol_dir, proto.STATUS, proto.PROGRESS, proto.STOP, proto.COMMAND)


def file_claimed_receipt(project: Project, task: Task) -> None:
    """A receipt already recorded (a reconciler died before filing it) goes to its own turn."""
    from corral.engine.recovery import receipts

    path = project.paths.protocol_dir(task.id) / proto.RESPONSE
    found = proto.read_record(path, proto.Receipt)
    if found is None or found.command_id is None:
        return
    with project.store.read() as tx:
        claimed = tx.turn_by_command(found.command_id, Role.AGENT) is not None
    if claimed:
        receipts.file_away(project, task, path, found.command_id)


def spawn_supervisor(protocol_dir: Path, log_path: Path) -> int:
    """Start the supervisor of the command in ``protocol_dir``, tagged with its command id (its identity)."""
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    env = {COMMAND_TAG: command.command_id} if command is not None else None
    argv = [sys.executable, "-m", "corral.engine.runtime.supervisor", str(protocol_dir)]
    return spawn_detached(argv, log=log_path, env=env)


def wait_alive(protocol_dir: Path, pid: int, timeout: float = SUPERVISOR_START_TIMEOUT) -> bool:
    """Until the supervisor's ``status.json`` names it (or its receipt is already there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.pid == pid:
            return True
        if (protocol_dir / proto.RESPONSE).exists():
            return True
        if not pid_alive(pid):
            return (protocol_dir / proto.RESPONSE).exists()
        time.sleep(0.01)
    return False


def with_before(project: Project, command: proto.Command) -> proto.Command:
    """A read-only command with its before-state (its branch tip and a snapshot of the worktree)."""
    if not command.posture.read_only or command.read_only_before is not None:
        return command
    before = readonly.take(project.git, Path(command.worktree), command.branch)
    return replace(command, read_only_before=before)


def launch(project: Project, task: Task, command: proto.Command) -> Launched:
    protocol_dir = project.paths.protocol_dir(task.id)
    log_dir = Path(command.log_dir)
    try:
        # Never two live agents for one task: whatever the previous command left alive goes first.
        reap_turn(project, task.id)
        file_claimed_receipt(project, task)
        clear_protocol(protocol_dir, keep_into=log_dir)
        command = with_before(project, command)
        proto.write(protocol_dir, command)
        crashpoints.hit("launch.command-written")
        pid = spawn_supervisor(protocol_dir, project.paths.supervisor_log)
        crashpoints.hit("launch.supervisor-spawned")
        with project.store.write() as tx:
            tx.register_process(task.id, "supervisor", pid, command.command_id)
        crashpoints.hit("launch.supervisor-registered")
        if not wait_alive(protocol_dir, pid):
            raise LaunchFailed(
                f"The supervisor of {task.ref} did not start within {int(SUPERVISOR_START_TIMEOUT)} s.",
                hint=f"See {project.paths.supervisor_log}.",
            )
    except Exception as exc:
        internal_fault(project, task, exc)
        if isinstance(exc, CorralError):
            raise
        raise LaunchFailed(f"corral could not launch the turn of {task.ref}: {exc}") from exc
    return Launched(command.command_id, pid, protocol_dir, log_dir)
