"""The board as a Textual app (``corral watch`` on a terminal), driven by Textual's headless pilot.

Real tasks, real turns on the ``command`` harness (a script standing in for the agent), real git: the
whole loop from the board's keys — a new task, its start, an unblock with ``$EDITOR``, an accept asked
first with its phases shown — and a resize. What the pilot reads is the screen as Textual composed
it (every cell, as a terminal would get it), so an agent's markup that Textual read would show here
as styling instead of its text.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from corral.cli.app import App as CliApp
from corral.cli.board_app import BoardApp
from corral.cli.watch_source import open_source
from tests.conftest import CLI

pytestmark = pytest.mark.slow  # real turns: a few seconds each

#: What the agent writes: an escape sequence, Textual's and Rich's markup, HTML, a bidi control.
HOSTILE = "\u202eevil\u202c \x1b]0;pwned\x07 [bold red]loud[/] [@click=app.quit]quit[/] <script>alert(1)</script>"

#: The agent: says the hostile line, then lines until a file named "go" beside it exists; then commits
#: a line (there is work to accept) and says the hostile line once more, as its last.
AGENT = textwrap.dedent(
    f"""\
    import os, subprocess, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    hostile = {HOSTILE!r}
    print("reading " + hostile, flush=True)
    n = 0
    while not os.path.exists(os.path.join(here, "go")):
        n += 1
        print(f"chunk {{n}} " + hostile, flush=True)
        time.sleep(0.1)
    open("notes.txt", "a").write("a line\\n")
    subprocess.run(["git", "add", "notes.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "a line " + hostile], check=True)
    print("done " + hostile, flush=True)
    """
)


@pytest.fixture
def agented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Turns run the agent above (the `command` harness); its "go" file lets a turn end."""
    script = tmp_path / "agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    return script.parent / "go"


def board(repo: Path) -> BoardApp:
    cli = CliApp(str(repo))
    return BoardApp(cli, open_source(cli, False, []), 5.0)


def screen(app: BoardApp) -> str:
    """The screen as Textual composed it: every line of cells, as text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def where(app: BoardApp, text: str) -> tuple[int, int]:
    """The cell where ``text`` starts on the screen (its column, its line)."""
    for y, line in enumerate(screen(app).splitlines()):
        if text in line:
            return line.index(text), y
    raise AssertionError(f"{text!r} is not on the screen:\n{screen(app)}")


async def shows(pilot: Pilot[Any], *texts: str, timeout: float = 15) -> str:
    """The screen once it shows every one of ``texts``."""
    return await when(pilot, lambda s: all(t in s for t in texts), timeout=timeout, what=f"{texts}")


async def when(pilot: Pilot[Any], test: Callable[[str], bool], *, timeout: float = 15, what: str = "") -> str:
    app = pilot.app
    assert isinstance(app, BoardApp)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await pilot.pause(0.05)
        now = screen(app)
        if test(now):
            return now
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or 'the screen'}; the screen:\n{now}")


def message(app: BoardApp) -> str:
    return str(app.query_one("#message", Static).content)


def test_the_whole_loop_from_the_board(
    corral: CLI, agented: Path, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "Cover the retry path too.\\n" > "$1"\n')
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))

    async def drive() -> None:
        app = board(repo)
        async with app.run_test(size=(200, 40)) as pilot:
            await shows(pilot, "corral watch", "Nothing unfinished.")
            # n: a new task, its goal then its prompt
            await pilot.press("n")
            await shows(pilot, "New task")
            await pilot.press(*"Parse the config", "enter", *"Read it all", "enter")
            await shows(pilot, "Backlog (1)", "Parse the config")
            (task,) = corral.json("list")["tasks"]
            ref = task["ref"]
            assert corral.json("show", ref)["task"]["prompt"] == "Read it all"
            assert "s start" in screen(app) and "a accept" not in screen(app)  # the table's offer for backlog

            # s: started; the agent's live line under its row, its text shown as written
            await pilot.press("s")
            await shows(pilot, "Working (1)", f"{ref} is working (supervisor pid", timeout=20)
            shown = await shows(pilot, "chunk ", "↳")
            said = (
                r"\u202eevil\u202c \x1b]0;pwned\x07 [bold red]loud[/] [@click=app.quit]quit[/] "
                + "<script>alert(1)</script>"
            )
            assert said in shown, shown
            assert "\u202e" not in shown and "\x1b" not in shown
            assert "x stop" in shown and "s start" not in shown

            # Enter: the pane, its timeline; l: the live log, escaped as `corral logs` escapes it
            await pilot.press("enter")
            await shows(pilot, "Timeline", "Goal:")
            await pilot.press("l")
            shown = await shows(pilot, "chunk ", "reading ")
            assert said in shown, shown
            # The agent's link is text: a click on it is a click on the log, and the board stays.
            x, y = where(app, "[@click=app.quit]quit")
            await pilot.click(offset=(x + 18, y))
            await pilot.pause(0.2)
            assert app.is_running and app.return_code is None

            agented.touch()  # the turn ends: the work is committed, the task waits for review
            await shows(pilot, "Waiting for review (1)", timeout=30)
            await pilot.press("t")
            await shows(pilot, "Timeline", "Next:")
            await pilot.press("d")
            shown = await shows(pilot, "commit(s) on", "notes.txt", "+a line")
            assert "[@click=app.quit]quit[/]" in shown  # the commit's subject, as written

            # u: the feedback written in $EDITOR, then unblock's turn
            await pilot.press("u")
            await shows(pilot, f"{ref} is working (supervisor pid", timeout=20)
            await shows(pilot, "Waiting for review (1)", timeout=30)
            turns = corral.json("show", ref)["turns"]
            assert [t["content"] for t in turns if t["kind"] == "unblock" and t["role"] == "human"] == [
                "Cover the retry path too."
            ]

            # a: asked first; n keeps it, y merges it and its phases show as they go
            await pilot.press("escape", "a")
            await shows(pilot, f"Accept {ref}: squash-merge its work into its target? [y/N]")
            await pilot.press("n")
            await shows(pilot, f"{ref} was not accepted.")
            assert len(app.screen_stack) == 1  # the answer was the question's: n opened no new task
            assert corral.json("show", ref)["task"]["status"] == "blocked"
            said: list[str] = []  # every message the board shows, as it shows it
            say = app.say
            app.say = lambda words: (said.append(words), say(words))[1]  # type: ignore[method-assign]
            await pilot.press("a")
            await shows(pilot, "[y/N]")
            await pilot.press("y")
            # The unblock's turn committed after the diff was shown: the new commit is named, asked again.
            shown = await shows(pilot, "branch moved since its diff was shown", "Merge these too? [y/N]", timeout=30)
            assert r"\u202eevil\u202c" in shown and "\u202e" not in shown  # the commit named, as text
            asked = len(said)
            await pilot.press("y")
            await shows(pilot, f"{ref} is complete: merged as", timeout=30)
            phases = [w for w in said[asked:] if w.startswith(f"Accepting {ref}: ")]
            assert phases, said  # the accept's phases, as they went
            assert corral.json("show", ref)["task"]["status"] == "complete"
            await shows(pilot, "Nothing unfinished.")
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())


def test_a_resize_lays_the_board_out_again_and_hostile_goals_stay_text(corral: CLI, repo: Path) -> None:
    corral.ok("create", "[bold]Loud[/bold] [@click=app.quit]go[/] <script>x</script> \u202eevil", "--ref", "loud")
    corral.ok("create", "A goal long enough to be clipped on a narrow terminal " * 3, "--ref", "long")

    async def drive() -> None:
        app = board(repo)
        async with app.run_test(size=(160, 30)) as pilot:
            wide = await shows(pilot, "Backlog (2)", "[bold]Loud[/bold] [@click=app.quit]go[/] <script>x</script>")
            assert r"\u202eevil" in wide and "\u202e" not in wide
            assert max(len(line.rstrip()) for line in wide.splitlines()) > 100
            await pilot.resize_terminal(60, 20)
            narrow = await when(pilot, lambda s: len(s.splitlines()) == 20, what="the narrow screen")
            assert all(len(line) <= 60 for line in narrow.splitlines()), narrow
            assert "long" in narrow and "…" in narrow  # the goal clipped to the new width
            await pilot.press("j")  # the mouse too: a click on a row selects it
            x, y = where(app, "  loud ")
            await pilot.click(offset=(x + 3, y))
            await shows(pilot, "Timeline", "Goal:")
            assert app.selected is not None and app.selected[1] == corral.json("show", "loud")["task"]["id"]
            await pilot.press("escape")
            await pilot.pause(0.1)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())


#: The agent for stop, ask and close: it writes lines until a file named "go" beside it exists, then
#: answers with one hostile line and ends.
PATIENT = textwrap.dedent(
    f"""\
    import os, time
    here = os.path.dirname(os.path.abspath(__file__))
    while not os.path.exists(os.path.join(here, "go")):
        print("thinking", flush=True)
        time.sleep(0.1)
    print("the answer is " + {HOSTILE!r}, flush=True)
    """
)


def test_a_refusal_stop_ask_and_close_from_the_board(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(PATIENT)
    go = script.parent / "go"
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Think it over", "--ref", "think")

    async def drive() -> None:
        app = board(repo)
        async with app.run_test(size=(200, 40)) as pilot:
            await shows(pilot, "Backlog (1)", "think ")
            # u is not offered on a backlog task; pressed anyway, it is refused as the engine refuses it
            await pilot.press("u")
            await shows(pilot, "Cannot unblock think: it is backlog", "blocked, conflict, interrupted or submitted")
            assert corral.json("show", "think")["task"]["status"] == "backlog"

            await pilot.press("s")
            await shows(pilot, "Working (1)", "thinking", timeout=20)
            await pilot.press("x")  # stop: the turn ends, the task rests
            await when(pilot, lambda s: "Working (" not in s and "think is " in message(app), timeout=30, what="stop")
            stopped = corral.json("show", "think")["task"]["status"]
            assert stopped != "working" and f"think is {stopped}; the turn was stopped." in message(app)

            # unblocked by the CLI, the board sees it rest; ? asks its agent (read-only)
            go.touch()
            corral.ok("unblock", "think", "-m", "finish up", "--wait", "--timeout", "60")
            await shows(pilot, "Waiting for review (1)", timeout=20)
            await pilot.press("question_mark")
            await shows(pilot, "Your question for think's agent")
            await pilot.press(*"Why?", "enter")
            await shows(pilot, "think is answering", timeout=20)
            await shows(pilot, "Waiting for review (1)", timeout=30)
            await pilot.press("enter")
            shown = await shows(pilot, "Timeline:", "the answer is")
            assert "[@click=app.quit]quit[/]" in shown and "\u202e" not in shown  # the answer, as text

            # c: closed, with the reason typed; Esc on the question does nothing
            await pilot.press("escape", "c")
            await shows(pilot, "Why close think?")
            await pilot.press("escape")
            await shows(pilot, "Nothing written: nothing was done.")
            await pilot.press("c")
            await shows(pilot, "Why close think?")
            await pilot.press(*"Not needed", "enter")
            await shows(pilot, "think is abandoned (closed).", "Nothing unfinished.", timeout=20)
            assert corral.json("show", "think")["task"]["status"] == "abandoned"
            await pilot.press("q")

    asyncio.run(drive())
