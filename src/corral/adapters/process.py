"""Running external programs: one injectable runner, and the argv guard behind sanitizing.

Everything corral executes goes through a ``Runner``, so tests can record or
replace it, and every argv passes :func:`check_argv` first: a NUL byte in an
argument would otherwise surface as Python's opaque "embedded null byte".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from corral.errors import ArgvError


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
