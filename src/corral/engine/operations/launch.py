"""Launching a turn: resolve its settings, write ``command.json``, start the detached supervisor, see it alive.

Called only after the human turn and the move to ``working`` are committed (save
first, act second). Every setting the supervisor needs is resolved here, once, into the
typed :class:`~corral.engine.runtime.protocol.Command`. A read-only turn (an ask) gets its
branch and worktree recorded in the command before anything runs
(:func:`corral.engine.readonly.take`), so whatever it changes is kept aside and reverted
after it. An exception here, after the task went working, reaches the operation that moved it
there, whose fault handler rests the task interrupted with the cause "internal fault" (once).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from msgspec import Struct
from msgspec.structs import replace
from msgspec.structs import replace as struct_replace

from corral import crashpoints
from corral.adapters import doorbell
from corral.adapters import sandbox as sandboxing
from corral.adapters.harness import make_harness
from corral.adapters.process import pid_alive, spawn_detached
from corral.adapters.ref_files import common_dir
from corral.domain.actors import Role
from corral.domain.agent_tools import TOKEN_ENV, TOOL_TIMEOUT_SECONDS
from corral.domain.clock import new_id, rfc3339
from corral.domain.delays import Delays
from corral.domain.failures import WATCHDOG_RELAUNCHES, Budgets
from corral.domain.posture import Posture
from corral.domain.prompts import system_text
from corral.domain.records import AGENT_TOOLS, Session, Task, Turn
from corral.engine import daemons, readonly
from corral.engine.config import Config, harness_settings, protected_patterns
from corral.engine.operations import spares
from corral.engine.paths import usage_limits_file
from corral.engine.private_state import make_private_dir
from corral.engine.project import Project
from corral.engine.resolve import task_config
from corral.engine.runtime import agent_marks, agent_tokens, provenance
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import COMMAND_TAG, reap_turn
from corral.errors import CorralError, LaunchFailed

SUPERVISOR_START_TIMEOUT = 15.0


class Launched(Struct, frozen=True):
    command_id: str
    supervisor_pid: int | None  # None: queued for a worker on another host (docs/workers.md)
    protocol_dir: Path
    log_dir: Path

    @property
    def queued(self) -> bool:
        return self.supervisor_pid is None

    def where(self) -> str:
        """Where the turn runs, as "is working (…)" says it."""
        return "queued for a worker" if self.queued else f"supervisor pid {self.supervisor_pid}"


def budgets(config: Config) -> Budgets:
    return Budgets(
        overload_seconds=float(config["budget_overload"]),
        network_seconds=float(config["budget_network"]),
        unreachable_attempts=int(config["budget_unreachable"]),
        unknown_attempts=int(config["budget_unknown"]),
    )


#: Claude Code's permission mode for a work turn corral confines: every tool allowed, since the
#: sandbox, not the harness's prompts, is what holds the agent (docs/harnesses.md#sandbox).
CONFINED_PERMISSION_MODE = "bypassPermissions"


def posture(config: Config, *, read_only: bool, confined: bool = False) -> Posture:
    """What the agent may do, from the trusted settings (a repository's corral.toml never widens it).

    A work turn in corral's sandbox (``confined``) may run every tool (Claude Code requires
    ``IS_SANDBOX=1`` for that as root). Every confined turn says it is sandboxed, an ask too: it
    keeps its read-only mode, and a harness whose own sandbox cannot nest in bwrap (Codex) leaves
    it to corral's.
    """
    work = confined and not read_only
    return Posture(
        permission_mode=CONFINED_PERMISSION_MODE if work else str(config["permission_mode"]),
        allowed_tools=tuple(config["allowed_tools"]),
        read_only=read_only,
        is_sandbox=confined or bool(config["is_sandbox"]),
    )


def sandbox_spec(project: Project, worktree: str, branch: str) -> sandboxing.SandboxSpec:
    """The turn's sandbox from the ``sandbox`` setting, resolved once here (``auto`` probes bwrap
    once per host, kept under ``CORRAL_HOME``), with the worktree's git directories the agent must write to commit."""
    spec = sandboxing.resolve(
        str(project.config["sandbox"]),
        hidden=[str(project.paths.home)],
        read_paths=[str(p) for p in project.config["sandbox_read_paths"] or ()],
        probe_cache=project.paths.home / sandboxing.PROBE_CACHE,
    )
    if not spec.confined:
        return spec
    common = git_dir = None
    found = linked_git_dirs(Path(worktree))
    if found is not None:
        common, git_dir = found
    else:
        try:
            out = project.git.out("rev-parse", "--git-common-dir", "--git-dir", cwd=worktree).splitlines()
            if len(out) == 2:
                common, git_dir = (str((Path(worktree) / line).resolve()) for line in out)
        except CorralError:
            pass  # not a git worktree: the worktree alone is writable
    return replace(spec, git_common_dir=common, git_dir=git_dir, branch=f"refs/heads/{branch}")


def linked_git_dirs(worktree: Path) -> tuple[str, str] | None:
    """(common, own) git directories of a task's linked worktree, read as git reads them (its ``.git``
    file, then ``commondir``), without a git process at every turn's start; None for anything but
    corral's own layout (``<common>/worktrees/<name>``, whose ``gitdir`` names this worktree back),
    which git is asked about."""
    dot = worktree / ".git"
    try:
        line = dot.read_text(encoding="utf-8").strip() if dot.is_file() and not dot.is_symlink() else ""
        if not line.startswith("gitdir:"):
            return None
        own = Path(line.removeprefix("gitdir:").strip())
        own = (own if own.is_absolute() else worktree / own).resolve()
        common = common_dir(worktree)
        back = Path((own / "gitdir").read_text(encoding="utf-8").strip())
        if common is None or own.parent != common / "worktrees" or back.resolve() != dot.resolve():
            return None
        if not (common / "objects").is_dir() or not (own / "HEAD").is_file():
            return None
    except (OSError, ValueError):
        return None
    return str(common), str(own)


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
    sandbox = sandbox_spec(project, session.worktree, session.branch or task.branch)
    with project.store.read() as tx:  # the number show gives this turn, for what its incidents say
        exchange = tx.exchanges_before(task.id, human_turn.sequence) + 1
    return proto.Command(
        exchange=exchange,
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
        posture=posture(cfg, read_only=read_only, confined=sandbox.confined and sandbox.error is None),
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
            term_grace_seconds=float(cfg["term_grace"]),
        ),
        budgets=budgets(cfg),
        check=proto.CheckSpec(
            cfg["post_turn_check"], float(cfg["post_turn_check_timeout"]), bool(cfg["post_turn_check_unconfined"])
        ),
        protected=protected_patterns(cfg, task.protected),
        created_at=rfc3339(project.clock()) or "",
        usage_limits=str(usage_limits_file(project.paths.home)),
        journal_dir=str(project.paths.journal_dir(task.id, session.id)),
        sandbox=sandbox,
        delays=Delays.of(cfg),
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
    agent_marks.clear(protocol_dir)  # a new command begins with no wait marker and no progress line


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


def write_provenance(task: Task, command: proto.Command) -> None:
    """The turn's provenance, before its agent starts, where the agent cannot write (runtime/provenance.py)."""
    provenance.write(
        Path(command.log_dir),
        {
            "task_id": task.id,
            "session_id": task.session_id,
            "command_id": command.command_id,
            "sequence": command.sequence,
            "sandbox": command.sandbox.mode if command.sandbox is not None else "off",
            "harness": command.harness,
            "launched_at": command.created_at,
        },
    )


def spawn_supervisor(protocol_dir: Path, log_path: Path, token: str | None = None) -> int:
    """Start the supervisor of the command in ``protocol_dir``, tagged with its command id (its identity).

    ``token`` is the turn's bearer token for corral's tools: it travels in the environment only.
    """
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    env = {COMMAND_TAG: command.command_id} if command is not None else {}
    if token is not None:
        env[TOKEN_ENV] = token
    argv = [sys.executable, "-m", "corral.engine.runtime.supervisor", str(protocol_dir)]
    return spawn_detached(argv, log=log_path, env=env or None)


def agent_tools(project: Project, task: Task, command: proto.Command) -> tuple[proto.Command, str | None]:
    """The command with its agent's door to corral's tools, and the turn's token (docs/mcp.md).

    A token is minted for every turn while ``agent_tools`` is on, also when the harness takes
    no MCP server: a corral CLI the agent runs carries it and acts as the agent. The daemon,
    which serves the MCP endpoint, is started when none runs (on a worker host, that host's own
    daemon); when it cannot serve one, the turn runs without the tools and ``show`` says why. A
    worker's turn puts its fence in the grant, so its agent's writes are fenced as the worker's are.
    """
    if not bool(task_config(project.config, task)["agent_tools"]):
        return struct_replace(command, agent_tools_absent="agent_tools is off in the settings"), None
    if command.posture.read_only:
        return struct_replace(command, agent_tools_absent="a read-only turn (an ask) gets no corral tools"), None
    home = project.paths.home
    token, grant = agent_tokens.mint(
        home,
        task_id=task.id,
        task_ref=task.ref,
        command_id=command.command_id,
        state=project.paths.root,
        repo=project.repo,
        fence=command.fence,  # a worker's turn: its agent writes only while this lease holds
    )
    spec = proto.AgentToolsSpec(
        url=None,
        token_hash=grant.token_hash,
        token_file=str(agent_tokens.grant_file(home, grant.token_hash)),
        timeout_seconds=TOOL_TIMEOUT_SECONDS,
    )
    command = struct_replace(command, agent_tools=spec)
    harness = make_harness(command.harness, command.harness_settings.as_mapping())
    if not harness.takes_agent_tools:
        return struct_replace(command, agent_tools_absent=harness.agent_tools_absent), token
    try:
        url = daemons.ensure_running(home).mcp_url
    except (CorralError, OSError) as exc:  # the turn runs on without the endpoint, and says why
        why = exc.message if isinstance(exc, CorralError) else f"{exc.strerror or exc} ({exc.filename})"
        return struct_replace(command, agent_tools_absent=f"the daemon did not start: {why}"), token
    if not url:
        return struct_replace(
            command, agent_tools_absent="the daemon serves no MCP endpoint (see corral daemon status)"
        ), token
    command = struct_replace(command, agent_tools=struct_replace(spec, url=url))
    if command.harness == "pi" and command.sandbox is not None and command.sandbox.confined:
        # Pi's shell and corral's share the name ``bash``: the turn's log is read for intents only where
        # corral's is the one Pi has (adapters/harness/pi.py)
        settings = struct_replace(command.harness_settings, pi_corral_shell=True)
        command = struct_replace(command, harness_settings=settings)
    return command, token


def _note_agent_tools(project: Project, task: Task, command: proto.Command) -> None:
    """What the task's agent had of corral's tools this turn, for ``show`` (kept in the task's metadata)."""
    sandbox = command.sandbox
    doc = {
        "command_id": command.command_id,
        "mcp": command.agent_tools is not None and command.agent_tools.url is not None,
        "absent": command.agent_tools_absent,
        # Which sandbox the turn had, and why (``show``'s Sandbox line).
        "sandbox": None if sandbox is None else {"mode": sandbox.mode, "reason": sandbox.error or sandbox.reason},
    }
    with project.store.write() as tx:
        current = tx.get_task(task.id) or task
        tx.update_task(task.id, metadata={**current.metadata, AGENT_TOOLS: doc}, touch=False)


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
    return struct_replace(command, read_only_before=before)


def launch(project: Project, task: Task, command: proto.Command) -> Launched:
    """Start the turn's supervisor for ``command`` and see it alive.

    A fault here is not handled here: the operation that moved the task to working owns it
    (``turns.owned``, or a worker's claim in ``operations/claimed.py``), so it is recorded once.
    """
    protocol_dir = project.paths.protocol_dir(task.id)
    log_dir = Path(command.log_dir)
    # Never two live agents for one task: whatever the previous command left alive goes first.
    reap_turn(project, task.id)
    file_claimed_receipt(project, task)
    agent_tokens.revoke_command(protocol_dir)
    clear_protocol(protocol_dir, keep_into=log_dir)
    command = with_before(project, command)
    command, token = agent_tools(project, task, command)
    proto.write_command(protocol_dir, command)
    write_provenance(task, command)
    crashpoints.hit("launch.command-written")
    _note_agent_tools(project, task, command)
    # A supervisor started ahead for this very command id (the daemon's resume took it): handed its command.
    pid = spares.hand(command.command_id, protocol_dir, project.paths.supervisor_log, token)
    if pid is None:
        pid = spawn_supervisor(protocol_dir, project.paths.supervisor_log, token)
    crashpoints.hit("launch.supervisor-spawned")
    with project.store.write() as tx:
        tx.register_process(task.id, "supervisor", pid, command.command_id, owner=project.placement.owner(project))
    crashpoints.hit("launch.supervisor-registered")
    # The home daemon watches this supervisor's exit from now, not from its next look at the store.
    doorbell.ring(daemons.daemon_dir(project.paths.home) / doorbell.NAME)
    if not wait_alive(protocol_dir, pid):
        raise LaunchFailed(
            f"The supervisor of {task.ref} did not start within {int(SUPERVISOR_START_TIMEOUT)} s.",
            hint=f"See {project.paths.supervisor_log}.",
        )
    return Launched(command.command_id, pid, protocol_dir, log_dir)
