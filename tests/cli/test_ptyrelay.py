"""The relay an agent's own terminal runs on: input and its end, exit status, the person's terminal on every way out.

Each case runs the real relay (``run_interactive(..., own_terminal=True)``) in a Python
process of its own — under a pseudo-terminal of the test's when it is about the person's
terminal, with stdin a pipe when it is not — and a real agent process.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.cli.test_pair_terminal import cooked, parent, raw, state

#: Runs the relay; prints how the agent ended, or what the relay raised (``raise``: recording the pid fails).
DRIVER = textwrap.dedent(
    """\
    import json, sys
    from corral.adapters.terminal import run_interactive
    def started(pid):
        print(f"AGENT {pid}", file=sys.stderr, flush=True)
        if sys.argv[1] == "raise":
            raise RuntimeError("recording the pid failed")
    try:
        ended = run_interactive(sys.argv[2:], started=started, own_terminal=True)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc, flush=True)
    else:
        print("ENDED", json.dumps(ended.as_view()), flush=True)
    """
)

#: An agent that reads its input to the end, says what it got and on what, and exits 3.
READER = textwrap.dedent(
    """\
    import os, sys
    data = sys.stdin.buffer.read()
    print("got", repr(data), "tty", os.isatty(0), "leader", os.getsid(0) != os.getpid(), flush=True)
    sys.exit(3)
    """
)

#: An agent that says it is up and then waits (a Ctrl-C or a hangup ends it).
WAITER = "import time; print('up', flush=True); time.sleep(60)"


def relay(mode: str, argv: list[str], stdin: bytes) -> tuple[str, str]:
    """The relay run with stdin a pipe; its stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, mode, *argv], input=stdin, capture_output=True, timeout=60, check=True
    )
    return proc.stdout.decode(), proc.stderr.decode()


def ended(out: str) -> dict[str, object]:
    """The relay's report of the agent's end: the driver's last line, which may follow the agent's last
    output on one line (a leader killed mid-line hangs up the terminal, and the kernel drops what the
    agent wrote that the relay had not read yet, its line's end included)."""
    line = out[out.rindex("ENDED ") :].splitlines()[0]
    result: dict[str, object] = json.loads(line.split(" ", 1)[1])
    return result


def test_piped_input_reaches_the_agent_on_its_own_terminal_and_its_end_is_an_end_of_file() -> None:
    out, err = relay("plain", [sys.executable, "-c", READER], b"one\ntwo")
    assert "got b'one\\ntwo' tty True leader True" in out, (out, err)  # the unfinished line too
    assert "one\ntwo" not in out.replace("got b'one\\ntwo'", "")  # not echoed back
    how = ended(out)
    assert how["exit_code"] == 3 and how["signal"] is None and how["terminal"] is False


def test_an_agent_ended_by_a_signal_is_told_as_such() -> None:
    out, err = relay("plain", [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], b"")
    how = ended(out)
    assert how["exit_code"] is None and how["signal_number"] == 15, (out, err)


def test_an_agent_that_cannot_start_raises_what_exec_raised() -> None:
    out, err = relay("plain", ["/nonexistent/agent"], b"")
    assert "RAISED FileNotFoundError" in out and "/nonexistent/agent" in out, (out, err)


class Person:
    """The relay under a pseudo-terminal of the test's: the person's terminal."""

    def __init__(self, mode: str, argv: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.dup2(1, 2)
                os.execv(sys.executable, [sys.executable, "-c", DRIVER, mode, *argv])
            finally:
                os._exit(127)
        self.out = b""

    def read_until(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r} in {self.out!r}"
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 4096)
                assert chunk, self.out
                self.out += chunk
        return self.out.decode("utf-8", "replace")

    def close(self) -> int:
        """The driver's exit status, once it has exited (the terminal's end first, or it would hang up)."""
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # EIO: the driver, and all it started, closed the terminal
                break
            if not chunk:
                break
            self.out += chunk
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def agent_pid(out: str) -> int:
    return int(out.split("AGENT ")[1].split()[0])


def test_ctrl_c_ends_an_agent_that_does_not_catch_it_and_the_terminal_is_given_back() -> None:
    person = Person("plain", [sys.executable, "-c", WAITER])
    out = person.read_until("up")
    assert raw(person.fd)  # relayed: the keys go through as bytes
    os.write(person.fd, b"\x03")  # Ctrl-C: a byte here, SIGINT on the agent's terminal
    out = person.read_until("ENDED ")
    person.read_until("}")
    how = ended(person.out.decode())
    assert how["signal_number"] == 2 and how["terminal"] is True, out
    assert cooked(person.fd)
    assert person.close() == 0


def test_an_exception_in_the_relay_gives_the_terminal_back_and_ends_the_agent() -> None:
    person = Person("raise", [sys.executable, "-c", WAITER])
    out = person.read_until("RAISED ")
    out = person.read_until("failed")
    assert "RAISED RuntimeError recording the pid failed" in out
    assert cooked(person.fd)  # the person's terminal as it was …
    agent = agent_pid(out)
    deadline = time.monotonic() + 10
    while state(agent) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state(agent) in ("", "Z")  # … and the agent hung up with its terminal
    assert person.close() == 0


def test_the_agents_terminal_starts_as_the_persons_and_never_is_it(tmp_path: Path) -> None:
    report = tmp_path / "report"
    agent = (
        "import os, termios, json, sys; a = termios.tcgetattr(0); "
        f"open({str(report)!r}, 'w').write(json.dumps([os.ttyname(0), os.getsid(0) == os.getppid(), "
        "a[3] & termios.ICANON != 0, a[6][termios.VINTR] == b'\\x03']))"
    )
    person = Person("plain", [sys.executable, "-c", agent])
    theirs = os.readlink(f"/proc/{person.pid}/fd/0")
    person.read_until("ENDED ")
    person.read_until("}")
    name, led, canonical, interrupt = json.loads(report.read_text())
    assert name != theirs and name.startswith("/dev/pts/")  # a terminal of its own …
    assert led  # … whose session is led by its parent (the leader), not the person's shell's
    assert canonical and interrupt  # set up as the person's was (cooked, Ctrl-C its interrupt)
    assert ended(person.out.decode())["exit_code"] == 0
    assert cooked(person.fd)
    assert person.close() == 0


def test_a_killed_leader_ends_the_relay_and_the_agent_it_left() -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    person = Person("plain", [sys.executable, "-c", stubborn])
    out = person.read_until("up")
    agent = agent_pid(out)
    os.kill(parent(agent), signal.SIGKILL)  # the session leader, and with it the agent's terminal's session
    person.read_until("ENDED ")
    person.read_until("}")
    assert ended(person.out.decode())["signal_number"] == 9  # the leader's end is all there is to tell
    assert state(agent) in ("", "Z")  # the agent, deaf to the hangup, was stopped all the same
    assert cooked(person.fd)
    assert person.close() == 0
