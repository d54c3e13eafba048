"""``watch`` off a terminal (``--plain``, ``--json``, a pipe): the rows as they are, then one line per change."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from corral.cli import watch_view as view
from corral.cli.app import App
from corral.cli.watch_source import POLL_SECONDS, Source, signals
from corral.engine.api import board as boards


def stream(app: App, source: Source, interval: float) -> int:
    """``--plain`` and ``--json``: the rows as they are, then one line (or JSON Line) per change."""
    shown: dict[view.Key, tuple[Any, ...]] = {}
    refs: dict[view.Key, str] = {}
    problems: set[str] = set()
    first = True
    with signals():
        while True:
            if source.due(interval):
                board = source.read()
                _changes(app, board, shown, refs, first=first, named=source.only is not None)
                for problem in board.problems:
                    if problem not in problems:
                        app.event({"event": "problem", "problem": problem}, f"warning: {problem}", aside=True)
                problems = set(board.problems)
                first = False
            time.sleep(POLL_SECONDS)


#: What ``--plain`` remembers of a task it said was finished.
_FINISHED = ("finished",)


def _changes(
    app: App,
    board: boards.Board,
    shown: dict[view.Key, tuple[Any, ...]],
    refs: dict[view.Key, str],
    *,
    first: bool,
    named: bool,
) -> None:
    """A line for each row that is new, changed, finished or gone since ``shown`` (what was said of
    each); ``first``: the first read (each row is listed); ``named``: the tasks were named."""
    many = len(board.projects) > 1
    clock = datetime.now().strftime("%H:%M:%S")
    titles = {view.key_of(row): g["title"] for g in board.groups for row in g["rows"]}
    now = {view.key_of(row): row for row in board.rows()}
    finished = {view.key_of(r): r for r in board.finished}

    def say(change: str, key: view.Key, row: dict[str, Any], title: str | None) -> None:
        refs[key] = view.ref_text(row, many)
        app.event(
            {"event": "task", "change": change, "task": row},
            lambda: view.plain_line(row, many=many, clock=clock, title=title),
        )

    for key, row in now.items():
        was, mark = shown.get(key), view.change_key(row)
        if was != mark:
            say("listed" if first else "added" if was is None else "changed", key, row, titles[key])
        shown[key] = mark
    for key in [k for k in shown if k not in now and shown[k] != _FINISHED]:
        if key in finished:
            say("finished", key, finished[key], None)
            shown[key] = _FINISHED
        else:  # deleted, or out of the board's sight
            del shown[key]
            app.event(
                {"event": "task", "change": "removed", "task": {"id": key[1], "project_path": key[0]}},
                f"{clock}  {refs.pop(key, key[1])}  removed",
            )
    if first and named:
        for key, row in finished.items():  # a task named that has finished already: how it ended
            say("listed", key, row, None)
            shown[key] = _FINISHED
