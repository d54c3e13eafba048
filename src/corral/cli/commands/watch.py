"""``watch``: the live board of unfinished tasks on a terminal, or one line per change off one.

What it shows is the board (``corral.engine.operations.board``): every row, its group, its
badge and its live fields come from there, worded by ``corral.cli.watch_view``. What it is
read from and when, :mod:`corral.cli.watch_source`; on a terminal, the board as a Textual app
with its task pane and the keys for the whole loop, :mod:`corral.cli.board_app`; off one, a line
per change, :mod:`corral.cli.watch_lines`.
"""

from __future__ import annotations

import os
import sys
import threading

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.watch_lines import stream
from corral.cli.watch_source import INTERVAL_SECONDS, Source, WatchEnded, open_source


def _background() -> bool:
    """Whether the terminal belongs to another job (``corral watch &``): a board there would stop the
    job at its first key-mode change, so it gets the lines instead."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) != os.getpgrp()
    except OSError:  # a terminal, but not this session's: nobody else's foreground either
        return False


def _board(app: App, source: Source, interval: float) -> int:
    """The live board. Its first read runs while Textual loads (a read waits on SQLite and git, an
    import on the interpreter: together they take little more than the longer of the two), so the
    first screen is drawn from a board read already; a read that failed is the app's to say."""
    first = threading.Thread(target=_first_read, args=(source,), name="corral-watch-first-read", daemon=True)
    first.start()
    from corral.cli.board_app import BoardApp  # Textual loads only for the live board

    first.join()
    board = BoardApp(app, source, interval)
    code = board.run() or 0
    if board.failed is not None:
        raise board.failed
    return code


def _first_read(source: Source) -> None:
    try:
        source.read()
    except Exception:  # read again by the app, on its own thread: what is wrong is said there, not here
        source.invalidate()


@click.command(
    epilog="""\b
Examples:
  corral watch                     the live board of this repository's unfinished tasks
  corral watch fix-login upload    only these tasks
  corral watch --all-projects      every repository kept under CORRAL_HOME
  corral watch --plain             one line per change (also what a pipe gets)
  corral watch --json              one JSON Line per change

\b
Keys: ↑/↓ or the mouse select · Enter or a click opens the task's pane (t timeline,
l its live log, d its diff) · n new task · s start · x stop · u unblock (feedback in $EDITOR) ·
? ask · a accept (asks first, its phases shown) · p pair (the agent gets the terminal) ·
c close · r reject · Esc back · q quit. A key that acts is offered where the task's status
allows its operation.
"""
)
@click.argument("tasks", nargs=-1)
@click.option("--all-projects", is_flag=True, help="Every repository kept under CORRAL_HOME.")
@click.option(
    "--plain", is_flag=True, help="One line per change instead of the live board (the default off a terminal)."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=INTERVAL_SECONDS,
    show_default=True,
    metavar="S",
    help="Read the board at least every S seconds (a change is seen within a fraction of a second anyway).",
)
@json_option
@pass_app
def watch(app: App, tasks: tuple[str, ...], all_projects: bool, plain: bool, interval: float) -> int:
    """A live board of the unfinished tasks, grouped by what they need from you.

    It streams: with --json (and --plain, or off a terminal) it prints the rows as they are,
    then one line per change, until it is interrupted.
    """
    app.streaming = True
    source = open_source(app, all_projects, list(tasks))
    try:
        live = not (plain or app.json) and sys.stdin.isatty() and app.stdout.isatty() and not _background()
        if live:
            return _board(app, source, interval)
        return stream(app, source, interval)
    except KeyboardInterrupt:
        return 130
    except WatchEnded as stop:
        return stop.code
    finally:
        source.close()
