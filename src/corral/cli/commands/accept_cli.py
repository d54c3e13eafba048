"""``accept``: squash-merge a task's work into its target, narrated as it goes.

A module of its own, apart from the other review commands (:mod:`corral.cli.commands.review`): accept's
start is part of its time, so it loads click, the application object and, when it runs, the engine's
accept alone, never what ``diff``, ``pair`` or ``close`` need.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app, streams
from corral.errors import UsageError

if TYPE_CHECKING:
    from corral.engine.api import Moved


@click.command(
    epilog="""\b
Examples:
  corral accept fix-login
  corral accept fix-login --tip 3f2a9c1    merge exactly the commit `corral diff` showed
  corral accept fix-login --json      progress as JSON Lines, then the result
\b
accept merges the branch's tip as it reads it once at the start (after a pre-accept turn, once
more). When the branch moved since `corral diff` showed it, the new commits are named and merged
only once you confirm: asked on a terminal; refused elsewhere (exit 3, tip-moved) unless --tip
names the tip to merge or --yes takes whatever the branch holds.
\b
A squash that would add conflict markers (a <<<<<<< line, then =======, then >>>>>>>) is refused
(exit 3, conflict-markers), naming each file and its lines; --allow-markers merges markers you mean.
\b
With --json, stdout is JSON Lines, one object per line: {"event": "plan", ...}, then one
{"event": "phase", ...} per step, then {"event": "result", ...}; a failure ends the stream
with {"event": "error", "error": {"code", "message", "hint"}}. Human progress goes to stderr.
"""
)
@click.argument("task")
@click.option("--tip", metavar="SHA", help="Merge exactly this commit; refused unless the branch is at it.")
@click.option("-y", "--yes", is_flag=True, help="Merge commits made since the diff was shown without asking.")
@click.option(
    "--allow-markers",
    is_flag=True,
    help="Merge even though the squash adds conflict markers (<<<<<<< … ======= … >>>>>>>): ones you mean.",
)
@json_option
@pass_app
@streams
def accept(app: App, task: str, tip: str | None, yes: bool, allow_markers: bool) -> int:
    """Squash-merge the task's work into its target, verify it, then archive the branch (→ complete).

    It streams: with --json its output is JSON Lines (see below), not one document.
    """
    from corral.engine.api import accept as accepting

    if tip is not None and yes:
        raise UsageError("--tip and --yes are two answers to one question.", hint="Give one of them.")
    result = accepting.accept(
        app.project,
        task,
        actor=app.actor,
        report=lambda event: app.event(event, lambda: _progress(event), aside=True),
        tip=tip,
        confirm=(lambda moved: True) if yes else _asker(app),
        allow_markers=allow_markers,
    )
    waits = result.commit is None and not result.already  # the merge waits on the forge (docs/forge.md)
    if result.warning and result.conflict is None and not waits:  # a kept stash is said once, as the error below
        app.note(f"warning: {result.warning}")
    if result.already:
        said = f"{result.task.ref} was already accepted."
    elif waits:
        said = f"{result.task.ref} is {result.task.status.value}: {result.warning}"
    else:
        said = f"{result.task.ref} is complete: merged as {result.commit[:12] if result.commit else '?'}."
    app.event(
        {
            "event": "result",
            "task": {"ref": result.task.ref, "status": result.task.status.value},
            "commit": result.commit,
            "already_accepted": result.already,
            "warning": result.warning,
        },
        said,
    )
    if result.conflict is not None:  # the merge stands, but the person's local changes are in a stash
        raise result.conflict
    return 0


def _asker(app: App) -> Callable[[Moved], bool] | None:
    """On a terminal, the y/N question about commits that came since the diff; elsewhere none (refused)."""
    if app.json or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None

    def ask(moved: Moved) -> bool:
        since = f"{moved.since[:12]}, the tip its diff showed"
        app.note(f"The branch {moved.branch} moved since {since}; it is at {moved.tip[:12]} now:")
        for line in moved.lines():
            app.note(line)
        if moved.rewritten:
            app.note(f"  ({moved.since[:12]} is no longer on it: its history was rewritten)")
        return click.confirm("Merge these too?", default=False, err=True)

    return ask


def _progress(event: dict[str, object]) -> str:
    if event["event"] == "tip-moved":
        commits = event["commits"]
        assert isinstance(commits, list)
        return f"Merging {event['count']} commit(s) made since the diff was shown: " + "; ".join(map(str, commits))
    if event["event"] == "plan":
        phases = event["phases"]
        assert isinstance(phases, list)
        return "Plan: " + " → ".join(str(p["label"]) for p in phases)
    where = f"[{event['position']}/{event['of']}] " if event.get("position") else ""
    detail = f" — {event['detail']}" if event.get("detail") else ""
    return f"{where}{event['label']}: {event['state']}{detail}"
