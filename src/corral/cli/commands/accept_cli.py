"""``accept``: squash-merge a task's work into its target, narrated as it goes.

A module of its own, apart from the other review commands (:mod:`corral.cli.commands.review`): accept's
start is part of its time, so it loads the engine's accept alone, never what ``diff``, ``pair`` or
``close`` need. Its body is :func:`corral.cli.accept_way.run`, which the plain forms reach without click.
"""

from __future__ import annotations

import click

from corral.cli.accept_way import run
from corral.cli.app import App
from corral.cli.options import json_option, pass_app, streams


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
    return run(app, task, tip, yes, allow_markers)
