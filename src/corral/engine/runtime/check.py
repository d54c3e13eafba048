"""The post-turn check: a command run in the worktree after the work phase, bounded in time and output."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.adapters.process import spawn_shell, stop_child_group
from corral.domain.redact import bounded, redact
from corral.engine.runtime import protocol as proto

#: Lines of the check's output kept in the receipt, and at most this many bytes of them.
CHECK_TAIL_LINES = 200
CHECK_TAIL_BYTES = 64 * 1024
#: How much of the check's output is looked at (its end): a check that prints gigabytes stays bounded.
CHECK_WINDOW_BYTES = 256 * 1024


def run_check(spec: proto.CheckSpec, worktree: Path, secrets: list[str], term_grace: float) -> proto.CheckResult | None:
    if not spec.command:
        return None
    proc = spawn_shell(spec.command, cwd=worktree)
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=spec.timeout_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_child_group(proc, term_grace)
        output, _ = proc.communicate()
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
    )
