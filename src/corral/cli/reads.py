"""The reads people and scripts run most, and the way in that skips click for their plain forms.

``list`` and ``show`` take about ten milliseconds of work, and ``failures --log PATH --harness H``
(a log's incidents, no project) as little as its log asks; loading click to parse them cost more
than the work. :func:`quick` recognises the plain forms — ``list`` and ``show`` with their own
flags, ``failures`` with ``--log``, ``--harness`` and its two switches; ``--json`` and ``--repo
PATH`` in any order — and runs the same body the click command runs (``corral.cli.commands.
tasks_cli``, ``failures_cli``). Anything else (``--help``, a mistyped flag, two filters at once,
a value click would refuse, shell completion) returns None and goes through click, which owns
every message about usage. ``tests/cli/test_quick.py`` holds the grammars equal.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from corral.cli.quick_words import split as split_words
from corral.domain.agent_tools import TOKEN_ENV

if TYPE_CHECKING:
    from corral.cli.app import App

#: ``list``'s filters: flag -> the value of its one ``which`` parameter.
LIST_FILTERS = {"--active": "active", "--blocked": "blocked", "--all": "all"}
#: ``show``'s switches: flag -> its parameter.
SHOW_SWITCHES = {"--details": "details", "--all": "every"}
#: ``failures``' switches the quick way takes: flag -> its parameter.
FAILURES_SWITCHES = {"--history": "history", "--raw": "raw"}
#: The options the quick way takes that take a value (``--opt V`` or ``--opt=V``): ``failures``' own.
FAILURES_VALUES = {"--log": "log", "--harness": "harness"}


class Quick(NamedTuple):
    """A plain form's body, and whether it settles the project first: a reconcile pass may resume a turn,
    and a resumed turn may start the daemon (:func:`corral.cli._announcing` says so)."""

    run: Callable[[], None]
    settles: bool


def list_body(app: App, which: str | None) -> None:
    from corral.cli.render import list_lines
    from corral.engine.api import as_tree, queries

    listing = queries.list_tasks(app.project, which)
    warn(app, listing.problems)
    empty = "No tasks." if which in (None, "all") else f"No {which} tasks."
    rows = as_tree(listing.rows)  # a subtask directly under its parent, with its depth
    app.answer({"tasks": rows}, lambda: list_lines(app, rows) or empty)


def show_body(app: App, task: str, details: bool, every: bool) -> None:
    from corral.cli.render import show_lines
    from corral.engine.api import queries

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


def quick(app: App, args: Sequence[str]) -> Quick | None:
    """What to run for ``args`` if they are a plain ``list``, ``show`` or ``failures --log``; else None
    (click's turn)."""
    if "_CORRAL_COMPLETE" in os.environ or os.environ.get(TOKEN_ENV, "").strip():
        return None  # completion, or a turn's agent: its gates are click's commands' (App.gate)
    if "accept" in args:  # accept's plain forms have a grammar of their own (cli/accept_way.py)
        from corral.cli.accept_way import quick as accept_quick

        body = accept_quick(app, args)
        if body is not None:
            return Quick(body, settles=True)  # a pre-accept turn may start the daemon
    split = split_words(args, FAILURES_VALUES)
    if split is None or not split.words:
        return None
    words, flags, values, repo = split
    command, rest = words[0], words[1:]
    if values and command != "failures":
        return None
    if command == "list" and not rest and len(flags) <= 1 and set(flags) <= LIST_FILTERS.keys():
        which = LIST_FILTERS[flags[0]] if flags else None
        found = Quick(lambda: list_body(app, which), settles=True)
    elif command == "show" and len(rest) == 1 and set(flags) <= SHOW_SWITCHES.keys():
        on = {SHOW_SWITCHES[flag] for flag in flags}
        found = Quick(lambda: show_body(app, rest[0], "details" in on, "every" in on), settles=True)
    elif command == "failures" and not rest and values.keys() == FAILURES_VALUES.keys():
        of_log = _failures_of_log(app, values["--log"], values["--harness"], flags)
        if of_log is None:
            return None
        found = Quick(of_log, settles=False)  # a log outside any task: no project, nothing to resume
    else:
        return None
    if repo is not None:
        app.repo = repo
    return found


def _failures_of_log(app: App, log: str, harness: str, flags: list[str]) -> Callable[[], None] | None:
    """``failures --log LOG --harness HARNESS`` with ``flags``, when click would take them as they are."""
    from corral.cli.failure_pages import HARNESSES, log_body

    if harness not in HARNESSES or not set(flags) <= FAILURES_SWITCHES.keys():
        return None
    on = {FAILURES_SWITCHES[flag] for flag in flags}
    return lambda: log_body(app, log, harness, history="history" in on, raw="raw" in on)
