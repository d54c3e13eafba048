"""Finding, judging and stopping the processes of a task's last command: its supervisor and its agent.

A pid in a protocol file or the store is never signalled on its own: the process holding it
must still be the one recorded — the same start time (``status.json`` keeps ``pid_start``
and ``agent_start``), or the command's tag in its environment (``CORRAL_COMMAND_ID``, on the
supervisor and on every agent), or for a store record a start no later than its
registration. A supervisor that holds its pid but has not beaten for ten heartbeats
(``Delays.stale_heartbeat``, ``corral.domain.delays``: frozen, stopped) is lost, not working
(:func:`supervisor_lost`). "Never two live agents for one task": before a new
turn launches, whatever the previous command left alive is stopped (:func:`reap_turn`).

What a turn's agent starts through corral's own tools (its shell, run by the daemon) is the
turn's too: it carries the same tag, so ``stop`` and the reconciler end it with the agent's own
leftovers, and it runs only while :func:`running_agent` still finds the agent that asked for it.
It is not the supervisor's descendant (the daemon started it), so its sandbox is written down in
the turn's log directory before it runs anything (:func:`note_shell_sandbox`), and the
supervisor's end-of-attempt sweep ends what those sandboxes hold (:func:`shell_sandboxes`) before
the turn is recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from corral.adapters.pid_identity import (
    Identity,
    ProcInfo,
    all_processes,
    descendants,
    environ_has,
    proc_info,
    send_identified,
    start_ticks,
    stop_identified,
)
from corral.domain.clock import parse_time
from corral.domain.delays import Delays
from corral.domain.records import ProcessRecord
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.heartbeat import heartbeat_age

if TYPE_CHECKING:  # the supervisor loads this module, and never the store
    from corral.engine.project import Project

#: The environment variable that tags a command's supervisor and every agent process with its id.
COMMAND_TAG = "CORRAL_COMMAND_ID"


def tag(command_id: str) -> str:
    """The environment entry a command's processes carry."""
    return f"{COMMAND_TAG}={command_id}"


#: The sandboxes corral's shell started for a turn, one line each (``{"pid": .., "start": ..}``), in
#: the turn's log directory.
SHELL_SANDBOXES = "shell-sandboxes.jsonl"


def note_shell_sandbox(log_dir: Path, pid: int) -> None:
    """Write down a sandbox of corral's shell (held before it runs anything) for the turn's end to find."""
    start = start_ticks(pid)
    if start is None:
        return  # gone already: nothing of it is left to end
    line = json.dumps({"pid": pid, "start": start}) + "\n"
    fd = os.open(log_dir / SHELL_SANDBOXES, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def shell_sandboxes(log_dir: Path, command_id: str) -> list[list[ProcInfo]]:
    """The sandboxes of corral's shell for the turn ``command_id`` that still run, each with what it holds:
    each one written down that is still the process recorded (its start, the turn's tag), first, then
    everything inside it. Ending the sandbox first ends its command as corral's end (a signal, not an
    exit of the command's own) and takes the rest along."""
    try:
        lines = (log_dir / SHELL_SANDBOXES).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []  # the turn ran no command of corral's shell
    entry = tag(command_id)
    found: list[list[ProcInfo]] = []
    for line in lines:
        try:
            noted = json.loads(line)
            pid, start = int(noted["pid"]), int(noted["start"])
        except (ValueError, TypeError, KeyError):
            continue
        info = proc_info(pid)
        if info is None or info.start != start or not environ_has(pid, entry):
            continue  # ended already, and its pid maybe another process's since
        inside = descendants(pid) or []  # where the kernel lists no children, ending the sandbox ends them
        found.append([info, *inside])
    return found


def tagged_processes(command_id: str) -> list[ProcInfo]:
    entry = tag(command_id)
    return [p for p in all_processes() if environ_has(p.pid, entry)]


def supervisor_identity(status: proto.SupervisorStatus) -> Identity:
    """The supervisor named in ``status.json``: its pid with its start time, else with its tag."""
    if status.pid_start is not None:
        return Identity(status.pid, start=status.pid_start)
    return Identity(status.pid, env=tag(status.command_id))


def agent_identity(status: proto.SupervisorStatus) -> Identity | None:
    if status.agent_pid is None:
        return None
    if status.agent_start is not None:
        return Identity(status.agent_pid, start=status.agent_start)
    return Identity(status.agent_pid, env=tag(status.command_id))


def record_identity(record: ProcessRecord) -> Identity:
    """A process the store registered: tagged with its command, and started before it was registered."""
    return Identity(
        record.pid,
        env=tag(record.command_id) if record.command_id else None,
        not_after=record.started_at.timestamp(),
    )


#: :func:`supervisor_lost`'s answer for a supervisor that simply exited (every other answer is a
#: live process that is not, or no longer, running the turn).
GONE = "its process is gone"
#: The delays a reader that names none judges a heartbeat by: the settings' defaults.
_DEFAULT = Delays()


def supervisor_lost(
    status: proto.SupervisorStatus, *, mono_now: float | None = None, stale: float | None = None
) -> str | None:
    """Why the supervisor ``status.json`` names is not running its turn, or None when it is.

    Gone, its pid held by another process (a different start time), or alive with a
    heartbeat older than ``stale`` seconds (frozen or stopped; the reader's own settings give it,
    ``Delays.stale_heartbeat``, else the default's). A status file without a start time (an older
    supervisor's) is judged by its pid and heartbeat alone.
    """
    info = proc_info(status.pid)  # None for no process and for a zombie: one read of /proc, no signal
    if info is None:
        return GONE
    if status.pid_start is not None and info.start != status.pid_start:
        return f"its pid {status.pid} now names another process"
    age = heartbeat_age(status, mono_now=mono_now)
    bound = stale if stale is not None else _DEFAULT.stale_heartbeat
    if age is not None and age > bound:
        return (
            f"its heartbeat is stale: the last beat was {age:.0f} s ago (the bound is "
            f"{bound:g} s); the process is frozen or stopped"
        )
    return None


def supervisor_alive(status: proto.SupervisorStatus, *, mono_now: float | None = None) -> bool:
    """Whether the supervisor ``status.json`` names is alive and running its turn (what ``list`` shows)."""
    return supervisor_lost(status, mono_now=mono_now) is None


def reap_turn(
    project: Project, task_id: str, *, grace: float | None = None, command_id: str | None = None
) -> list[int]:
    """Stop the supervisor and agent of the task's last command; returns the pids stopped.

    They are found by the pids in ``status.json`` (each signalled only if it is still the
    process recorded) and, for an agent whose supervisor died before naming it, by the
    command tag in its environment. With ``command_id``, only that command's processes. Each
    gets ``grace`` seconds between SIGTERM and SIGKILL: by default the settings' ``reap_grace``,
    what a turn's own leftovers get.
    """
    if grace is None:
        grace = float(project.config["reap_grace"])
    protocol_dir = project.paths.protocol_dir(task_id)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    if status is not None and command_id is not None and status.command_id != command_id:
        status = None
    found: list[Identity] = []
    if status is not None:
        agent = agent_identity(status)
        if agent is not None:
            found.append(agent)
        found.append(supervisor_identity(status))
    ids = {status.command_id if status else None, command.command_id if command else None}
    if command_id is not None:
        ids = {command_id}
    for cid in sorted(i for i in ids if i):
        found.extend(Identity(p.pid, start=p.start, env=tag(cid)) for p in tagged_processes(cid))
    stopped: list[int] = []
    for identity in found:
        if identity.pid not in stopped and stop_identified(identity, grace):
            stopped.append(identity.pid)
    return stopped


def running_agent(protocol_dir: Path, command_id: str) -> Identity | None:
    """The agent of the turn ``command_id`` while it runs: named in ``status.json`` by a supervisor still
    running that turn, and still the process recorded; None once it exited, between two attempts, or
    when its supervisor is gone or lost (a turn whose agent is not running has nothing to act for)."""
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    if status is None or status.command_id != command_id or supervisor_lost(status) is not None:
        return None
    agent = agent_identity(status)
    return agent if agent is not None and agent.matches() else None


def request_stop(project: Project, task_id: str, actor: str) -> bool:
    """Ask the task's supervisor to end its turn (``stop.json`` says who asked, then SIGTERM); False when no
    live supervisor was there to ask (gone, frozen, or its pid another process's now: never signalled)."""
    import signal

    protocol_dir = project.paths.protocol_dir(task_id)
    proto.write(protocol_dir, proto.StopRequest(actor))
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    if status is None or not supervisor_alive(status):
        return False
    return send_identified(supervisor_identity(status), signal.SIGTERM)


def stop_recorded(record: ProcessRecord, grace: float = 1.0) -> bool:
    """Stop a process the store registered, if it is still that process (the terminal sweep's)."""
    return stop_identified(record_identity(record), grace)


def signal_daemon(pid: int, started_at: str | None, signum: int) -> bool:
    """Signal the daemon its state file names (``pid``, ``started_at`` as it wrote them), only if
    that pid is still a process that started no later than the daemon wrote it; False otherwise."""
    try:
        when = parse_time(started_at)
    except ValueError:
        return False
    return when is not None and send_identified(Identity(pid, not_after=when.timestamp()), signum)
