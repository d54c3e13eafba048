"""`corral pair` under a real pseudo-terminal: the agent runs on a terminal of its own, relayed to the person's.

The real CLI runs as a child whose controlling terminal is the pty's slave (``pty.fork``
makes it a session leader with the slave as its terminal, as a login shell would be); the
agent is the `command` harness running a Python script that reports what it receives.
Keystrokes are written to the pty's master: corral relays them (the person's terminal in
raw mode) to the agent's own terminal, whose line discipline turns them into signals for
the agent's foreground process group. Signals that reach corral through the person's
terminal (when stdin is not that terminal) are passed on the same way.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import sys
import termios
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.engine.project import Project
from corral.engine.recovery.chats import sweep_stale_chats
from tests.conftest import CLI, git

pytestmark = pytest.mark.slow  # each drives `start` and a session through the real CLI: several seconds

#: The agent: its first run (the start turn) exits at once; later runs (the pair) report
#: their signals and terminal, then run until told "exit N" on a line.
AGENT = textwrap.dedent(
    """\
    import os, signal, sys, time
    marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "started")
    if not os.path.exists(marker):
        open(marker, "w").close()
        print("worked")
        sys.exit(0)
    def say(text):
        os.write(1, (text + "\\n").encode())
    def winch(signum, frame):
        rows, cols = os.get_terminal_size(0).lines, os.get_terminal_size(0).columns
        say(f"winch {rows}x{cols}")
    signal.signal(signal.SIGINT, lambda s, f: say("caught"))
    signal.signal(signal.SIGWINCH, winch)
    signal.signal(signal.SIGCONT, lambda s, f: say("continued"))
    # Under a shell corral is not the session leader, so its death hangs nothing up; here it is.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fg = os.tcgetpgrp(0) if os.isatty(0) else -1
    say(f"ready pid={os.getpid()} pgrp={os.getpgrp()} fg={fg}")
    while True:
        try:
            line = sys.stdin.readline()
        except OSError:  # EIO: the terminal hung up
            line = ""
        if not line:  # the terminal hung up (its session leader died): busy on, as an agent mid-task is
            time.sleep(60)
            sys.exit(99)
        if line.startswith("exit "):
            say("bye")
            sys.exit(int(line.split()[1]))
        say("heard " + line.strip())
    """
)


class Pty:
    """The real `corral` CLI on a pseudo-terminal; what it and the agent print is read from the master."""

    def __init__(self, argv: list[str], cwd: Path, stdin: int | None = None, shell: bool = False) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a new session whose controlling terminal is the pty's slave
            try:
                os.chdir(cwd)
                if shell:
                    _job(argv, stdin)
                if stdin is not None:  # stdin elsewhere; stdout, stderr and the terminal stay the pty
                    os.dup2(stdin, 0)
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        self.pid, self.fd, self.out = pid, fd, b""

    def read_until(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r} in {self.out!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: every holder of the slave closed it
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}: {self.out!r}"
                self.out += chunk
        return self.out.decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        os.write(self.fd, data)

    def finish(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                self.out += chunk
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)

    def running(self) -> bool:
        done, _ = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
        return done == 0


def _job(argv: list[str], stdin: int | None) -> None:
    """Act as a job-control shell: run ``argv`` as a foreground job in a group of its own, exit with it.

    The session leader stays behind (as a login shell does), so the job's group is not
    orphaned and the kernel stops it on a Ctrl-Z.
    """
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    job = os.fork()
    if job == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(0, os.getpgrp())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        if stdin is not None:
            os.dup2(stdin, 0)
        os.execvp(argv[0], argv)
    try:
        os.setpgid(job, job)
    except OSError:
        pass
    _, status = os.waitpid(job, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def state(pid: int) -> str:
    """The process's state letter in /proc (R, S, T for stopped, Z …); "" once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def parent(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def wait_for_state(pid: int, letters: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while (now := state(pid)) not in letters and now and time.monotonic() < deadline:
        time.sleep(0.02)
    return now


def corral_of(agent: int) -> int:
    """The corral that runs ``agent``: the parent of the agent's session leader, checked by its command line."""
    cli = parent(parent(agent))
    assert b"-m\0corral\0" in Path(f"/proc/{cli}/cmdline").read_bytes()
    return cli


def raw(fd: int) -> bool:
    """Whether the terminal is in raw mode (no line editing, no echo, no keyboard signals)."""
    lflag = termios.tcgetattr(fd)[3]
    return not lflag & (termios.ICANON | termios.ECHO | termios.ISIG)


def cooked(fd: int) -> bool:
    """Whether the terminal is as a shell keeps it: line editing, echo and keyboard signals on."""
    lflag = termios.tcgetattr(fd)[3]
    return lflag & (termios.ICANON | termios.ECHO | termios.ISIG) == termios.ICANON | termios.ECHO | termios.ISIG


def ready_line(out: str) -> dict[str, int]:
    line = next(x for x in out.splitlines() if x.startswith("ready "))
    return {k: int(v) for k, v in (part.split("=") for part in line.split()[1:])}


def end_leftovers(tmp_path: Path) -> None:
    """A failed test leaves its corral and agent running (the agent ignores SIGHUP): end what names its directory."""
    mark = str(tmp_path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def paired(corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CLI]:
    """A blocked task `pt` whose harness is the reporting agent above."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Pair under a terminal", "--ref", "pt")
    corral.ok("start", "pt", "--wait", "--timeout", "60")
    assert corral.json("show", "pt")["task"]["status"] == "blocked"
    yield corral
    end_leftovers(tmp_path)


def pair_summary(corral: CLI) -> dict[str, object]:
    turns = corral.json("show", "pt")["turns"]
    last: dict[str, object] = turns[-1]
    assert last["kind"] == "pair summary", turns
    return last


def test_ctrl_c_reaches_the_agent_alone_and_the_summary_records_its_real_exit(paired: CLI, repo: Path) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo, shell=True)
    ids = ready_line(session.read_until("ready "))
    agent = ids["pid"]
    cli = corral_of(agent)
    assert ids["pgrp"] == agent != os.getpgid(cli)  # a process group of its own …
    assert ids["fg"] == agent  # … which is the foreground group of its terminal …
    assert os.getsid(agent) != os.getsid(cli)  # … in a session of its own …
    assert os.readlink(f"/proc/{agent}/fd/0") != os.readlink(f"/proc/{cli}/fd/0")  # … on a terminal of its own
    assert os.tcgetpgrp(session.fd) == os.getpgid(cli)  # the person's terminal stays corral's, relayed raw
    assert raw(session.fd)

    session.write(b"\x03")  # Ctrl-C, through the line discipline
    session.read_until("caught")
    session.write(b"still there?\n")
    session.read_until("heard still there?")
    assert state(agent) not in ("", "Z")  # the agent lives on …
    assert state(cli) not in ("", "Z")  # … and so does corral

    session.write(b"exit 7\n")
    session.read_until("bye")
    session.read_until("; pt is blocked")  # said once the person's terminal is back …
    assert cooked(session.fd)  # … as it was
    assert session.finish() == 0, session.out
    out = session.out.decode("utf-8", "replace")
    assert "The pair ended: the agent exited with code 7; pt is blocked" in out

    last = pair_summary(paired)
    assert "the agent exited with code 7." in str(last["content"])
    assert str(last["content"]).startswith("Paired for ") and " s; the agent" in str(last["content"])
    assert str(last["started_at"]) < str(last["ended_at"])  # the turn spans the session
    shown = paired.ok("show", "pt").stdout
    assert "exited with code 7" in shown
    assert paired.json("show", "pt")["task"]["status"] == "blocked"


def test_a_window_size_change_reaches_the_agent(paired: CLI, repo: Path) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo)
    session.read_until("ready ")
    fcntl.ioctl(session.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 41, 101, 0, 0))
    session.read_until("winch 41x101")
    assert session.running()
    session.write(b"exit 0\n")
    assert session.finish() == 0, session.out
    assert "the agent exited with code 0." in str(pair_summary(paired)["content"])


def test_ctrl_z_suspends_agent_and_corral_together_and_continuing_gives_the_terminal_back(
    paired: CLI, repo: Path
) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo, shell=True)
    agent = ready_line(session.read_until("ready "))["pid"]
    cli = corral_of(agent)

    session.write(b"\x1a")  # Ctrl-Z, relayed to the agent's terminal, which stops the agent
    assert wait_for_state(agent, "Tt") in "Tt"
    assert wait_for_state(cli, "Tt") in "Tt"  # corral stopped itself: the job is suspended
    assert os.tcgetpgrp(session.fd) == os.getpgid(cli)
    assert cooked(session.fd)  # and the shell has the terminal as it left it

    os.kill(cli, signal.SIGCONT)  # what a shell's `fg` does after giving corral the terminal
    session.read_until("continued")
    assert wait_for_state(agent, "RS") in "RS"
    assert raw(session.fd)  # relayed again
    session.write(b"after the stop\n")
    session.read_until("heard after the stop")

    session.write(b"exit 3\n")
    assert session.finish() == 0, session.out
    assert "the agent exited with code 3." in str(pair_summary(paired)["content"])


def test_an_agent_ended_by_a_signal_is_recorded_as_such_and_corral_takes_the_terminal_back(
    paired: CLI, repo: Path
) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo)
    agent = ready_line(session.read_until("ready "))["pid"]
    os.kill(agent, signal.SIGTERM)
    session.read_until("The pair ended: the agent was ended by SIGTERM (signal 15); pt is blocked")
    assert session.finish() == 0, session.out
    assert "the agent was ended by SIGTERM (signal 15)." in str(pair_summary(paired)["content"])


def test_sigterm_to_corral_is_passed_on_to_the_agent_and_the_pair_still_ends_cleanly(paired: CLI, repo: Path) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo)
    agent = ready_line(session.read_until("ready "))["pid"]
    os.kill(session.pid, signal.SIGTERM)
    session.read_until("; pt is blocked")
    assert session.finish() == 0, session.out
    assert state(agent) == ""
    assert "the agent was ended by SIGTERM (signal 15)." in str(pair_summary(paired)["content"])


def test_the_agent_of_a_pair_whose_corral_was_killed_is_stopped_by_the_stale_pairing_sweep(
    paired: CLI, repo: Path
) -> None:
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo)
    agent = ready_line(session.read_until("ready "))["pid"]
    os.kill(session.pid, signal.SIGKILL)
    session.finish()
    assert state(agent) not in ("", "Z")  # its own process group: the kill did not reach it
    assert paired.json("show", "pt")["task"]["status"] == "blocked"  # a read settles: the sweep ran
    assert wait_for_state(agent, "Z") in ("", "Z")
    last = pair_summary(paired)
    assert last["actor"] == "system" and "Its agent was still running and was stopped." in str(last["content"])


def test_with_stdin_piped_under_a_terminal_ctrl_c_is_still_the_agents_and_ctrl_z_stops_both(
    paired: CLI, repo: Path
) -> None:
    read_end, write_end = os.pipe()
    session = Pty([sys.executable, "-m", "corral", "pair", "pt"], repo, stdin=read_end, shell=True)
    os.close(read_end)
    ids = ready_line(session.read_until("ready "))
    agent = ids["pid"]
    cli = corral_of(agent)
    assert ids["fg"] == ids["pgrp"] == agent  # its own terminal all the same
    assert cooked(session.fd)  # the person's terminal is not stdin: corral leaves it alone

    session.write(b"\x03")  # Ctrl-C signals corral's group; corral passes it on to the agent
    session.read_until("caught")
    assert state(cli) not in ("", "Z", "T") and state(agent) not in ("", "Z")

    session.write(b"\x1a")  # Ctrl-Z: passed on, the agent stops, and corral with it
    assert wait_for_state(agent, "Tt") in "Tt"
    assert wait_for_state(cli, "Tt") in "Tt"
    os.killpg(cli, signal.SIGCONT)  # a shell's `fg`
    session.read_until("continued")
    assert wait_for_state(cli, "RS") in "RS"

    os.write(write_end, b"exit 4\n")
    os.close(write_end)
    assert session.finish() == 0, session.out
    assert "the agent exited with code 4." in str(pair_summary(paired)["content"])


def test_without_a_terminal_the_pair_still_runs_and_records_the_exit(paired: CLI) -> None:
    result = paired("pair", "pt", input="hello\nexit 5\n")
    assert result.returncode == 0, result.stderr
    assert "heard hello" in result.stdout and "bye" in result.stdout
    ids = ready_line(result.stdout)
    assert ids["fg"] == ids["pgrp"] == ids["pid"]  # no terminal to relay, but a terminal of its own
    assert "hello" not in result.stdout.replace("heard hello", "")  # piped input is not echoed back
    assert "the agent exited with code 5." in str(pair_summary(paired)["content"])


#: A chat agent that ignores being read-only: it commits one file and leaves another uncommitted.
CHATTY = textwrap.dedent(
    """\
    import os, subprocess, sys
    marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "started")
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(0)
    print("read only:", os.environ.get("CORRAL_READ_ONLY"), "kind:", os.environ.get("CORRAL_TURN_KIND"))
    with open("committed.txt", "w") as fh:
        fh.write("made in a chat\\n")
    subprocess.run(["git", "add", "committed.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "a commit from a read-only chat"], check=True)
    with open("README.md", "a") as fh:
        fh.write("an uncommitted edit\\n")
    with open("untracked.txt", "w") as fh:
        fh.write("left lying around\\n")
    sys.exit(0)
    """
)


def test_what_a_chat_changes_is_kept_aside_reverted_and_told(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Chat that writes", "--ref", "cw")
    corral.ok("start", "cw", "--wait", "--timeout", "60")
    worktree = Path(corral.json("show", "cw")["task"]["worktree"])
    (worktree / "notes.txt").write_text("the person's own uncommitted work\n")  # must survive the revert
    tip = git(worktree, "rev-parse", "HEAD")
    turns_before = len(corral.json("show", "cw")["turns"])

    session = Pty([sys.executable, "-m", "corral", "chat", "cw"], repo)
    session.read_until("read only: 1 kind: chat")
    assert session.finish() == 0, session.out

    assert git(worktree, "rev-parse", "HEAD") == tip  # the branch is back where it was
    assert not (worktree / "committed.txt").exists() and not (worktree / "untracked.txt").exists()
    assert (worktree / "README.md").read_text() == "# demo\n"
    assert (worktree / "notes.txt").read_text() == "the person's own uncommitted work\n"
    doc = corral.json("show", "cw")
    assert doc["task"]["status"] == "blocked"  # still status-neutral
    turns = doc["turns"]
    assert len(turns) == turns_before + 1
    told = turns[-1]
    ref = f"refs/corral/kept/cw/{told['sequence']}"
    assert told["kind"] == "chat" and ref in told["content"] and "(1 commit, 3 paths)" in told["content"]
    # everything the chat made is on the kept ref: the commit (first parent) and the rest (its tree)
    assert git(repo, "log", "-1", "--format=%s", f"{ref}^1") == "a commit from a read-only chat"
    assert git(repo, "show", f"{ref}:untracked.txt") == "left lying around"
    assert "an uncommitted edit" in git(repo, "show", f"{ref}:README.md")
    assert told["failure"]["code"] == "read-only-changes-kept" and ref in told["reason"]  # the typed cause, explained
    assert ref in corral.ok("show", "cw").stdout
    assert not git(repo, "for-each-ref", "refs/corral/archive/")  # apart from what `reopen` restores


#: Run 1 (start) exits; run 2 (a chat) commits, then waits to be killed; run 3 (a chat) exits at once.
KILLED_CHAT = textwrap.dedent(
    """\
    import os, signal, subprocess, sys, time
    counter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
    runs = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(runs))
    if runs == 2:
        # corral's death hangs up the agent's terminal (corral held its master): an agent busy mid-task
        # lives on past it, and the test kills it itself, as AGENT does
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        open("sneaky.txt", "w").write("made in a chat\\n")
        subprocess.run(["git", "add", "sneaky.txt"], check=True)
        subprocess.run(["git", "commit", "-q", "-m", "a commit from a killed chat"], check=True)
        print(f"committed pid={os.getpid()}", flush=True)
        time.sleep(120)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("finish", ["chat again", "the sweep"])
def test_a_chat_whose_corral_was_killed_is_still_put_back_before_anything_builds_on_it(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finish: str
) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED_CHAT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Chat that is killed", "--ref", "kc")
    corral.ok("start", "kc", "--wait", "--timeout", "60")
    worktree = Path(corral.json("show", "kc")["task"]["worktree"])
    tip = git(worktree, "rev-parse", "HEAD")

    session = Pty([sys.executable, "-m", "corral", "chat", "kc"], repo)
    out = session.read_until("committed pid=")
    agent = int(out.split("committed pid=")[1].split()[0])
    os.kill(session.pid, signal.SIGKILL)  # corral dies mid-chat: nothing ran after the agent
    os.kill(agent, signal.SIGKILL)
    session.finish()
    assert wait_for_state(agent, "Z", timeout=30) in ("", "Z")  # the killed agent is gone before anything else
    assert git(worktree, "rev-parse", "HEAD") != tip  # the chat's commit is still on the branch

    refused = corral("unblock", "kc", "-m", "carry on")
    assert refused.returncode != 0 and "ended without corral" in refused.stderr, refused.stderr
    assert git(worktree, "rev-parse", "HEAD") != tip  # nothing was started on top of it
    refused = corral("accept", "kc")  # nor is the chat's commit merged into the target
    assert refused.returncode != 0 and "ended without corral" in refused.stderr, refused.stderr

    if finish == "chat again":
        again = corral("chat", "kc")  # puts the killed chat's changes aside before it starts
        assert again.returncode == 0, again.stderr
    else:
        project = Project.open(repo)
        try:
            assert sweep_stale_chats(project) == 1
            assert sweep_stale_chats(project) == 0  # once
        finally:
            project.close()
    assert git(worktree, "rev-parse", "HEAD") == tip and not (worktree / "sneaky.txt").exists()
    told = corral.json("show", "kc")["turns"][-1]
    ref = f"refs/corral/kept/kc/{told['sequence']}"
    assert told["kind"] == "chat" and told["actor"] == "system" and ref in told["content"]
    assert git(repo, "log", "-1", "--format=%s", f"{ref}^1") == "a commit from a killed chat"
    corral.ok("unblock", "kc", "-m", "carry on")  # free again
