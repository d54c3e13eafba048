"""``list`` and ``show``: what they do, and the way in that skips click for the plain forms.

The two commands people run most are reads that take about ten milliseconds of work; loading
click to parse ``list --active`` cost more than the work. :func:`quick` recognises the plain
forms — each command's own flags, ``--json`` and ``--repo PATH`` in any order — and runs the
same body the click command runs (``corral.cli.commands.tasks_cli``). Anything else (``--help``,
a mistyped flag, two filters at once, shell completion) returns None and goes through click,
which owns every message about usage. ``tests/cli/test_quick.py`` holds the two grammars equal.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from corral.cli.app import App
from corral.cli.render import list_lines, show_lines
from corral.domain.agent_tools import TOKEN_ENV
from corral.engine.api import as_tree, queries

#: ``list``'s filters: flag -> the value of its one ``which`` parameter.
LIST_FILTERS = {"--active": "active", "--blocked": "blocked", "--all": "all"}
#: ``show``'s switches: flag -> its parameter.
SHOW_SWITCHES = {"--details": "details", "--all": "every"}


def list_body(app: App, which: str | None) -> None:
    listing = queries.list_tasks(app.project, which)
    warn(app, listing.problems)
    empty = "No tasks." if which in (None, "all") else f"No {which} tasks."
    rows = as_tree(listing.rows)  # a subtask directly under its parent, with its depth
    app.answer({"tasks": rows}, lambda: list_lines(app, rows) or empty)


def show_body(app: App, task: str, details: bool, every: bool) -> None:
    shown = queries.show_task(app.project, task, last_turns=None if every or app.json else queries.PAGE_TURNS)
    warn(app, shown.problems)
    app.answer(
        {k: v for k, v in shown.doc.items() if k != "schema_version"},
        lambda: show_lines(
            app, shown.doc, details=details, merges_into=shown.merges_into, earlier_turns=shown.earlier_turns
        ),
    )


def warn(app: App, problems: list[str]) -> None:
    for problem in problems:
        app.note(f"warning: could not reconcile {problem} (see corral doctor)")


def quick(app: App, args: Sequence[str]) -> Callable[[], None] | None:
    """The body to run for ``args`` if they are a plain ``list`` or ``show``; else None (click's turn)."""
    if "_CORRAL_COMPLETE" in os.environ or os.environ.get(TOKEN_ENV, "").strip():
        return None  # completion, or a turn's agent: its gates are click's commands' (App.gate)
    words: list[str] = []
    flags: list[str] = []
    repo: str | None = None
    it = iter(args)
    for arg in it:
        if arg == "--repo":
            repo = next(it, None)
            if repo is None or repo.startswith("-"):
                return None
        elif arg.startswith("--repo="):
            repo = arg.removeprefix("--repo=")
        elif arg == "--json":
            continue
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            words.append(arg)
    if len(set(flags)) != len(flags) or not words:
        return None
    command, rest = words[0], words[1:]
    if command == "list" and not rest and len(flags) <= 1 and set(flags) <= LIST_FILTERS.keys():
        which = LIST_FILTERS[flags[0]] if flags else None
        body: Callable[[], None] = lambda: list_body(app, which)  # noqa: E731
    elif command == "show" and len(rest) == 1 and set(flags) <= SHOW_SWITCHES.keys():
        on = {SHOW_SWITCHES[flag] for flag in flags}
        body = lambda: show_body(app, rest[0], "details" in on, "every" in on)  # noqa: E731
    else:
        return None
    if repo is not None:
        app.repo = repo
    return body
