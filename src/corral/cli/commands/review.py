"""``close``, ``reject`` and ``reopen``: ending a task's work, or bringing it back."""

from __future__ import annotations

import click

from corral.cli.app import App, json_option, pass_app
from corral.cli.textinput import obtain
from corral.engine import projection, tasks
from corral.errors import UsageError


def _abandon(app: App, task: str, message: str | None, how: str) -> None:
    reason = obtain(message, f"Why {'close' if how == 'close' else 'reject'} this task?")
    if reason is None:
        raise UsageError(f"{how.capitalize()} needs a reason.", hint=f"corral {how} {task} -m 'why'")
    ended = tasks.abandon(app.project, task, reason=reason, actor=app.actor, how=how)
    if ended.warning:
        app.note(ended.warning)
    if app.json:
        with app.project.store.read() as tx:
            v = projection.view(tx, ended.task)
        app.emit({"task": v.task_json(), "archived": ended.archived})
        return
    app.say(f"{ended.task.ref} is abandoned ({'closed' if how == 'close' else 'rejected'}).")
    if ended.archived:
        app.say(
            f"Its work is kept under refs/corral/archive/{ended.task.ref}; "
            f"corral reopen {ended.task.ref} brings it back."
        )


@click.command(
    epilog="""\b
Examples:
  corral close fix-login -m "Duplicate of login-rework"
  echo "Won't do: the endpoint is going away" | corral close fix-login
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="WHY", help="Why (else read from stdin or $EDITOR).")
@json_option
@pass_app
def close(app: App, task: str, message: str | None) -> None:
    """Close a task without accepting its work (→ abandoned; the work is archived)."""
    _abandon(app, task, message, "close")


@click.command(
    epilog="""\b
Examples:
  corral reject fix-login -m "Wrong approach: the timeout belongs in the client"
"""
)
@click.argument("task")
@click.option("-m", "--message", metavar="WHY", help="Why (else read from stdin or $EDITOR).")
@json_option
@pass_app
def reject(app: App, task: str, message: str | None) -> None:
    """Reject a task's work (→ abandoned; the work is archived)."""
    _abandon(app, task, message, "reject")


@click.command(
    epilog="""\b
Examples:
  corral reopen fix-login                       an abandoned task
  corral reopen fix-login --reason "The fix regressed on Safari"   an accepted one
"""
)
@click.argument("task")
@click.option("--reason", metavar="WHY", help="Why (required for an accepted task).")
@json_option
@pass_app
def reopen(app: App, task: str, reason: str | None) -> None:
    """Bring back a complete or abandoned task (→ blocked with its work, or backlog)."""
    reopened = tasks.reopen(app.project, task, reason=reason, actor=app.actor)
    with app.project.store.read() as tx:
        v = projection.view(tx, reopened)
    if app.json:
        app.emit({"task": v.task_json(), "next": v.next})
        return
    app.say(f"{reopened.ref} is {reopened.status.value} again.")
    if v.next:
        app.say(f"Next: {v.next}")
