"""``comment`` and ``journal``: a person's notes on a task, never sent to the agent."""

from __future__ import annotations

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import local_time
from corral.cli.textinput import obtain
from corral.domain.clock import rfc3339
from corral.engine.api import note_json, tasks
from corral.errors import UsageError


@click.command(
    epilog="""\b
Examples:
  corral comment fix-login -m "Checked on staging: still times out at 30 s"
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="TEXT", help="The note (else stdin or $EDITOR).")
@json_option
@pass_app
def comment(app: App, task: str, message: str | None) -> None:
    """Add a note to the task's timeline (the agent does not see it)."""
    text = obtain(message, "Your note on this task (not sent to the agent).")
    if text is None:
        raise UsageError("The comment is empty.", hint=f"corral comment {task} -m 'your note'")
    note = tasks.comment(app.project, task, text, actor=app.actor)
    app.answer({"comment": note_json(note)}, f"Comment added at {rfc3339(note.at)}.")


@click.command(
    epilog="""\b
Examples:
  corral journal fix-login                       read the decision journal
  corral journal fix-login -m "Deferred: retry jitter, tracked in #41"
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="TEXT", help="Append this entry (append-only).")
@json_option
@pass_app
def journal(app: App, task: str, message: str | None) -> None:
    """Read the task's decision journal, or append to it with -m."""
    if message is not None:
        note = tasks.journal_add(app.project, task, message, actor=app.actor)
        app.answer({"entry": note_json(note)}, "Journal entry added.")
        return
    found, entries = tasks.journal(app.project, task)
    app.answer(
        {"task": found.ref, "journal": [note_json(n) for n in entries]},
        [f"{local_time(n.at)}  {n.actor.value}: {n.body}" for n in entries] or f"The journal of {found.ref} is empty.",
    )
