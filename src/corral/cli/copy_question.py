"""Opening the project for a command: the question a copy asks on a terminal, the note a move leaves.

:meth:`corral.engine.project.Project.open` refuses a copy with ``RepositoryCopied``; on a
terminal (stdin and stderr both), and not in ``--json`` mode, the person answers here and the
open is retried with the answer. Anywhere else the coded error stands, its hint naming the two
commands (``corral project attach`` and ``corral project fresh``). A repository that moved
is followed without a question; one line on stderr says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from corral.domain.sanitize import display
from corral.engine.api import Project
from corral.errors import RepositoryCopied

CHOICES = {"a": "attach", "attach": "attach", "f": "fresh", "fresh": "fresh"}


def interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def ask(error: RepositoryCopied) -> str | None:
    """``"attach"``, ``"fresh"``, or None (the person declined: the error stands)."""
    import click  # only a copied repository on a terminal asks

    click.echo(display(error.message), err=True)  # it names paths, which may hold anything
    click.echo(
        "  [a]ttach: this checkout takes the tasks over (their worktrees follow it)\n"
        "  [f]resh:  this checkout starts its own, empty task list\n"
        "  [q]uit:   change nothing",
        err=True,
    )
    answer = click.prompt("Share the tasks or start fresh?", default="q", show_default=True, err=True)
    return CHOICES.get(answer.strip().lower())


def open_project(repo: str | Path | None, *, ask_ok: bool, note: Callable[[str], None]) -> Project:
    """``Project.open(repo)``, asking a copy's question when ``ask_ok`` and on a terminal."""
    try:
        project = Project.open(repo)
    except RepositoryCopied as exc:
        if not ask_ok or not interactive():
            raise
        choice = ask(exc)
        if choice is None:
            raise
        project = Project.open(repo, copy=choice)
    if project.moved_from:
        note(f"corral: this repository moved from {project.moved_from}; its tasks followed it to {project.repo}.")
    return project
