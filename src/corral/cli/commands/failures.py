"""``failures``: a task's incidents — what went wrong on the way, apart from where it is."""

from __future__ import annotations

from typing import Any

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import incident_line
from corral.engine.operations import queries
from corral.errors import UsageError

HARNESSES = ("claude", "codex", "pi")


@click.command(
    epilog="""\b
Examples:
  corral failures fix-login              what needs action (and a one-line account of the rest)
  corral failures fix-login --history    every incident, recovered ones included
  corral failures fix-login --raw --json the whole excerpts and log paths, as JSON
  corral failures --log output.log --harness pi   scan a log outside any task
"""
)
@click.argument("task", required=False)
@click.option("--history", is_flag=True, help="Every incident: unclassified, expected, recovered, superseded too.")
@click.option("--raw", is_flag=True, help="Whole excerpts and full log paths instead of compact rows.")
@click.option("--session", metavar="ID", help="Another session of the task than its current one.")
@click.option("--log", "log", metavar="PATH", help="Scan this output log instead of a task's (with --harness).")
@click.option("--harness", type=click.Choice(HARNESSES), help="Whose log --log is.")
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
) -> None:
    """A task's incidents: tool, model and supervision failures, labelled, apart from its status."""
    if log is not None:
        if task is not None or harness is None:
            raise UsageError(
                "--log scans one log and needs --harness, without a task.",
                hint="corral failures --log PATH --harness pi",
            )
        found = queries.failures_of_log(log, harness, history=history, raw=raw)
    elif task is None:
        raise UsageError("Name a task (or a log with --log).", hint="corral failures T")
    else:
        found = queries.failures(app.project, task, history=history, raw=raw, session=session)
    for problem in found.problems:
        app.note(f"warning: could not reconcile {problem} (see corral doctor)")
    doc = found.doc
    app.answer({"failures": doc}, lambda: lines(doc))


def lines(doc: dict[str, Any]) -> list[str]:
    """The incident rows, then the one-line account and the correctness note (kept whole)."""
    return [*(incident_line(r) for r in doc["rows"]), doc["line"], doc["note"]]
