"""How a process ended, in plain words: an exit code or a signal, as a person reads it in a reason or a log."""

from __future__ import annotations

import signal as _signal


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_reason(exit_code: int | None, signum: int | None = None) -> str:
    """The plain reason for a process end, e.g. "OOM killed or SIGKILL (exit code 137)"."""
    if signum is None and exit_code is not None and exit_code > 128:
        signum = exit_code - 128
    if signum is not None:
        code = exit_code if exit_code is not None else 128 + signum
        if signum == _signal.SIGKILL:
            return f"OOM killed or SIGKILL (exit code {code})"
        return f"killed by {signal_name(signum)} (exit code {code})"
    if exit_code is None:
        return "the process ended with no exit status"
    if exit_code == 127:
        return "command not found (exit code 127)"
    return f"exited with code {exit_code}"
