"""The CLI fixture's in-process run gives what ``python -m corral`` gives as a process, and leaves nothing.

Each case runs the same call both ways (``corral`` in the test process, ``corral.process`` as one of
its own) and compares exit code, stdout and stderr byte for byte; then checks that the process-wide
state a command may touch is as it was before the call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI, FakeAgent, Result
from tests.support import inprocess


def both(corral: CLI, *args: str, **kw: object) -> tuple[Result, Result]:
    return corral(*args, **kw), corral.process(*args, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("--help",),
        ("list",),  # the quick path, without click
        ("list", "--json"),
        ("show", "nothing-here"),  # 4, not found
        ("show", "nothing-here", "--json"),
        ("frobnicate",),  # 2, a command that is not one, with suggestions
        ("list", "--no-such-option"),
        ("config",),  # a group without its command: the help, exit 0
        ("comment", "x", "--json"),  # stdin empty: nothing to say
    ],
)
def test_a_call_answers_in_process_exactly_as_a_process(corral: CLI, args: tuple[str, ...]) -> None:
    inside, outside = both(corral, *args)
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)


def test_stdin_bytes_and_the_environment_reach_the_command_as_a_process_gets_them(corral: CLI) -> None:
    corral.ok("create", "Noted", "--ref", "noted")
    raw = b"caf\xe9 \x00 done"  # not UTF-8, and a NUL: read from the pipe and made printable alike
    inside, outside = both(corral, "comment", "noted", "--json", input=raw)
    assert inside.returncode == outside.returncode == 0
    assert inside.json()["comment"]["body"] == outside.json()["comment"]["body"]
    assert "\\u0000" in inside.json()["comment"]["body"]
    env = {"CORRAL_ACTOR": "nobody"}  # not an actor: said the same way
    inside, outside = both(corral, "comment", "noted", "-m", "hello", env=env)
    assert inside.returncode == outside.returncode == 2
    assert inside.stderr == outside.stderr and "CORRAL_ACTOR" in inside.stderr
    assert "CORRAL_ACTOR" not in os.environ


def test_the_working_directory_decides_the_repository_and_is_given_back(corral: CLI, repo: Path) -> None:
    corral.ok("create", "Here", "--ref", "here")
    away = repo.parent / "away"
    away.mkdir()
    before = os.getcwd()
    inside, outside = both(corral, "list", "--json", cwd=away)
    assert inside.returncode == outside.returncode == 2
    assert inside.stdout == outside.stdout
    assert os.getcwd() == before
    assert [t["ref"] for t in corral.json("list", cwd=repo / ".")["tasks"]] == ["here"]


def test_process_wide_state_is_as_it_was_after_a_call(corral: CLI) -> None:
    stdio = (sys.stdin, sys.stdout, sys.stderr, sys.__stdout__)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGPIPE)}
    umask = os.umask(0o022)
    os.umask(umask)
    environ = dict(os.environ)
    argv = list(sys.argv)
    fds = {fd: os.fstat(fd).st_ino for fd in (0, 1, 2)}
    corral("show", "nothing-here", env={"CORRAL_SOMETHING": "1", "TZ": "Asia/Tokyo"})
    corral("--version")
    assert (sys.stdin, sys.stdout, sys.stderr, sys.__stdout__) == stdio
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert os.umask(umask) == umask
    assert dict(os.environ) == environ
    assert sys.argv == argv
    assert {fd: os.fstat(fd).st_ino for fd in (0, 1, 2)} == fds


def test_a_call_past_its_timeout_raises_as_subprocess_run_does(corral: CLI, agent: FakeAgent) -> None:
    agent.script([{"init": True}, {"sleep": 20}, {"result": "done"}])
    corral.ok("create", "Waited", "--ref", "waited")
    corral.ok("start", "waited")
    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(subprocess.TimeoutExpired):
        corral("wait", "waited", "--timeout", "30", timeout=0.5)
    assert signal.getsignal(signal.SIGALRM) is before
    assert corral("--version").returncode == 0  # descriptors and streams are back
    corral.ok("stop", "waited")


def test_a_call_corral_must_start_for_is_refused_in_process_and_runs_as_a_process(corral: CLI) -> None:
    env = {"CORRAL_CRASH_AT": "accept.merging"}  # read when corral is imported: a process's own
    assert inprocess.unfit({**os.environ, **env}) is not None
    with pytest.raises(AssertionError, match=r"corral\.process"):
        corral("create", "Crashless", env=env)
    assert corral.process("create", "Crashless", env=env).returncode == 0
