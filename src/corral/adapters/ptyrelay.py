"""An interactive agent on a terminal of its own, relayed to the person's.

``pair`` and ``chat`` run an agent that may be hostile (it runs the agent's model, and
reads what a confined turn wrote). Given the person's terminal, a process can type into it
(``TIOCSTI`` pushes bytes into a terminal's input as if typed, and many kernels allow it
on one's controlling terminal): whatever it typed would run in the person's shell once the
session ends. So the agent never gets the person's terminal, not even as its controlling
terminal: :func:`run_relayed` allocates a fresh pseudo-terminal, starts the agent in a
session of its own whose controlling terminal is that pseudo-terminal (through the small
session leader :mod:`corral.adapters.ptyleader`), and copies bytes between the two
terminals. What the agent types into its terminal reaches only itself.

The person's side:

- With stdin a terminal that corral is the foreground of, that terminal is put in raw mode
  (every key goes through as a byte; the agent's terminal, set up as the person's was,
  turns Ctrl-C, Ctrl-\\ and Ctrl-Z into signals for the agent's foreground group: corral
  is never the target of a keystroke). Its settings are restored on every way out — the
  agent exits or is killed, it cannot start, an exception — and while the job is suspended.
- Window-size changes (SIGWINCH at corral) are copied onto the agent's terminal, whose
  kernel signals the agent.
- Without a terminal on stdin (a pipe, a file, /dev/null, or corral in the background of a
  terminal), the agent still runs on its own terminal: what stdin carries is passed on
  (not echoed) and its end becomes the terminal's end of file (``VEOF``, as Ctrl-D would).
- SIGINT, SIGQUIT and SIGTSTP that reach corral (the keyboard of a terminal that is not
  stdin, or a ``kill``) are passed to the agent's foreground group; SIGTERM and SIGHUP to the
  agent's process group, which ends in its own way so the session's end is still recorded.
- The agent stopped (Ctrl-Z): corral restores the person's terminal and stops itself
  (SIGSTOP), so the shell sees the job suspended; continued, it takes raw mode back when it is
  the foreground again and continues the agent (SIGCONT, then SIGWINCH to redraw). Continued
  in the background, the agent runs and its output is shown; the person's keys reach it once
  corral is brought to the foreground.

How the agent ended (its exit code or signal) comes back as :class:`Relayed`, which
:func:`corral.adapters.terminal.run_interactive` (the way in) turns into its ``Ended``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import tty
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from msgspec import Struct

from corral.adapters.pid_identity import Identity, start_ticks, stop_identified
from corral.adapters.process import check_argv

# Whose first disposition the agent starts with (ignored stays ignored): the leader's own list, one home.
from corral.adapters.ptyleader import INHERITED
from corral.errors import CorralError

#: The session leader, run by path with ``python -I -S`` (see its docstring).
LEADER = Path(__file__).with_name("ptyleader.py")
#: Signals corral handles while the agent runs (each is passed on, or acted upon, by the relay loop).
HANDLED = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTSTP,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGWINCH,
    signal.SIGCONT,
)
#: Ignored while it runs: corral reads and sets its terminal only as its foreground, and restores it from anywhere.
IGNORED = (signal.SIGTTIN, signal.SIGTTOU)
#: The agent's window when the person has no terminal to take it from.
DEFAULT_SIZE = (24, 80)
#: What the relay holds of the person's input the agent has not read yet (more waits in stdin).
INPUT_HELD = 1 << 16
#: How long an agent gets between a hangup (or SIGTERM) and SIGKILL when corral or its leader leaves early.
END_GRACE = 2.0

_Disposition = Callable[[int, FrameType | None], Any] | int | None


class Relayed(Struct, frozen=True):
    """How a relayed agent ended: its exit code or the signal that ended it, how long it ran, how often it stopped."""

    exit_code: int | None  # None when a signal ended it
    signal: int | None
    seconds: float
    stops: int
    terminal: bool  # whether the person's terminal was relayed (stdin was corral's controlling terminal)


def run_relayed(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    started: Callable[[int], None] | None = None,
) -> Relayed:
    """Run ``argv`` on a pseudo-terminal of its own, relayed to the person's, until it exits; how it ended.

    ``started`` is told the agent's pid once it runs (so it can be recorded; its process
    group is its own). Raises what :func:`os.execvp` raises when the agent cannot start
    (FileNotFoundError, PermissionError), with the person's terminal already restored.
    """
    check_argv(argv)
    for stream in (sys.stdout, sys.stderr):  # what corral printed comes before the agent's screen
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    relay = _Relay(started)
    try:
        return relay.run(list(argv), cwd, env)
    finally:
        relay.close()


class _Relay:
    """One session: the person's side (fd 0 in, fd 1 out), the agent's terminal (``master``), the leader."""

    def __init__(self, started: Callable[[int], None] | None) -> None:
        self.started = started
        self.person = _person_terminal()  # fd 0 when it is corral's controlling terminal
        self.saved: list[Any] | None = None  # the person's settings while raw mode is on
        self.master = -1
        self.leader: subprocess.Popen[bytes] | None = None
        self.reports = -1
        self.wakeup = (-1, -1)
        self.previous_wakeup = -1
        self.dispositions: dict[int, _Disposition] = {}
        self.agent = 0
        self.agent_identity: Identity | None = None
        self.status: int | None = None  # the agent's wait status
        self.failure: int | None = None  # the errno the agent could not start with
        self.unusable: int | None = None  # the errno its terminal could not be made controlling with
        self.stops = 0
        self.input = bytearray()
        self.stdin_open = _usable(0)
        self.eof_owed = False
        self.output_open = True
        self.last_input = b"\n"

    # -- the session ------------------------------------------------------------------------

    def run(self, argv: list[str], cwd: str | None, env: Mapping[str, str] | None) -> Relayed:
        began = time.monotonic()
        ignored = [sig for sig in INHERITED if signal.getsignal(sig) == signal.SIG_IGN]
        try:
            self.master, slave = os.openpty()
        except OSError as exc:
            raise _unavailable(exc) from exc
        reports_w = -1
        try:
            os.set_blocking(self.master, False)
            self._set_up_agent_terminal(slave)
            self._catch_signals()
            self.reports, reports_w = os.pipe()
            leader = [sys.executable, "-I", "-S", str(LEADER), str(reports_w), ",".join(str(int(s)) for s in ignored)]
            self.leader = subprocess.Popen(
                [*leader, "--", *argv],
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                pass_fds=(reports_w,),
            )
        finally:
            os.close(slave)
            if reports_w >= 0:
                os.close(reports_w)
        self._take_terminal()
        self._loop()
        self._drain()
        code = self.leader.wait()
        self.leader = None
        seconds = time.monotonic() - began
        if self.unusable is not None:
            raise _unavailable(OSError(self.unusable, os.strerror(self.unusable)))
        if self.failure is not None:
            raise OSError(self.failure, os.strerror(self.failure), argv[0])
        terminal = self.person is not None
        if self.status is None:  # the leader was killed before it could tell: its own end is all there is
            if self.agent_identity is not None:  # and an agent it started may run on, with no terminal left
                stop_identified(self.agent_identity, END_GRACE)
            if code < 0:
                return Relayed(None, -code, seconds, self.stops, terminal)
            return Relayed(code, None, seconds, self.stops, terminal)
        if os.WIFSIGNALED(self.status):
            return Relayed(None, os.WTERMSIG(self.status), seconds, self.stops, terminal)
        return Relayed(os.WEXITSTATUS(self.status), None, seconds, self.stops, terminal)

    def _loop(self) -> None:
        """Relay until the leader closes its report pipe (it has exited)."""
        reports = b""
        while True:
            readers = [self.reports, self.wakeup[0]]
            if self.master >= 0:
                readers.append(self.master)
            if self._reading_stdin():
                readers.append(0)
            writers = [self.master] if self.master >= 0 and (self.input or self.eof_owed) else []
            ready, writable, _ = select.select(readers, writers, [])
            if self.wakeup[0] in ready:
                self._signals()
            if self.master in ready:
                self._from_agent()
            if 0 in ready:
                self._from_person()
            if self.master in writable:
                self._to_agent()
            if self.reports in ready:
                chunk = os.read(self.reports, 4096)
                if not chunk:
                    return
                reports += chunk
                while b"\n" in reports:
                    line, reports = reports.split(b"\n", 1)
                    self._report(line.decode("ascii", "replace").split())

    def _report(self, words: list[str]) -> None:
        if len(words) != 2 or not words[1].isdigit():
            return
        what, number = words[0], int(words[1])
        if what == "started":
            self.agent = number
            start = start_ticks(number)
            self.agent_identity = Identity(number, start=start) if start is not None else None
            if self.started is not None:
                try:
                    self.started(number)
                except OSError:
                    pass  # recording the pid is a help to recovery; the session goes on without it
        elif what == "failed":
            self.failure = number or errno.EIO
        elif what == "terminal":
            self.unusable = number or errno.EIO
        elif what == "stopped":
            self._suspend()
        elif what == "ended":
            self.status = number

    # -- the person's terminal ----------------------------------------------------------------

    def _foreground(self) -> bool:
        if self.person is None:
            return False
        try:
            return os.tcgetpgrp(self.person) == os.getpgrp()
        except OSError:
            return False

    def _take_terminal(self) -> None:
        """Raw mode on the person's terminal, when corral is its foreground (again)."""
        if self.person is None or not self._foreground():
            return
        try:
            if self.saved is None:
                self.saved = termios.tcgetattr(self.person)
            tty.setraw(self.person, termios.TCSADRAIN)
        except termios.error:
            pass
        self._copy_size()

    def _give_terminal_back(self) -> None:
        """The person's settings as corral found them (SIGTTOU is ignored: this works from the background too)."""
        if self.person is None or self.saved is None:
            return
        try:
            termios.tcsetattr(self.person, termios.TCSADRAIN, self.saved)
        except termios.error:
            pass
        self.saved = None

    def _reading_stdin(self) -> bool:
        if not self.stdin_open or len(self.input) >= INPUT_HELD or self.eof_owed:
            return False
        return self.person is None or self.saved is not None  # a terminal: only while it is ours, in raw mode

    def _from_person(self) -> None:
        try:
            data = os.read(0, 4096)
        except OSError:  # EIO: the terminal hung up (its SIGHUP is on its way)
            data = b""
        if not data:
            self.stdin_open = False
            self.eof_owed = self.person is None  # a hung-up terminal has no end of file to pass on
            return
        self.input += data

    def _to_person(self, data: bytes) -> None:
        view = memoryview(data)
        while view and self.output_open:
            try:
                view = view[os.write(1, view) :]
            except BlockingIOError:
                select.select([], [1], [])
            except OSError:  # the person's side is gone: the agent's output goes nowhere, the agent goes on
                self.output_open = False

    # -- the agent's terminal -----------------------------------------------------------------

    def _set_up_agent_terminal(self, slave: int) -> None:
        """The agent's terminal starts as the person's was (or, without one, as a terminal that echoes nothing)."""
        source = self.person if self.person is not None else None
        try:
            if source is not None:
                termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(source))
            else:
                attrs = termios.tcgetattr(slave)
                attrs[3] &= ~(termios.ECHO | termios.ECHONL)  # piped input is not typed: nothing to echo
                if not os.isatty(1):
                    attrs[1] &= ~termios.OPOST  # the agent's lines reach a file or a pipe as it wrote them
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
        except termios.error:
            pass
        self._copy_size(default=True)

    def _copy_size(self, default: bool = False) -> None:
        size = None
        for fd in (0, 1, 2):
            if os.isatty(fd):
                try:
                    size = fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8))
                    break
                except OSError:
                    continue
        if size is None or struct.unpack("HHHH", size)[:2] == (0, 0):
            if not default:
                return
            size = struct.pack("HHHH", *DEFAULT_SIZE, 0, 0)
        try:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)  # its kernel signals SIGWINCH to the agent
        except OSError:
            pass

    def _from_agent(self) -> None:
        try:
            data = os.read(self.master, 1 << 16)
        except BlockingIOError:
            return
        except OSError:  # EIO: nothing holds the agent's terminal any more
            data = b""
        if not data:
            os.close(self.master)
            self.master = -1
            return
        self._to_person(data)

    def _to_agent(self) -> None:
        if self.input:
            try:
                written = os.write(self.master, self.input)
            except BlockingIOError:
                return
            except OSError:
                self.input.clear()
                return
            self.last_input = bytes(self.input[written - 1 : written]) if written else self.last_input
            del self.input[:written]
            return
        if self.eof_owed:
            self.eof_owed = False
            try:
                attrs = termios.tcgetattr(self.master)
                if attrs[3] & termios.ICANON:
                    eof = attrs[6][termios.VEOF]
                    # An unfinished line takes one VEOF to be read; the next is the end of file.
                    os.write(self.master, eof if self.last_input == b"\n" else eof + eof)
            except (OSError, termios.error):
                pass

    def _drain(self) -> None:
        """What the agent wrote before it ended, up to what its terminal holds now."""
        while self.master >= 0:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:  # EAGAIN: a process it left holds the terminal open; EIO: nothing does
                break
            if not data:
                break
            self._to_person(data)

    # -- signals and job control -----------------------------------------------------------------

    def _catch_signals(self) -> None:
        self.wakeup = os.pipe()
        for fd in self.wakeup:
            os.set_blocking(fd, False)
        self.previous_wakeup = signal.set_wakeup_fd(self.wakeup[1], warn_on_full_buffer=False)
        for sig in (*HANDLED, *IGNORED):
            self.dispositions[sig] = signal.getsignal(sig)
        for sig in HANDLED:
            signal.signal(sig, _noted)  # the wakeup pipe carries the signal's number to the loop
        for sig in IGNORED:
            signal.signal(sig, signal.SIG_IGN)

    def _signals(self) -> None:
        try:
            numbers = os.read(self.wakeup[0], 256)
        except BlockingIOError:
            return
        for signum in numbers:
            if signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
                self._signal_foreground(signum)
            elif signum in (signal.SIGTERM, signal.SIGHUP):
                self._signal_agent(signum)
            elif signum == signal.SIGWINCH:
                self._copy_size()
            elif signum == signal.SIGCONT:  # `fg` or `bg` after a stop from outside: whose terminal is it now?
                if self._foreground():
                    self._take_terminal()
                else:
                    self._give_terminal_back()

    def _signal_foreground(self, signum: int) -> None:
        """A keyboard signal at corral: for the agent's terminal's foreground group, as if typed there."""
        try:
            group = os.tcgetpgrp(self.master) if self.master >= 0 else self.agent
        except OSError:
            group = self.agent
        if group > 1:
            _killpg(group, signum)

    def _signal_agent(self, signum: int) -> None:
        if self.agent > 1:
            _killpg(self.agent, signum)

    def _suspend(self) -> None:
        """The agent stopped: the person's terminal back, corral stops; continued, the agent continues."""
        self.stops += 1
        self._drain()
        self._give_terminal_back()
        os.kill(os.getpid(), signal.SIGSTOP)  # returns once the shell continues corral
        self._take_terminal()
        if self.agent > 1:
            _killpg(self.agent, signal.SIGCONT)
            _killpg(self.agent, signal.SIGWINCH)

    # -- the way out ------------------------------------------------------------------------------

    def close(self) -> None:
        """Every way out: the person's terminal and corral's signals as they were, the agent ended, fds closed."""
        self._give_terminal_back()
        for sig, disposition in self.dispositions.items():
            if disposition is not None:
                signal.signal(sig, disposition)
        if self.wakeup[1] >= 0:
            signal.set_wakeup_fd(self.previous_wakeup)
        if self.leader is not None:
            self._end_leader(self.leader)
        for fd in (self.master, self.reports, *self.wakeup):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.master = self.reports = -1
        self.wakeup = (-1, -1)

    def _end_leader(self, leader: subprocess.Popen[bytes]) -> None:
        """corral leaves on an error while the agent runs: hang its terminal up, then kill what is left."""
        if self.agent > 1:
            _killpg(self.agent, signal.SIGHUP)
        if self.master >= 0:
            os.close(self.master)  # the hangup reaches everything on the agent's terminal
            self.master = -1
        try:
            leader.wait(END_GRACE)
        except subprocess.TimeoutExpired:
            if self.agent > 1:
                _killpg(self.agent, signal.SIGKILL)
            leader.kill()
            leader.wait()
        self.leader = None


def _noted(_signum: int, _frame: FrameType | None) -> None:
    """The handler for :data:`HANDLED`: the wakeup pipe already carries the number."""


def _killpg(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except OSError:
        pass


def _person_terminal() -> int | None:
    """0 when stdin is corral's controlling terminal (in the foreground or not), else None."""
    try:
        if os.isatty(0):
            os.tcgetpgrp(0)
            return 0
    except OSError:  # a terminal, but not this session's controlling one
        pass
    return None


def _usable(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:  # closed: nothing to read
        return False
    return True


def _unavailable(exc: OSError) -> CorralError:
    """The agent's terminal could not be made (no pseudo-terminal left, no session leader)."""
    return CorralError(
        f"corral could not give the agent a terminal of its own: {exc.strerror or exc}.",
        code="terminal-unavailable",
        hint="Check that /dev/ptmx is usable (ls -l /dev/ptmx; mount | grep devpts), then try again.",
    )
