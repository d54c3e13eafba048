"""Stopping processes corral started: a supervisor's group and its agent's group.

Every kill here names a positive pid that a protocol file or the process table
recorded, never 0 or our own group. "Never two live agents for one task": before a
new turn launches, whatever the previous command left alive is stopped.
"""

from __future__ import annotations

import os
import signal
import time

from corral.domain.failures import TERM_GRACE_SECONDS
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import pid_alive


def _signal_group(pid: int, signum: int) -> None:
    if pid <= 1 or pid == os.getpid():
        return
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    if pgid == os.getpgrp():
        # Not started in its own group (never the case for corral's children): the process alone.
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
        return
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def stop_group(pid: int, grace: float = TERM_GRACE_SECONDS) -> None:
    """SIGTERM the process's group, then SIGKILL it after ``grace`` seconds if it still lives."""
    if not pid_alive(pid):
        return
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    if pid_alive(pid):
        _signal_group(pid, signal.SIGKILL)


def tagged(command_id: str) -> list[int]:
    """Live processes whose environment carries ``CORRAL_COMMAND_ID=<command_id>`` (Linux /proc)."""
    needle = f"CORRAL_COMMAND_ID={command_id}".encode() + b"\0"
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
    status = proto.read(protocol_dir / proto.STATUS) or {}
    command = proto.read(protocol_dir / proto.COMMAND) or {}
    pids = [status.get(key) for key in ("agent_pid", "pid")]
    for command_id in {status.get("command_id"), command.get("command_id")}:
        if isinstance(command_id, str) and command_id:
            pids.extend(tagged(command_id))
    stopped = []
    for pid in dict.fromkeys(pids):
        if isinstance(pid, int) and pid > 1 and pid_alive(pid):
            stop_group(pid, grace)
            stopped.append(pid)
    return stopped
