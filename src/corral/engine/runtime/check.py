"""The post-turn check: a command run in the worktree after the work phase, bounded in time and output."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.adapters.process import spawn_shell, stop_child_group
from corral.domain.redact import redact
from corral.engine.runtime import protocol as proto

#: Lines of the check's output kept in the receipt.
CHECK_TAIL_LINES = 200


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
    lines = output.decode("utf-8", "replace").splitlines()[-CHECK_TAIL_LINES:]
    return proto.CheckResult(
        command=spec.command,
        exit_code=proc.returncode,
        timed_out=timed_out,
        timeout=spec.timeout_seconds,
        tail=redact("\n".join(lines), secrets),
    )
