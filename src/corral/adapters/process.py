"""Processes, the one way: run, spawn (detached or in the foreground), tell alive, stop with grace.

Everything corral executes goes through here, so tests can record or replace it:
``Runner`` runs a command to completion and captures its output; :func:`spawn` starts a
long-lived child (detached in its own session for a supervisor or a daemon, or in the
foreground for an interactive pair); :func:`pid_alive` tells whether a pid is a live
process (a zombie is not); :func:`stop_group` ends a process group with SIGTERM, a grace
period (the caller's: the domain's rule or the command's), then SIGKILL. Every argv passes
:func:`check_argv` first: a NUL byte in an argument would otherwise surface as Python's
opaque "embedded null byte".
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from corral.errors import ArgvError

MAX_PID = 2**22  # Linux's pid_max ceiling; anything larger is not a process


def check_argv(argv: Sequence[str]) -> None:
    """Refuse an argv carrying a NUL, naming the argument, instead of an opaque spawn error."""
    for index, arg in enumerate(argv):
        if "\x00" in arg:
            raise ArgvError(
                f"Refusing to run {argv[0]!r}: argument {index} contains a NUL byte, which no program can receive.",
                hint="This text should have been sanitized at intake; report it with `corral doctor`.",
            )


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Completed: ...


class SubprocessRunner:
    """The real runner: a child process, its output captured as text."""

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Completed:
        check_argv(argv)
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=full_env,
            input=input,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout,
            check=False,
        )
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def spawn_detached(argv: Sequence[str], *, log: Path, cwd: str | None = None) -> int:
    """Start ``argv`` in its own session and process group, output appended to ``log``; returns its pid.

    The child outlives the caller (a supervisor outlives the CLI that started it), and a
    signal to the caller's terminal never reaches it.
    """
    check_argv(argv)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    return proc.pid


def spawn_piped(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    stdin: bool,
) -> subprocess.Popen[bytes]:
    """Start an agent in its own session and process group with piped stdout and stderr.

    Its own group lets corral signal the agent and every child it made at once, and
    keeps the supervisor's signals from reaching it.
    """
    check_argv(argv)
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )


def spawn_shell(
    command: str, *, cwd: str | Path, output: int | IO[bytes] | None = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    """A shell command in its own group (the post-turn check), stdout and stderr together."""
    return subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def run_foreground(argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run an interactive program on the person's terminal and return its exit status."""
    check_argv(argv)
    return subprocess.run(list(argv), cwd=cwd, env=dict(env) if env is not None else None, check=False).returncode


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live process; a zombie (exited, not yet reaped) is not alive."""
    if pid <= 0 or pid > MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); /proc tells the truth on Linux.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def send(pid: int, signum: int) -> bool:
    """Signal one process; False when it is already gone (never 0, 1 or ourselves)."""
    if pid <= 1 or pid == os.getpid():
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def signal_group(pid: int, signum: int) -> None:
    """Signal ``pid``'s process group (or ``pid`` alone when it shares ours); never 0, 1 or ourselves."""
    if pid <= 1 or pid == os.getpid():
        return
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        if pgid == os.getpgrp():
            # Not started in its own group (never the case for corral's children): the process alone.
            os.kill(pid, signum)
        else:
            os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def stop_group(pid: int, grace: float) -> None:
    """SIGTERM the process's group, then SIGKILL it after ``grace`` seconds if it still lives."""
    if not pid_alive(pid):
        return
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    if pid_alive(pid):
        signal_group(pid, signal.SIGKILL)


def stop_child_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """End the process group of a child started in its own session (its group id is its pid).

    SIGTERM to the group, then SIGKILL to the group after ``grace`` seconds — even when the
    leader already exited, so children that outlived it (holding its pipes open) go too.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
