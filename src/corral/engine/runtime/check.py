"""The post-turn check: a command run in the worktree after the work phase, bounded in time and output."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from corral.adapters.process import Runner, SubprocessRunner
from corral.domain.redact import bounded, redact
from corral.engine.runtime import protocol as proto

#: Lines of the check's output kept in the receipt, and at most this many bytes of them.
CHECK_TAIL_LINES = 200
CHECK_TAIL_BYTES = 64 * 1024
#: How much of the check's output is looked at (its end): a check that prints gigabytes stays bounded.
CHECK_WINDOW_BYTES = 256 * 1024
#: How long the output is read once the check's shell has exited (a background child may hold it).
DRAIN_SECONDS = 2.0


def _drain(stream: IO[bytes], chunks: list[bytes]) -> None:
    """Read the check's output to its end, keeping only the last window of it."""
    kept = 0
    while chunk := stream.read1(64 * 1024):  # type: ignore[attr-defined]
        chunks.append(chunk)
        kept += len(chunk)
        while kept - len(chunks[0]) > CHECK_WINDOW_BYTES:
            kept -= len(chunks.pop(0))


def run_check(
    spec: proto.CheckSpec,
    worktree: Path,
    secrets: list[str],
    term_grace: float,
    confine: Callable[[list[str]], tuple[list[str], dict[str, str]] | None] | None = None,
    runner: Runner | None = None,
) -> proto.CheckResult | None:
    """Run the check; ``confine`` wraps its argv in the turn's sandbox (None: no sandbox for this turn).
    ``runner`` starts it (the real one unless a test gives its own: the supervisor holds no project).

    The check runs the agent's code (a Makefile, a conftest.py, a package.json script), so it runs
    where the agent ran: inside the turn's sandbox, before corral verifies the turn's objects and
    refs (it can write the same things). Unconfined only where the person chose it for the
    repository (``post_turn_check_unconfined``, a user-only setting), and then said so.
    """
    if not spec.command:
        return None
    runner = runner or SubprocessRunner()
    shell = ["/bin/sh", "-c", spec.command]
    wrapped = confine(shell) if confine is not None and not spec.unconfined else None
    if wrapped is not None:
        argv, env = wrapped
        proc = runner.start(argv, cwd=worktree, environ=env, merge_stderr=True)
        where = "bwrap"
    else:
        proc = runner.start(shell, cwd=worktree, merge_stderr=True)
        where = "unconfined"
    chunks: list[bytes] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=_drain, args=(proc.stdout, chunks), daemon=True)
    reader.start()
    timed_out = proc.wait(timeout=spec.timeout_seconds) is None
    # The check's shell is done (or out of time): a background child it left holding the output
    # must not hold the turn. Read what is left within a short bound, then end the whole group.
    reader.join(DRAIN_SECONDS if not timed_out else 0)
    proc.stop_group(term_grace)
    proc.wait()
    reader.join(DRAIN_SECONDS)
    output = b"".join(chunks)
    window = output[-CHECK_WINDOW_BYTES:]
    lines = window.decode("utf-8", "replace").splitlines()
    if len(window) < len(output) and lines:
        lines = lines[1:]  # cut by the window: a secret split there must not survive half masked
    return proto.CheckResult(
        command=redact(spec.command, secrets),  # the user's own line, yet it may carry a token
        exit_code=proc.returncode,
        timed_out=timed_out,
        timeout=spec.timeout_seconds,
        tail=bounded(redact("\n".join(lines[-CHECK_TAIL_LINES:]), secrets), CHECK_TAIL_BYTES),
        confinement=where,
    )
