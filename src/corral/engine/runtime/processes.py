"""Finding and stopping the processes of a task's last command: its supervisor and its agent.

Every kill names a positive pid that a protocol file recorded, or a process that carries
the command's tag in its environment, never 0 or our own group. "Never two live agents for
one task": before a new turn launches, whatever the previous command left alive is stopped.
"""

from __future__ import annotations

import os

from corral.adapters.process import pid_alive, stop_group
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto

#: The environment variable that tags every agent process with its command's id.
COMMAND_TAG = "CORRAL_COMMAND_ID"


def tagged(command_id: str) -> list[int]:
    """Live processes whose environment carries ``CORRAL_COMMAND_ID=<command_id>`` (Linux /proc)."""
    needle = f"{COMMAND_TAG}={command_id}".encode() + b"\0"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read() + b"\0":
                    found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def reap_turn(project: Project, task_id: str, *, grace: float = 1.0) -> list[int]:
    """Stop the supervisor and agent of the task's last command; returns the pids stopped.

    They are found by the pids in ``status.json`` and, for an agent whose supervisor died
    before naming it, by the command tag in its environment.
    """
    protocol_dir = project.paths.protocol_dir(task_id)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command)
    pids: list[int | None] = [status.agent_pid, status.pid] if status else []
    for command_id in {status.command_id if status else None, command.command_id if command else None}:
        if command_id:
            pids.extend(tagged(command_id))
    stopped = []
    for pid in dict.fromkeys(pids):
        if pid is not None and pid > 1 and pid_alive(pid):
            stop_group(pid, grace)
            stopped.append(pid)
    return stopped
