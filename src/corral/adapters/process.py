"""Processes, the one way: run, spawn (detached or in the foreground), tell alive, identify, stop with grace.

Everything corral executes goes through here, so tests can record or replace it:
a :class:`Runner` runs a command to completion and captures its output (:meth:`Runner.run`),
or starts one in a process group of its own and hands back the :class:`Started` child to
read, wait for and end by its group (:meth:`Runner.start`: the post-turn check, corral's
shell). The engine holds one runner, ``Project.runner`` (or a caller's own argument, for the
supervisor's check), and never spawns a process itself; a test hands it
:class:`corral.testing.fake_runner.FakeRunner`, which records each argv and plays scripted
results. A runner's failures are typed: :class:`~corral.errors.ProgramMissing` for an
executable that is not there, :class:`~corral.errors.ProgramTimeout` for a run past its time
limit, :class:`~corral.errors.ProgramError` for any other spawn failure.

The supervisor and the daemon keep their own launch here (:func:`spawn_detached`), as the
supervisor keeps the agent's (:func:`spawn_piped`): the skeletons of a turn, not programs a
test would script. :func:`pid_alive` tells whether a pid is a live process (a zombie is not).
Every argv passes :func:`check_argv` first: a NUL byte in an argument would otherwise surface
as Python's opaque "embedded null byte".

A pid alone names whatever process holds the number now: what proves a recorded process is
still the one, and signals it only then, is :mod:`corral.adapters.pid_identity`.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Protocol

from msgspec import Struct

from corral.adapters.files import open_private
from corral.errors import ArgvError, ProgramError, ProgramMissing, ProgramTimeout

MAX_PID = 2**22  # Linux's pid_max ceiling; anything larger is not a process


def check_argv(argv: Sequence[str]) -> None:
    """Refuse an argv carrying a NUL, naming the argument, instead of an opaque spawn error."""
    for index, arg in enumerate(argv):
        if "\x00" in arg:
            raise ArgvError(
                f"Refusing to run {argv[0]!r}: argument {index} contains a NUL byte, which no program can receive.",
                hint="This text should have been sanitized at intake; report it with `corral doctor`.",
            )


class Completed(Struct, frozen=True):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Started(Protocol):
    """A child started by :meth:`Runner.start`, in a session and process group of its own (its group id
    is its pid), so it and everything it starts end together."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def stderr(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None:
        """Its exit code (negative: the signal that ended it), or None while it runs."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code once it ends, or None when it still runs after ``timeout`` seconds."""
        ...

    def stop_group(self, grace: float) -> None:
        """SIGTERM to its group, then SIGKILL to the group after ``grace`` seconds (:func:`stop_child_group`)."""
        ...

    def kill_group(self) -> None:
        """SIGKILL to its group at once."""
        ...


class Runner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Completed:
        """Run ``argv`` to its end, output captured as text; ``env`` adds to this process's environment.
        Raises :class:`~corral.errors.ProgramTimeout` past ``timeout`` (its group ended first),
        :class:`~corral.errors.ProgramMissing` or :class:`~corral.errors.ProgramError` when it cannot start."""
        ...

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        environ: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        pass_fds: Sequence[int] = (),
    ) -> Started:
        """Start ``argv`` in a session of its own, stdin from /dev/null, stdout and stderr piped (stderr
        into stdout with ``merge_stderr``); ``environ`` is its whole environment (None: this process's),
        ``pass_fds`` the descriptors it inherits. Raises as :meth:`run` does when it cannot start."""
        ...


def not_started(argv: Sequence[str], exc: OSError) -> ProgramError:
    """The typed error of a spawn that failed: the executable missing (or not executable), or anything else."""
    name = argv[0] if argv else "(nothing)"
    if isinstance(exc, FileNotFoundError | PermissionError) and exc.filename in (None, name):
        return ProgramMissing(
            f"`{name}` could not be run: {exc.strerror or exc}.",
            hint=f"Install it or put it on PATH (`command -v {name}` says where it is), or give its full path.",
        )
    return ProgramError(
        f"`{name}` could not be started: {exc.strerror or exc}"
        + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")
        + ".",
        hint="Check that the program and the directory it runs in exist and can be used.",
    )


def timed_out(argv: Sequence[str], timeout: float) -> ProgramTimeout:
    """The typed error of a run past its time limit (its group already ended)."""
    shown = _shown(argv)
    return ProgramTimeout(
        f"`{shown}` ran past its {timeout:g} s limit; corral ended it.",
        hint=f"Run `{shown}` by hand to see where it hangs.",
    )


def _shown(argv: Sequence[str], limit: int = 200) -> str:
    text = " ".join(argv)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Reaped(subprocess.Popen[str]):
    """A child whose wait under a time limit (``communicate(timeout=…)``, once its output has ended) sleeps until
    it exits, not in subprocess's steps of 1, 2, 4 … ms: a git that closed its output and is exiting was
    reaped a millisecond or more late on most runs (seven of an accept's ten). Linux's pidfd tells the exit;
    where there is none, subprocess's own loop does."""

    def _wait(self, timeout: float | None) -> int:
        if timeout is not None and self.returncode is None:
            _exited_within(self.pid, timeout)
        return super()._wait(timeout)  # type: ignore[misc,no-any-return]


def _exited_within(pid: int, timeout: float) -> None:
    """Sleep until ``pid`` (a child not yet reaped) exits, or ``timeout`` seconds pass."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3+: subprocess's loop waits
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))
    finally:
        os.close(fd)


class SubprocessRunner:
    """The real runner: child processes."""

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
        # With a time limit the child gets a session of its own, so an expiry ends its whole
        # group with SIGTERM first: git removes its lock files, and a hook it ran goes too.
        try:
            proc = _Reaped(
                list(argv),
                cwd=cwd,
                env=full_env,
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="surrogateescape",
                start_new_session=timeout is not None,
            )
        except OSError as exc:
            raise not_started(argv, exc) from None
        with proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                _end_group(proc, RUNNER_TERM_GRACE)
                proc.communicate()
                assert timeout is not None
                raise timed_out(argv, timeout) from None
        return Completed(tuple(argv), proc.returncode, out, err)

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        environ: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        pass_fds: Sequence[int] = (),
    ) -> Started:
        check_argv(argv)
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=None if environ is None else dict(environ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        except OSError as exc:
            raise not_started(argv, exc) from None
        return StartedChild(proc)


class StartedChild:
    """A real child of :meth:`SubprocessRunner.start`: a :class:`subprocess.Popen` seen as :class:`Started`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def stdout(self) -> IO[bytes] | None:
        return self._proc.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self._proc.stderr

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop_group(self, grace: float) -> None:
        stop_child_group(self._proc, grace)

    def kill_group(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def spawn_detached(
    argv: Sequence[str], *, log: Path, cwd: str | None = None, env: Mapping[str, str] | None = None
) -> int:
    """Start ``argv`` in its own session and process group, output appended to ``log``; returns its pid.

    The child outlives the caller (a supervisor outlives the CLI that started it), and a
    signal to the caller's terminal never reaches it. ``env`` adds to the caller's
    environment (a supervisor's command tag, by which it is identified later).
    """
    return _detached(argv, log=log, cwd=cwd, env=env, stdin=subprocess.DEVNULL).pid


def spawn_fed(argv: Sequence[str], *, log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` as :func:`spawn_detached` does (its own session, output appended to ``log``, ``env`` added
    to the caller's), with a pipe to its stdin the caller keeps: a process that waits for its orders
    (a spare supervisor) and reads end-of-file once the caller closes it, or dies."""
    return _detached(argv, log=log, cwd=None, env=env, stdin=subprocess.PIPE)


def _detached(
    argv: Sequence[str], *, log: Path, cwd: str | None, env: Mapping[str, str] | None, stdin: int
) -> subprocess.Popen[bytes]:
    check_argv(argv)
    out = open_private(log)  # 0600: the log names the user's repositories and tasks
    try:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**os.environ, **env} if env else None,
            stdin=stdin,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(out)


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
    # A zombie child still answers kill(0); /proc tells the truth on Linux (read raw: this runs
    # once per working task on every list).
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            stat = os.read(fd, 512)
        finally:
            os.close(fd)
        return stat.rsplit(b") ", 1)[1][:1] != b"Z"
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


def exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether a child exited, without reaping it: its zombie keeps its pid (and so its group's
    and session's ids) from being given to another process until :meth:`Popen.wait`."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


#: How long a runner's child that ran past its time limit gets between SIGTERM and SIGKILL.
RUNNER_TERM_GRACE = 2.0


def _end_group(proc: subprocess.Popen[str], grace: float) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_child_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """End the process group of a child started in its own session (its group id is its pid).

    SIGTERM to the group, then SIGKILL to the group after ``grace`` seconds — even when the
    leader already exited, so children that outlived it (holding its pipes open) go too. The
    leader is never reaped here: its zombie holds the group's id until its owner waits for it.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not exited(proc):
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def environ_overlay(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment (and so in every child's) until the block ends,
    then each variable back as it was, unset where it was unset."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
