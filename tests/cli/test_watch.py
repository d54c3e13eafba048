"""`corral watch`: the live board in a real terminal (tmux), and one line per change off one.

The board's screen is read the way a person sees it: the real CLI runs in a tmux pane and the
pane's text is captured (``tmux capture-pane``). Changes are made from other processes — the
CLI, the supervisor of a real turn of the `command` harness — and must show within a second.
The byte stream itself is read on a pseudo-terminal, to check the board redraws only what
changed. Off a terminal (``--plain`` on a pipe, ``--json``) it prints one line per change.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pty
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.cli import board_keys, line_fit
from corral.cli import board_rows as view
from corral.cli.board_app import BoardApp
from corral.domain.needs import ORDER, TITLES
from tests.conftest import CLI
from tests.support import postgres as pg_support
from tests.support.polling import until

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database

pytestmark = pytest.mark.slow  # real turns and a terminal per test: a few seconds each

#: The agent: says a hostile line, then lines until a file named "go" beside it exists, then ends.
AGENT = textwrap.dedent(
    """\
    import os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    print("reading \\x1b]0;pwned\\x07 the parser", flush=True)
    n = 0
    while not os.path.exists(os.path.join(here, "go")):
        n += 1
        print(f"chunk {n} \x1b]0;pwned\x07 read", flush=True)
        time.sleep(0.1)
    print("all done", flush=True)
    """
)


@pytest.fixture
def agented(corral: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Turns run the agent above (the `command` harness); its "go" file ends a turn."""
    script = tmp_path / "agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    return script.parent / "go"


class Pane:
    """One tmux pane, on a server of its own, running a shell command in ``cwd``."""

    def __init__(self, command: str, cwd: Path, width: int = 120, height: int = 32) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cw-", dir="/tmp"))  # a socket path must be short
        self.sock = str(self.dir / "s")
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(cwd), command)

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def shows(self, *texts: str, timeout: float = 10) -> str:
        """The screen once it shows every one of ``texts``."""
        return self.when(lambda s: all(t in s for t in texts), timeout=timeout, what=f"{texts} on the screen")

    def when(self, test: Callable[[str], bool], timeout: float = 10, what: str = "the screen") -> str:
        """The screen once ``test`` holds of it."""
        try:
            screen: str = until(lambda: s if test(s := self.screen()) else "", timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None
        return screen

    def display(self, fmt: str) -> str:
        return self.tmux("display-message", "-p", fmt).strip()

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pane(repo: Path, tmp_path: Path) -> Iterator[Pane]:
    """``corral watch`` in a pane; the shell says how it exited, and whether the terminal's settings
    afterwards are the ones it had before."""
    before, after = tmp_path / "stty.before", tmp_path / "stty.after"
    watch = f"{shlex.quote(sys.executable)} -m corral watch"
    command = (
        f"stty -g > {before}; {watch}; echo EXITED $?; stty -g > {after}; "
        f"cmp -s {before} {after} && echo TERMINAL RESTORED; sleep 600"
    )
    p = Pane(command, repo)
    try:
        yield p
    finally:
        p.close()


def row_line(screen: str, ref: str) -> str:
    """The board's line of task ``ref``."""
    found = [line for line in screen.splitlines() if line[2:].split(" ", 1)[0] == ref]
    assert len(found) == 1, screen
    return found[0]


def group_of(screen: str, ref: str) -> str:
    """The title of the group ``ref``'s row is in."""
    title = ""
    for line in screen.splitlines():
        if line and not line.startswith(" ") and not line.startswith("›") and "(" in line:
            title = line.split(" (")[0]
        if line[2:].split(" ", 1)[0] == ref:
            return title
    raise AssertionError(f"{ref} is not on the board:\n{screen}")


def test_a_task_made_and_started_elsewhere_shows_and_changes_within_a_second(
    corral: CLI, agented: Path, pane: Pane
) -> None:
    pane.shows("corral watch", "Nothing unfinished.")
    corral.ok("create", "Watch me work", "--ref", "wm")
    made = time.monotonic()
    screen = pane.shows("wm ", timeout=1.0)
    assert time.monotonic() - made < 1.0
    assert group_of(screen, "wm") == "Backlog" and "backlog" in row_line(screen, "wm"), screen
    assert "Watch me work" in row_line(screen, "wm")

    corral.ok("start", "wm")
    started = time.monotonic()
    screen = pane.when(lambda s: "working" in row_line(s, "wm"), timeout=1.0, what="wm working")
    assert time.monotonic() - started < 1.0
    assert group_of(screen, "wm") == "Working", screen
    # The agent's last line follows under its row, escaped: the title sequence is shown, not obeyed.
    screen = pane.shows("chunk ", view.LIVE_MARK)
    pane.shows(r"\x1b]0;pwned\x07")
    assert "pwned" not in pane.display("#{pane_title}")

    agented.touch()
    screen = pane.when(lambda s: "blocked" in row_line(s, "wm"), timeout=15, what="wm blocked")
    assert group_of(screen, "wm") == "Waiting for review", screen
    assert view.LIVE_MARK not in screen  # a resting task has no live line
    pane.keys("q")
    pane.shows("EXITED 0", "TERMINAL RESTORED")
    assert pane.display("#{alternate_on} #{cursor_flag}") == "0 1"  # the person's screen, the cursor back


def test_enter_opens_the_task_l_follows_its_log_q_quits(corral: CLI, agented: Path, pane: Pane) -> None:
    agented.touch()  # the turn ends at once
    corral.ok("create", "Read the parser", "--ref", "rp")
    corral.ok("start", "rp", "--wait", "--timeout", "60")
    corral.ok("create", "Later work", "--ref", "later")
    screen = pane.shows("rp ", "later ")
    assert row_line(screen, "rp").startswith("›"), screen  # the first row is selected

    pane.keys("Enter")
    screen = pane.shows("Timeline:", "Next:")
    assert "rp  (" in screen and "Goal:     Read the parser" in screen, screen
    shown = corral.json("show", "rp")
    assert shown["next"].split()[0] in screen  # the same page `corral show` prints
    pane.keys("Escape")  # the pane closes
    pane.when(lambda s: "Timeline:" not in s and "Waiting for review (1)" in s, what="the board alone")

    pane.keys("j")  # the next row, then back up
    until(lambda: row_line(pane.screen(), "later").startswith("›"), timeout=5, what="later selected")
    pane.keys("k")
    until(lambda: row_line(pane.screen(), "rp").startswith("›"), timeout=5, what="rp selected")

    pane.keys("Enter")
    pane.shows("Timeline:")
    pane.keys("l")  # the log, in the task's pane, as `corral logs` shows it: escaped
    screen = pane.shows("reading ", "all done", r"\x1b]0;pwned\x07")
    assert "pwned" not in pane.display("#{pane_title}")
    pane.keys("Escape")
    pane.when(lambda s: "Timeline  Log  Diff" not in s and "Backlog (1)" in s, what="the board alone")

    pane.keys("q")
    pane.shows("EXITED 0", "TERMINAL RESTORED")
    assert pane.display("#{alternate_on}") == "0"


def test_u_unblocks_with_the_editor_and_a_accepts_after_asking(
    corral: CLI, agented: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committer = tmp_path / "agent" / "commit.py"  # each turn commits a line: there is work to accept
    committer.write_text(
        "import subprocess\n"
        "open('notes.txt', 'a').write('a line\\n')\n"
        "subprocess.run(['git', 'add', 'notes.txt'], check=True)\n"
        "subprocess.run(['git', 'commit', '-q', '-m', 'a line'], check=True)\n"
        "print('committed')\n"
    )
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {committer}")
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "Cover the retry path too.\\n" > "$1"\n')
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    corral.ok("create", "Fix it", "--ref", "fx")
    corral.ok("start", "fx", "--wait", "--timeout", "60")
    p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; echo EXITED $?; sleep 600", repo)
    try:
        p.shows("Waiting for review (1)", "fx ")
        p.keys("u")
        p.shows("fx is working (supervisor pid")
        until(lambda: len(corral.json("show", "fx")["turns"]) >= 4, timeout=10, what="the unblock turn")
        turns = corral.json("show", "fx")["turns"]
        assert [t["content"] for t in turns if t["kind"] == "unblock" and t["role"] == "human"] == [
            "Cover the retry path too."
        ]
        until(lambda: corral.json("show", "fx")["task"]["status"] == "blocked", timeout=15, what="fx blocked")
        p.shows("Waiting for review (1)")

        p.keys("a")
        p.shows("Accept fx: squash-merge its work into its target? [y/N]")
        p.keys("n")
        p.shows("fx was not accepted.")
        assert corral.json("show", "fx")["task"]["status"] == "blocked"
        p.keys("a")
        p.shows("[y/N]")
        p.keys("y")
        p.shows("fx is complete: merged as")
        assert corral.json("show", "fx")["task"]["status"] == "complete"
        p.shows("Nothing unfinished.")
        p.keys("q")
        p.shows("EXITED 0")
    finally:
        p.close()


def test_the_board_writes_nothing_while_idle_and_gives_the_screen_back(corral: CLI, repo: Path) -> None:
    """On the byte stream: the alternate screen at the start, then nothing while idle, a change drawn
    without clearing the screen, and the person's screen and cursor back at the end."""
    corral.ok("create", "First task", "--ref", "one")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", "watch"], cwd=repo, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = bytearray()

    def read(seconds: float) -> bytes:
        got = bytearray()
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the watch has exited and the terminal closed
                    break
                if not data:
                    break
                got += data
        out.extend(got)
        return bytes(got)

    try:
        until(lambda: read(0.1) is not None and b"one" in out, timeout=15, what="the first frame")
        read(0.5)
        assert b"\x1b[?1049h" in out, bytes(out)
        assert read(1.5) == b""  # idle: not one byte
        corral.ok("create", "Second task", "--ref", "two")
        changed = b""
        while b"two" not in changed:
            chunk = read(0.3)
            assert chunk or b"two" in changed, bytes(out)
            changed += chunk
        changed += read(0.4)
        assert b"\x1b[2J" not in changed  # no clear: what changed is drawn over what was there
        os.write(master, b"q")
        assert proc.wait(timeout=10) == 0
        tail = read(0.3)
        assert b"\x1b[?1049l" in tail and b"\x1b[?25h" in tail, tail  # the person's screen, the cursor back
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


# -- off a terminal ---------------------------------------------------------------------------------


class Lines:
    """A streaming command's stdout on a pipe, line by line."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral", *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.lines: list[str] = []

    def pump(self, seconds: float = 0.05) -> list[str]:
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if ready:
            chunk = os.read(self.fd, 65536)
            self.buf += chunk
            *done, self.buf = self.buf.split(b"\n")
            self.lines += [d.decode() for d in done]
        return self.lines

    def until(self, test: Callable[[str], bool], timeout: float = 10, what: str = "a line") -> list[str]:
        """The lines so far that pass ``test``, once there is one."""
        try:
            return until(lambda: [ln for ln in self.pump() if test(ln)], timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the lines: {self.lines}") from None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=10)


def fields(line: str) -> list[str]:
    return line.split("  ")


def test_plain_on_a_pipe_prints_one_line_per_change(corral: CLI, agented: Path, repo: Path) -> None:
    corral.ok("create", "Already here", "--ref", "here")
    lines = Lines(["watch"], repo)  # a pipe: no --plain needed
    try:
        lines.until(lambda ln: "  here  " in ln, what="the listing")
        assert len(lines.lines) == 1 and fields(lines.lines[0])[1:] == ["here", "backlog", "Backlog", "Already here"]

        corral.ok("create", "Watch me", "--ref", "wm")
        lines.until(lambda ln: "  wm  backlog" in ln, timeout=1.0, what="wm's line")
        corral.ok("start", "wm")
        lines.until(lambda ln: "  wm  working" in ln, timeout=2.0, what="wm working")
        # The agent writes a line every 0.1 s: the board's last line changes, no line is printed for it.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            lines.pump(0.1)
        agented.touch()
        lines.until(lambda ln: "  wm  blocked" in ln, timeout=15, what="wm blocked")
        lines.pump(0.3)
        assert lines.stop() == 128 + signal.SIGTERM
    finally:
        if lines.proc.poll() is None:
            lines.proc.kill()
    mine = [fields(ln)[1:] for ln in lines.lines if "  wm  " in ln]
    assert not any("chunk" in ln or "pwned" in ln for ln in lines.lines), lines.lines
    assert mine[0][:2] == ["wm", "backlog"] and mine[-1][:3] == ["wm", "blocked", "Waiting for review"], mine
    assert all(a != b for a, b in itertools.pairwise(mine)), mine  # each line is a change
    # Through working (its substates, each a change) to blocked, and nothing else.
    statuses = [status.split("(")[0] for _ref, status, *_rest in mine]
    assert [s for s, _g in itertools.groupby(statuses)] == ["backlog", "working", "blocked"], mine
    assert [ln for ln in lines.lines if "  here  " in ln] == lines.lines[:1]  # nothing changed: one line


def test_on_a_shared_postgresql_store_a_change_from_another_process_shows_long_before_the_interval(
    corral: CLI, repo: Path, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another host writes to the same database: nothing on this host's disk changes, so the watch
    # must learn of it from the store itself, not from a file's times (the interval here is a minute).
    monkeypatch.setenv("CORRAL_DATABASE_URL", pg_database)
    corral.ok("create", "Already here", "--ref", "here")
    lines = Lines(["watch", "--plain", "--interval", "60"], repo)
    try:
        lines.until(lambda ln: "  here  " in ln, what="the listing")
        for change, seen in (
            (("create", "Made elsewhere", "--ref", "away"), "  away  backlog"),
            (("close", "here", "-m", "done elsewhere"), "  here  abandoned"),
        ):
            corral.ok(*change)
            lines.until(lambda ln, seen=seen: seen in ln, timeout=5, what=seen.strip())
        assert lines.stop() == 128 + signal.SIGTERM
    finally:
        if lines.proc.poll() is None:
            lines.proc.kill()


def test_json_streams_one_event_per_change_and_a_named_task_to_its_end(corral: CLI, repo: Path) -> None:
    corral.ok("create", "Named", "--ref", "named")
    corral.ok("create", "Other", "--ref", "other")
    lines = Lines(["watch", "nam", "--json"], repo)  # a unique prefix names the task
    try:
        first = json.loads(lines.until(lambda ln: ln.startswith("{"), what="the listing")[0])
        assert first["event"] == "task" and first["change"] == "listed"
        assert first["task"]["ref"] == "named" and first["task"]["needs"] == "backlog"
        corral.ok("close", "named", "-m", "not needed")
        ended = json.loads(lines.until(lambda ln: '"finished"' in ln, timeout=3, what="the end")[0])
        assert ended["task"]["ref"] == "named" and ended["task"]["status"] == "abandoned"
        corral.ok("edit", "other", "--goal", "Other, changed")  # not watched: no line
        lines.pump(0.6)
        assert lines.stop(signal.SIGINT) == 130
    finally:
        if lines.proc.poll() is None:
            lines.proc.kill()
    docs = [json.loads(ln) for ln in lines.lines]
    assert [d["change"] for d in docs] == ["listed", "finished"], docs
    assert all(d["task"]["ref"] == "named" for d in docs)


def test_all_projects_watches_every_repository_under_the_home(corral: CLI, repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=other, check=True)
    (other / "f").write_text("x\n")
    subprocess.run(["git", "add", "f"], cwd=other, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "i"], cwd=other, check=True)
    corral.ok("create", "In repo", "--ref", "mine")
    corral.ok("create", "In other", "--ref", "theirs", cwd=other)
    lines = Lines(["watch", "--all-projects", "--plain"], tmp_path)  # from outside any repository
    try:
        lines.until(lambda ln: "theirs" in ln, what="both projects")
        got = lines.until(lambda ln: "mine" in ln, what="both projects") and lines.lines
        assert any("  repo/mine  backlog" in ln for ln in got) and any("  other/theirs  backlog" in ln for ln in got)
    finally:
        lines.stop()


# -- the view, without a terminal ---------------------------------------------------------------


def _board(rows: list[dict[str, object]]) -> dict[str, object]:
    groups = [{"needs": n.value, "title": TITLES[n], "rows": [r for r in rows if r["needs"] == n.value]} for n in ORDER]
    return {"projects": [{"name": "app", "path": "/x"}], "groups": groups, "finished": [], "problems": []}


def _row(ref: str, status: str, needs: str, **kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": ref + "-id",
        "ref": ref,
        "status": status,
        "substate": None,
        "needs": needs,
        "goal": f"Goal of {ref}",
        "reason": None,
        "needs_action": 0,
        "project": "app",
        "project_path": "/x",
        "age_s": 30.0,
        "live": None,
    }
    return {**base, **kw}


def test_the_frame_groups_by_need_marks_the_selection_and_escapes_agent_text() -> None:
    live = {"last_line": "out \x1b[2J\x1b]0;t\x07 \u202eevil", "progress": "step 2/5", "retry_class": None}
    rows = [
        _row("w", "working", "working", substate="agent", live=live),
        _row("b", "blocked", "review", needs_action=2, reason="turn ended"),
        _row("n", "backlog", "backlog", age_s=7300.0, goal="line\nforged"),
    ]
    lines = view.plain_rows(_board(rows), width=100, selected=("/x", "b-id"))
    text = "\n".join(lines)
    assert [line.split(" (")[0] for line in lines if line.endswith(")")] == ["Waiting for review", "Working", "Backlog"]
    at = {line[2:].split(" ", 1)[0]: i for i, line in enumerate(lines) if line[:2] in ("  ", "› ") and line[2:3] != " "}
    assert list(at) == ["b", "w", "n"]
    assert lines[at["b"]].startswith("› b ") and "[2 need action] Goal of b — turn ended" in text
    assert "working(agent)" in lines[at["w"]]
    assert r"↳ step 2/5 · out \x1b[2J\x1b]0;t\x07 \u202eevil" in lines[at["w"] + 1]
    assert "\x1b" not in text and "\u202e" not in text and "line forged" in text
    assert "2 h" in lines[at["n"]]
    assert all(line_fit.cells(line) <= 100 for line in lines)


def test_fit_counts_columns_and_keeps_colour_codes_whole() -> None:
    assert line_fit.fit("abcdef", 4) == "abc…"
    assert line_fit.fit("\x1b[1mabcdef\x1b[0m", 4) == "\x1b[1mabc…\x1b[0m"
    assert line_fit.fit("日本語テキスト", 6) == "日本…"
    assert line_fit.cells("\x1b[31mab\x1b[0m") == 2


def test_every_key_the_key_line_names_is_bound_on_the_board() -> None:
    """The terminal's bytes are Textual's to read now: what is left is that each key offered does something."""
    bound = {b.key: b.action for b in BoardApp.BINDINGS if not isinstance(b, tuple)}
    for key in board_keys.ACTION_KEYS:
        assert bound[board_keys.KEY_NAMES.get(key, key)] == f"act('{key}')"
    assert {"q", "n", "escape", "t", "l", "d", "ctrl+c"} <= set(bound)


def test_the_frame_names_the_host_a_worker_runs_a_turn_on_and_escapes_it() -> None:
    rows = [
        _row("w", "working", "working", substate="agent", host="build-2"),
        _row("q", "working", "working", substate="queued", host="queued"),
        _row("e", "working", "working", substate="agent", host="evil\x1b[2J"),
    ]
    lines = view.plain_rows(_board(rows), width=100)
    by_ref = {line[2:].split(" ", 1)[0]: line for line in lines if line.startswith("  ") and line[2:3] != " "}
    assert "working(agent) on build-2" in by_ref["w"]
    assert "working(queued)" in by_ref["q"] and " on " not in by_ref["q"]
    assert "\x1b" not in by_ref["e"] and r"on evil\x1b[2J" in by_ref["e"]
