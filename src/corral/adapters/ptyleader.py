"""The session leader of an agent's own terminal: run as a script by :mod:`corral.adapters.ptyrelay`.

corral starts it in a new session (``setsid``) with the slave of a fresh pseudo-terminal as
its stdin, stdout and stderr, and runs it with ``python -I -S`` by its path: it imports
nothing but the standard library, so nothing of the project, the environment or the agent's
worktree is read before the agent starts. It:

1. makes the slave its session's controlling terminal (``TIOCSCTTY``), so the agent, its
   children and ``/dev/tty`` inside all name that terminal and never the person's;
2. starts the agent in a process group of its own and makes that group the terminal's
   foreground, with the dispositions corral was started with (those it ignored stay ignored);
3. stays the agent's parent for as long as the agent lives. A session leader's own group is
   orphaned (its parent, corral, is in another session), and the kernel discards a
   keyboard stop (SIGTSTP) sent to an orphaned group: with this process as its parent in
   the same session, the agent's group is not orphaned, and Ctrl-Z stops it as under a shell;
4. tells corral on the report pipe, one line each: ``started <pid>``, ``failed <errno>`` (the
   agent could not be executed), ``terminal <errno>`` (the terminal could not be made
   controlling), ``stopped <signal>`` and ``ended <wait status>``.

SIGTERM and SIGHUP sent to it (a hangup when corral's end of the terminal closes) are passed on
to the agent's group, which ends in its own way; it exits with the agent's status (128 + the
signal when a signal ended it).

Usage: ``ptyleader.py <report fd> <ignored signals, comma-separated> -- <argv …>``.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import termios

#: Set to what the agent starts with: the default, or ignored when corral was started ignoring it.
INHERITED = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGTERM,
    signal.SIGHUP,
)
#: Always the default for the agent (Python ignores SIGPIPE and SIGXFSZ for itself).
DEFAULTED = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGWINCH, signal.SIGCHLD)
#: Passed on to the agent's process group.
FORWARDED = (signal.SIGTERM, signal.SIGHUP)

_agent = 0


def _report(fd: int, line: str) -> None:
    try:
        os.write(fd, f"{line}\n".encode())
    except OSError:
        pass  # corral is gone: the agent runs on, and the stale-pairing sweep ends it by its pid


def _forward(signum: int, _frame: object) -> None:
    if _agent:
        try:
            os.killpg(_agent, signum)
        except OSError:
            pass


def main(args: list[str]) -> int:
    global _agent
    if len(args) < 4 or args[2] != "--":
        os.write(2, b"usage: ptyleader.py <report fd> <ignored signals> -- <argv ...>\n")
        return 2
    report = int(args[0])
    ignored = {int(sig) for sig in args[1].split(",") if sig}
    program = args[3:]
    os.set_inheritable(report, False)
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)  # the terminal's signals are the agent's; tcsetpgrp from here works
    for sig in FORWARDED:
        signal.signal(sig, _forward)
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    except OSError as exc:
        _report(report, f"terminal {exc.errno or 0}")
        return 126
    failures_r, failures_w = os.pipe()  # not inherited: closed by a successful exec
    pid = os.fork()
    if pid == 0:
        try:
            os.close(failures_r)
            os.setpgid(0, 0)
            os.tcsetpgrp(0, os.getpid())  # SIGTTOU is still ignored here
            for sig in INHERITED:
                signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)
            for sig in DEFAULTED:
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(program[0], program)
        except OSError as exc:
            os.write(failures_w, str(exc.errno or 0).encode())
        finally:
            os._exit(127)
    os.close(failures_w)
    try:  # as the child did, so no window is left open whichever runs first
        os.setpgid(pid, pid)
    except OSError:
        pass  # it has run exec already (and set its group before)
    try:
        os.tcsetpgrp(0, pid)
    except OSError:
        pass
    failure = b""
    while chunk := os.read(failures_r, 64):
        failure += chunk
    os.close(failures_r)
    if failure:
        os.waitpid(pid, 0)
        _report(report, f"failed {int(failure)}")
        return 127
    _agent = pid
    _report(report, f"started {pid}")
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if os.WIFSTOPPED(status):
            _report(report, f"stopped {os.WSTOPSIG(status)}")
            continue
        break
    _agent = 0
    _report(report, f"ended {status}")
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
