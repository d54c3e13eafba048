"""``backup`` and ``restore``: a copy of the database taken online, and putting one back."""

from __future__ import annotations

from pathlib import Path

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app


@click.command(
    epilog="""\b
Examples:
  corral backup                      a timestamped file in the state directory's backups/
  corral backup --to ~/corral.db     anywhere else (a new file; never overwritten)
\b
Through SQLite's online backup: the daemon and running turns may keep writing meanwhile;
the copy is consistent and is one file, private to you (0600).
"""
)
@click.option("--to", "to", metavar="PATH", type=click.Path(dir_okay=False, path_type=Path), help="Where to write it.")
@json_option
@pass_app
def backup(app: App, to: Path | None) -> None:
    """Copy the database, consistent and online, to a new file."""
    made = app.project.backup(to)
    app.answer({"backup": {"path": str(made)}}, f"Backed up to {made}")


@click.command(
    epilog="""\b
Examples:
  corral restore ~/.local/share/corral/projects/…/backups/corral-20261201T093000000Z.db
  corral restore ./corral.db.recovered --force
\b
The file's schema is checked first. The database it replaces is kept in backups/ as
corral-<time>-before-restore.db, so a restore loses nothing. Refused while a daemon runs
or a turn is working (they hold the database open) unless --force.
"""
)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Restore even while a daemon runs or a turn is working.")
@json_option
@pass_app
def restore(app: App, path: Path, force: bool) -> None:
    """Put a backup back in place of the database (the current one is kept first)."""
    version, kept = app.project.restore(path, force=force)
    app.answer(
        {"restored": {"path": str(path.expanduser().absolute()), "schema": version, "kept": kept}},
        [
            f"Restored {path} (schema {version}).",
            f"The database it replaced is kept at {kept}." if kept else "There was no database to replace.",
        ],
    )
