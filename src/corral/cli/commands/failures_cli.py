"""``failures``: a task's incidents — what went wrong on the way, apart from where it is."""

from __future__ import annotations

import shlex

import click

from corral.cli.app import App
from corral.cli.failure_pages import HARNESSES, answer, log_body
from corral.cli.options import json_option, pass_app
from corral.engine.api import dismiss_incident, queries
from corral.errors import UsageError


@click.command(
    epilog="""\b
Examples:
  corral failures fix-login              what needs action (and a one-line account of the rest)
  corral failures fix-login --history    every incident, recovered ones included
  corral failures fix-login --raw --json the whole excerpts and log paths, as JSON
  corral failures --log output.log --harness pi   scan a log outside any task
  corral failures fix-login --dismiss supervision:watchdog -m "the proxy was down; fixed"
"""
)
@click.argument("task", required=False)
@click.option("--history", is_flag=True, help="Every incident: unclassified, expected, recovered, superseded too.")
@click.option("--raw", is_flag=True, help="Whole excerpts and full log paths instead of compact rows.")
@click.option("--session", metavar="ID", help="Another session of the task than its current one.")
@click.option("--log", "log", metavar="PATH", help="Scan this output log instead of a task's (with --harness).")
@click.option("--harness", type=click.Choice(HARNESSES), help="Whose log --log is.")
@click.option("--cursor", metavar="C", help="Go on from a page's next_cursor.")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=0),
    metavar="N",
    help="A page of at most N bytes of text: incident rows go first, the correctness note stays whole.",
)
@click.option("--dismiss", "dismiss", metavar="ID", help="Close one incident that needs action (with -m why).")
@click.option("-m", "--message", metavar="WHY", help="Why you dismiss it: kept with the incident in history.")
@json_option
@pass_app
def failures(
    app: App,
    task: str | None,
    history: bool,
    raw: bool,
    session: str | None,
    log: str | None,
    harness: str | None,
    cursor: str | None,
    max_bytes: int | None,
    dismiss: str | None,
    message: str | None,
) -> None:
    """A task's incidents: tool, model and supervision failures, labelled, apart from its status."""
    if dismiss is not None or message is not None:
        if task is None or dismiss is None or message is None or log is not None:
            raise UsageError(
                "--dismiss closes one incident of a task, and needs -m with why.",
                hint=(
                    f"See the incidents' ids: corral failures {shlex.quote(task)}"
                    if task is not None
                    else "Give the task, --dismiss with an incident's id (corral failures shows them) and -m with why."
                ),
            )
        closed = dismiss_incident(app.project, task, dismiss, message)
        app.answer(
            {"dismissed": closed.to_json()},
            lambda: [
                f"Dismissed {closed.id} ({closed.summary}): {closed.reason}",
                f"History: corral failures {task} --history",
            ],
        )
        return
    if log is not None:
        if task is not None or harness is None:
            raise UsageError(
                "--log scans one log and needs --harness, without a task.",
                hint=f"corral failures --log {shlex.quote(str(log))} --harness {harness or 'claude'}",
            )
        log_body(app, log, harness, history=history, raw=raw, cursor=cursor, max_bytes=max_bytes)
        return
    if task is None:
        raise UsageError("Name a task (or a log with --log).", hint="corral failures T")
    found = queries.failures(app.project, task, history=history, raw=raw, session=session)
    again = f"corral failures {task}"
    answer(
        app,
        found.doc,
        found.problems,
        again,
        history=history,
        raw=raw,
        session=session,
        cursor=cursor,
        max_bytes=max_bytes,
    )
