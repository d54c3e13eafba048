"""The person's terminal during an interactive session: the program owns it while corral waits.

What a person drives by hand (an editor, ``logs -f`` from the board) runs with
:func:`run_interactive`. An agent (``pair``, ``chat``) runs with ``own_terminal``: on a
pseudo-terminal of its own that corral relays to the person's, so it never holds the
person's terminal (:mod:`corral.adapters.ptyrelay`). Otherwise, with a terminal on stdin
whose foreground process group is corral's, the program (called the agent below) gets a
process group of its own and becomes the terminal's foreground group (``tcsetpgrp``, done
in the child before it execs, so it never reads the terminal from the background). The
kernel then sends the keyboard's signals — Ctrl-C (SIGINT), Ctrl-\\ (SIGQUIT), Ctrl-Z
(SIGTSTP) — and window-size changes (SIGWINCH) to the agent alone: corral is never the
target of a keystroke and never kills the agent for one. Claude Code, Codex and Pi use
Ctrl-C to cancel their current action.

While it waits corral ignores SIGINT, SIGQUIT and SIGTSTP (a stray ``kill -INT`` at corral
does not end the session), SIGTTIN and SIGTTOU (it takes the terminal back from the background);
SIGTERM and SIGHUP sent to corral are passed on to the agent, which ends in its own way,
so the session's end is still recorded. The agent starts with the dispositions corral
itself was started with, not corral's waiting ones.

Ctrl-Z: the agent stops; corral takes the terminal back, restores the terminal's
settings, and stops itself (SIGSTOP), so the person's shell sees the job suspended as
with any program. When the shell continues corral (``fg``), corral hands the terminal to
the agent again and continues it (SIGCONT, and a SIGWINCH in case the window changed
meanwhile). Continued in the background (``bg``), corral continues the agent without
the terminal; reading it stops the agent again, and so the job again.

Whatever happens — the agent exits, is killed, cannot start — the terminal's foreground
group and settings are restored to corral's before :func:`run_interactive` returns or
raises.

Without a terminal (stdin is not one, or corral runs in the background of one) nothing
is handed over: the agent shares corral's process group, so whatever signals that group
(a Ctrl-Z or ``fg`` of the job, a supervisor's kill) reaches both; corral still ignores
SIGINT and SIGQUIT while it waits, so a Ctrl-C is the agent's to handle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import termios
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from msgspec import Struct

from corral.adapters.process import check_argv
from corral.adapters.ptyrelay import run_relayed
from corral.domain.exits import signal_name

#: Ignored by corral while the agent runs: the keyboard's signals …
_KEYBOARD = (signal.SIGINT, signal.SIGQUIT)
#: … and, while the agent owns the terminal, job control's (corral does its own, see above).
_JOB_CONTROL = (signal.SIGTSTP, signal.SIGTTOU, signal.SIGTTIN)
_IGNORED = (*_KEYBOARD, *_JOB_CONTROL)
#: Passed on to the agent while it runs: a request to end is the agent's to honour.
_FORWARDED = (signal.SIGTERM, signal.SIGHUP)

_Disposition = Callable[[int, FrameType | None], object] | int | None


class Ended(Struct, frozen=True):
    """How an interactive agent ended: its exit code or the signal that ended it, and how long it ran."""

    exit_code: int | None  # None when a signal ended it
    signal: int | None
    seconds: float
    stops: int = 0  # times it was suspended (Ctrl-Z) and continued
    # Whether it had the person's terminal: its foreground, or (on a terminal of its own) the relay of it.
    terminal: bool = False

    @property
    def status(self) -> int:
        """The status as a shell's ``$?`` gives it: the exit code, or 128 + the signal."""
        if self.exit_code is not None:
            return self.exit_code
        return 128 + (self.signal or 0)

    def describe(self) -> str:
        """E.g. "exited with code 7", "was ended by SIGTERM (signal 15)"."""
        if self.signal is not None:
            return f"was ended by {signal_name(self.signal)} (signal {self.signal})"
        return f"exited with code {self.exit_code}"

    def as_view(self) -> dict[str, object]:
        """How the command ended, as --json gives it: a view (the signal also by name, the seconds rounded)."""
        return {
            "exit_code": self.exit_code,
            "signal": signal_name(self.signal) if self.signal is not None else None,
            "signal_number": self.signal,
            "seconds": round(self.seconds, 3),
            "stops": self.stops,
            "terminal": self.terminal,
        }


def foreground_terminal(fd: int = 0) -> int | None:
    """``fd`` when it is corral's controlling terminal and corral's group is its foreground, else None."""
    try:
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:  # a terminal, but not this session's controlling one
        pass
    return None


def run_interactive(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    tty: int | None = -1,
    started: Callable[[int], None] | None = None,
    own_terminal: bool = False,
) -> Ended:
    """Run ``argv`` for the person at the terminal until it exits; how it ended.

    ``tty`` is the terminal to hand over (the default: stdin when corral is its foreground
    group; None: none). ``started`` is told the agent's pid once it runs (so it can be
    recorded). Raises what :class:`subprocess.Popen` raises when it cannot start
    (FileNotFoundError, PermissionError), with the terminal already restored.

    ``own_terminal``: a program that must never hold the person's terminal (an agent) runs
    on a pseudo-terminal of its own, relayed to the person's (:mod:`corral.adapters.ptyrelay`);
    ``tty`` is then unused.
    """
    check_argv(argv)
    if own_terminal:
        relayed = run_relayed(argv, cwd=cwd, env=env, started=started)
        return Ended(relayed.exit_code, relayed.signal, relayed.seconds, relayed.stops, relayed.terminal)
    if tty == -1:
        tty = foreground_terminal()
    began = time.monotonic()
    with _waiting(tty) as (originals, forward_to):
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            preexec_fn=_child_setup(tty, originals),
            close_fds=True,
        )
        pid = proc.pid
        if tty is not None:
            try:  # the child did it before exec; this closes the window before it ran
                os.setpgid(pid, pid)
            except OSError:
                pass
        forward_to.append(pid)
        if started is not None:
            try:
                started(pid)
            except OSError:
                pass  # recording the pid is a help to recovery; the session goes on without it
        stops = 0
        while True:
            _, status = os.waitpid(pid, os.WUNTRACED if tty is not None else 0)
            if os.WIFSTOPPED(status) and tty is not None:
                stops += 1
                _suspend_with(tty, pid)
                continue
            break
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    seconds = time.monotonic() - began
    if os.WIFSIGNALED(status):
        return Ended(None, os.WTERMSIG(status), seconds, stops, tty is not None)
    return Ended(os.WEXITSTATUS(status), None, seconds, stops, tty is not None)


@contextmanager
def _waiting(tty: int | None) -> Iterator[tuple[dict[int, _Disposition], list[int]]]:
    """corral's dispositions while it waits, and the terminal restored afterwards (also on errors).

    Yields the dispositions corral had (the agent starts with those) and the list that
    receives the agent's pid once it runs (SIGTERM and SIGHUP are passed on to it).
    """
    originals: dict[int, _Disposition] = {sig: signal.getsignal(sig) for sig in (*_IGNORED, *_FORWARDED)}
    forward_to: list[int] = []
    attrs = _attributes(tty)
    own_group = os.getpgrp()

    def forward(signum: int, _frame: FrameType | None) -> None:
        for pid in forward_to:
            _signal_agent(pid, signum, own_group=tty is not None)

    try:
        # Sharing corral's group (no terminal handed over), a stop of the group must stop corral
        # too, or a shell would wait on a job whose agent is stopped and whose corral is not.
        for sig in _IGNORED if tty is not None else _KEYBOARD:
            signal.signal(sig, signal.SIG_IGN)
        for sig in _FORWARDED:
            signal.signal(sig, forward)
        yield originals, forward_to
    finally:
        if tty is not None:
            _give_terminal(tty, own_group)
            _restore_attributes(tty, attrs)
        for signum, disposition in originals.items():
            if disposition is not None:
                signal.signal(signum, disposition)


def _child_setup(tty: int | None, originals: Mapping[int, _Disposition]) -> Callable[[], None]:
    """What the child does between fork and exec: its own group and the terminal, corral's first dispositions."""

    def setup() -> None:
        if tty is not None:
            try:
                os.setpgid(0, 0)
                os.tcsetpgrp(tty, os.getpgrp())  # SIGTTOU is ignored here (inherited)
            except OSError:
                pass  # it runs without the terminal; reading it stops it, which corral handles
        for sig, disposition in originals.items():
            # A Python handler does not survive exec: the agent gets the default for it.
            keep = disposition if disposition in (signal.SIG_IGN, signal.SIG_DFL) else signal.SIG_DFL
            signal.signal(sig, keep)

    return setup


def _suspend_with(tty: int, pid: int) -> None:
    """The agent was stopped (Ctrl-Z): corral stops too, and on being continued continues the agent."""
    attrs = _attributes(tty)
    _give_terminal(tty, os.getpgrp())
    os.kill(os.getpid(), signal.SIGSTOP)  # returns once the shell continues corral
    if foreground_terminal(tty) is not None:
        _restore_attributes(tty, attrs)
        _give_terminal(tty, pid)
    _signal_agent(pid, signal.SIGCONT, own_group=True)
    _signal_agent(pid, signal.SIGWINCH, own_group=True)


def _signal_agent(pid: int, signum: int, *, own_group: bool) -> None:
    try:
        if own_group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _give_terminal(tty: int, pgrp: int) -> None:
    try:
        os.tcsetpgrp(tty, pgrp)  # SIGTTOU is ignored while corral waits, so this works from the background
    except OSError:
        pass  # the group is gone or the terminal hung up: nothing left to give


def _attributes(tty: int | None) -> list[Any] | None:
    if tty is None:
        return None
    try:
        return termios.tcgetattr(tty)
    except termios.error:
        return None


def _restore_attributes(tty: int, attrs: list[Any] | None) -> None:
    """Put back the settings corral saw (an agent killed mid-screen leaves raw mode behind)."""
    if attrs is None:
        return
    try:
        termios.tcsetattr(tty, termios.TCSADRAIN, attrs)
    except termios.error:
        pass
