"""The board on a real terminal (a tmux pane): ``p`` pairs with the agent — the board suspends, the terminal
is the pair's (the agent on a terminal), and the board comes back when the agent exits."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.test_watch import Pane, pane, row_line
from tests.conftest import CLI
from tests.support.polling import until

__all__ = ["pane"]  # the watch tests' fixture: `corral watch` in a pane that says how it ended

pytestmark = pytest.mark.slow  # a real turn and a real pair on a terminal: several seconds

#: The agent: its first run (the start turn) ends at once; the pair's says whether it has a terminal,
#: then runs until it reads a line.
AGENT = textwrap.dedent(
    """\
    import os, sys
    marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "started")
    if not os.path.exists(marker):
        open(marker, "w").close()
        print("worked")
        sys.exit(0)
    print("pairing here, on a tty:", os.isatty(0), flush=True)
    line = sys.stdin.readline()
    print("got " + line.strip(), flush=True)
    """
)


def waiting_for_a_pair(corral: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task ``pr``, its first turn done by :data:`AGENT` (the command harness): it waits for review, and a
    pair on it runs the agent again, which then waits for a line."""
    script = tmp_path / "agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Pair on it", "--ref", "pr")
    corral.ok("start", "pr", "--wait", "--timeout", "60")


def test_p_pairs_on_the_terminal_and_the_board_comes_back(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting_for_a_pair(corral, tmp_path, monkeypatch)
    p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; echo EXITED $?; sleep 600", repo)
    try:
        screen = p.shows("Waiting for review (1)", "pr ")
        assert row_line(screen, "pr").startswith("›"), screen
        assert "p pair" in screen.rstrip().splitlines()[-1]
        p.keys("p")
        screen = p.shows("pairing here, on a tty: True")  # the agent has the terminal, the board is away
        assert "Waiting for review" not in screen
        until(lambda: corral.json("show", "pr")["task"]["status"] == "pairing", timeout=10, what="pr pairing")
        p.keys("bye", "Enter")
        p.shows("Waiting for review (1)", "The pair on pr ended (exit 0).", timeout=20)
        assert corral.json("show", "pr")["task"]["status"] == "blocked"
        p.keys("q")
        p.shows("EXITED 0")
    finally:
        p.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_ends_the_board_and_gives_the_terminal_back(corral: CLI, pane: Pane, sig: int) -> None:
    corral.ok("create", "Still here", "--ref", "here")
    pane.shows("Backlog (1)", "here ")
    shell = int(pane.display("#{pane_pid}"))
    (watch,) = [int(c) for c in Path(f"/proc/{shell}/task/{shell}/children").read_text().split()]
    os.kill(watch, sig)
    pane.shows(f"EXITED {128 + sig}", "TERMINAL RESTORED")
    assert pane.display("#{alternate_on} #{cursor_flag}") == "0 1"  # the person's screen, the cursor back


def test_the_board_ends_when_its_terminal_goes_away(corral: CLI, repo: Path) -> None:
    """A hang-up with the terminal gone (the window closed, the ssh link dropped): nothing is left to give
    the screen back to, and the board's process ends all the same instead of waiting on its last write."""
    corral.ok("create", "Still here", "--ref", "here")
    corral.ok("create", "And this", "--ref", "this")
    left = []
    for _ in range(3):  # the goodbye's write meets the closed terminal at a different point each time
        p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; sleep 600", repo)
        p.shows("Backlog (2)", "here ")
        shell = int(p.display("#{pane_pid}"))
        (watch,) = [int(c) for c in Path(f"/proc/{shell}/task/{shell}/children").read_text().split()]
        p.keys("Enter")
        p.keys("j", "k", "j", "k", "u")
        p.close()  # the terminal is gone: its processes get SIGHUP
        try:
            until(lambda w=watch: not _alive(w), timeout=15, what=f"watch {watch} to end")
        except AssertionError:
            left.append(watch)
            os.kill(watch, signal.SIGKILL)
    assert not left, f"left running after their terminal went away: {left}"


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, ended but not yet reaped by its parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_z_gives_the_shell_its_terminal_and_fg_brings_the_board_back(corral: CLI, repo: Path) -> None:
    corral.ok("create", "Still here", "--ref", "here")
    p = Pane("bash --norc --noprofile -i", repo)  # a shell with job control, as a person's is
    try:
        p.keys(f"{shlex.quote(sys.executable)} -m corral watch", "Enter")
        p.shows("Backlog (1)", "here ")
        p.keys("C-z")
        screen = p.shows("Stopped")
        assert "Backlog (1)" not in screen  # the shell's screen, not the board's
        p.keys("fg", "Enter")
        p.shows("Backlog (1)", "here ", "q quit")  # drawn whole again
        p.keys("q")
        p.when(lambda s: "q quit" not in s, what="the shell's screen back")
        p.keys("echo EXITED $?", "Enter")
        p.shows("EXITED 0")
    finally:
        p.close()


def test_the_board_ends_when_its_terminal_goes_away_during_a_pair(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window closed while the board was away for a pair: the hang-up goes to the pair (its agent ends),
    and the board that comes back to no terminal ends too, instead of spinning on a terminal that is gone."""
    waiting_for_a_pair(corral, tmp_path, monkeypatch)
    p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; sleep 600", repo)
    watch = 0
    try:
        p.shows("Waiting for review (1)", "pr ")
        shell = int(p.display("#{pane_pid}"))
        (watch,) = [int(c) for c in Path(f"/proc/{shell}/task/{shell}/children").read_text().split()]
        p.keys("p")
        p.shows("pairing here, on a tty: True")
        until(lambda: corral.json("show", "pr")["task"]["status"] == "pairing", timeout=10, what="pr pairing")
    finally:
        p.close()  # the terminal is gone: its processes get SIGHUP
    try:
        until(lambda: not _alive(watch), timeout=20, what=f"watch {watch} to end")
    except AssertionError:
        os.kill(watch, signal.SIGKILL)
        raise
    # The pair ended with its agent, and says so: nothing of the task is left pairing.
    until(lambda: corral.json("show", "pr")["task"]["status"] != "pairing", timeout=20, what="the pair to end")
