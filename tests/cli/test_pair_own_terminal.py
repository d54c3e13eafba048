"""`pair` and `chat` give the agent a terminal of its own: nothing inside can type into the person's shell.

The person's terminal is a pseudo-terminal of the test's own. On it a shell runs
`corral pair` (or `chat`), then — as the person's shell does once the session ends — reads
its next commands from that terminal. The agent, confined or not, tries ``TIOCSTI`` (which
pushes bytes into a terminal's input as if typed) with ``echo PWNED > marker`` on every
descriptor it holds and on ``/dev/tty``, then exits. Afterwards the person's terminal holds
no pending input and the marker never appears, while the shell still runs what the person
types.
"""

from __future__ import annotations

import os
import select
import shlex
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli.test_pair_terminal import Pty
from tests.conftest import CLI

pytestmark = pytest.mark.slow  # `start` and a session through the real CLI, some confined: several seconds

#: The harness's program: the start turn exits at once; in a pair or a chat it tries to type a
#: command into whichever terminal it can reach, then exits.
INJECTOR = textwrap.dedent(
    """\
    #!{python}
    import fcntl, os, sys, termios
    if os.environ.get("CORRAL_TURN_KIND") not in ("pair", "chat"):
        sys.exit(0)
    line = {line!r}
    fds = [0, 1, 2]
    try:
        fds.append(os.open("/dev/tty", os.O_RDWR))
    except OSError as exc:
        print("no /dev/tty:", exc.strerror, flush=True)
    for fd in fds:
        typed = 0
        for byte in line:
            try:
                fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
            except OSError as exc:
                print(f"fd {{fd}}: {{exc.strerror}}", flush=True)
                break
            typed += 1
        print(f"typed fd={{fd}} bytes={{typed}}", flush=True)
    print("tried every descriptor", flush=True)
    """
)

#: Run by the shell after corral: how many bytes wait in the terminal's input (a complete line counts).
PENDING = (
    "import fcntl, struct, termios; print('PENDING', struct.unpack('i', fcntl.ioctl(0, termios.FIONREAD, bytes(4)))[0])"
)


def tiocsti_allowed() -> bool:
    """Whether this kernel lets a process type into its controlling terminal (``dev.tty.legacy_tiocsti``)."""
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "1"
    except OSError:  # a kernel older than the switch: it always lets it
        return True


def line_after(session: Pty, prefix: str, timeout: float = 60) -> str:
    """What the terminal showed up to the end of the line that starts with ``prefix``."""
    deadline = time.monotonic() + timeout
    out = session.read_until(prefix, timeout)
    while "\n" not in out.split(prefix, 1)[1]:
        left = deadline - time.monotonic()
        assert left > 0, f"no end of line after {prefix!r} in {out!r}"
        ready, _, _ = select.select([session.fd], [], [], left)
        if ready:
            chunk = os.read(session.fd, 4096)
            assert chunk, out
            session.out += chunk
            out = session.out.decode("utf-8", "replace")
    return out


@pytest.mark.parametrize(
    ("command", "sandbox"),
    [("pair", "bwrap"), ("pair", "off"), ("chat", "bwrap")],
    ids=["pair", "pair-unconfined", "chat"],
)
def test_an_agent_typing_into_its_terminal_never_reaches_the_persons_shell(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, sandbox: str
) -> None:
    marker = tmp_path / "marker"
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir()
    script = bin_dir / "injector"
    line = f"echo PWNED > {marker}\n".encode()
    script.write_text(INJECTOR.format(python=sys.executable, line=line))
    script.chmod(0o755)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", str(script))
    monkeypatch.setenv("CORRAL_SANDBOX", sandbox)
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Type into the person's shell", "--ref", "ti")
    corral.ok("start", "ti", "--wait", "--timeout", "60")
    assert corral.json("show", "ti")["task"]["status"] == "blocked"

    done = tmp_path / "done"
    session_cmd = shlex.join([sys.executable, "-m", "corral", command, "ti"])
    pending = shlex.join([sys.executable, "-c", PENDING])
    # The person's shell: corral in the foreground, then whatever the terminal holds is read as commands.
    shell = f'{session_cmd}; echo "CORRAL-EXIT $?"; {pending}; exec sh'
    session = Pty(["sh", "-c", shell], repo)
    out = line_after(session, "PENDING ")
    assert "tried every descriptor" in out, out  # the attempt was made …
    if tiocsti_allowed():  # … and the kernel let it type: into the agent's own terminal
        assert f"typed fd=0 bytes={len(line)}" in out, out
    assert "CORRAL-EXIT 0" in out, out
    waiting = int(out.split("PENDING ")[1].split()[0])  # bytes in the person's terminal's input

    session.write(f"echo typed by the person > {done}\n".encode())  # the shell still reads the person
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.read_text() == "typed by the person\n"
    assert not marker.exists(), session.out  # the shell ran nothing the agent typed …
    assert waiting == 0, out  # … because nothing it typed ever reached the person's terminal
    session.write(b"exit\n")
    assert session.finish() == 0, session.out
