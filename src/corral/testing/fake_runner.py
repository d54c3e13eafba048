"""A process runner that runs nothing: it records every argv and plays the results a test scripted.

Hand it to ``Project.open(repo, runner=FakeRunner())`` (or to a function that takes a runner) where
a test is about what corral asks of a program and how it reads the answer — the argv it builds,
an exit code, a timeout, a program that is not there — and no real process is needed. Tests
about processes themselves (groups, signals, the sandbox) keep the real runner.

Its PATH is what the test put on it: a command no :meth:`FakeRunner.on` matches is not there
(:class:`~corral.errors.ProgramMissing`, as the real runner says for a missing executable). A
scripted command that ``hangs`` runs past any time limit: :meth:`FakeRunner.run` raises the real
runner's :class:`~corral.errors.ProgramTimeout`, and a started one never exits until its group
is stopped or killed, which it records.
"""

from __future__ import annotations

import io
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from corral.adapters.process import MAX_PID, Completed, Started, check_argv, not_started, timed_out


@dataclass(frozen=True)
class Script:
    """What a scripted program does: its exit code and output, or that it is missing, or that it hangs."""

    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    missing: bool = False
    hangs: bool = False


@dataclass(frozen=True)
class Call:
    """One program the runner was asked for, as it was asked."""

    how: str  # "run" or "start"
    argv: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] | None = None  # run: added to the environment; start: the whole environment
    input: str | None = None
    timeout: float | None = None
    merge_stderr: bool = False
    pass_fds: tuple[int, ...] = ()


class FakeRunner:
    """A :class:`~corral.adapters.process.Runner` for tests: :attr:`calls` holds what it was asked, in order."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        #: Every child :meth:`start` handed out, in order.
        self.started: list[FakeChild] = []
        self._scripts: list[tuple[tuple[str, ...], Script]] = []

    def on(
        self,
        *prefix: str,
        returncode: int = 0,
        stdout: str = "",
        stderr: str = "",
        missing: bool = False,
        hangs: bool = False,
    ) -> FakeRunner:
        """Script every argv that starts with ``prefix`` (the longest matching prefix wins; later beats earlier)."""
        self._scripts.append((prefix, Script(returncode, stdout, stderr, missing, hangs)))
        return self

    def script_for(self, argv: Sequence[str]) -> Script | None:
        best: tuple[int, Script] | None = None
        for prefix, script in self._scripts:
            if tuple(argv[: len(prefix)]) == prefix and (best is None or len(prefix) >= best[0]):
                best = (len(prefix), script)
        return best[1] if best else None

    def _found(self, argv: Sequence[str]) -> Script:
        script = self.script_for(argv)
        if script is None or script.missing:
            name = argv[0] if argv else ""
            raise not_started(argv, FileNotFoundError(2, "No such file or directory", name))
        return script

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
        self.calls.append(Call("run", tuple(argv), cwd, dict(env) if env is not None else None, input, timeout))
        script = self._found(argv)
        if script.hangs:
            if timeout is None:
                raise AssertionError(f"{list(argv)} hangs and was run with no time limit: it would never return")
            raise timed_out(argv, timeout)
        return Completed(tuple(argv), script.returncode, script.stdout, script.stderr)

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
        call = Call(
            "start",
            tuple(argv),
            str(cwd),
            dict(environ) if environ is not None else None,
            merge_stderr=merge_stderr,
            pass_fds=tuple(pass_fds),
        )
        self.calls.append(call)
        script = self._found(argv)
        child = FakeChild(MAX_PID + len(self.started) + 1, script, merge_stderr)
        self.started.append(child)
        return child


class FakeChild:
    """A started program that is not a process: its pid is above any real pid (it names none), its output
    is there at once, and it has exited with its script's code unless it hangs."""

    def __init__(self, pid: int, script: Script, merged: bool) -> None:
        self.pid = pid
        self.script = script
        #: What ended its group, in order: "stop_group" (SIGTERM, a grace, SIGKILL) or "kill_group".
        self.signals: list[str] = []
        out, err = script.stdout.encode(), script.stderr.encode()
        self._out: IO[bytes] = io.BytesIO(out + err if merged else out)
        self._err: IO[bytes] | None = None if merged else io.BytesIO(err)
        self._code = None if script.hangs else script.returncode

    @property
    def stdout(self) -> IO[bytes] | None:
        return self._out

    @property
    def stderr(self) -> IO[bytes] | None:
        return self._err

    @property
    def returncode(self) -> int | None:
        return self._code

    def poll(self) -> int | None:
        return self._code

    def wait(self, timeout: float | None = None) -> int | None:
        if self._code is None and timeout is None:
            raise AssertionError(f"waiting with no time limit for pid {self.pid}, which hangs until its group ends")
        return self._code

    def stop_group(self, grace: float) -> None:
        self.signals.append("stop_group")
        if self._code is None:
            self._code = -signal.SIGTERM

    def kill_group(self) -> None:
        self.signals.append("kill_group")
        if self._code is None:
            self._code = -signal.SIGKILL
