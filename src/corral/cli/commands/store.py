"""``backup`` and ``restore``: a copy of the database taken online, and putting one back; ``store migrate``."""

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


@click.group(
    epilog="""\b
Examples:
  corral store migrate --to postgres     copy this project's SQLite history into PostgreSQL
  corral store migrate --to sqlite       and back into corral.db (the file it replaces is kept)
"""
)
def store() -> None:
    """Where this project's records live: SQLite (the default) or PostgreSQL (database_url)."""


@store.command(
    "migrate",
    epilog="""\b
Examples:
  corral config set database_url postgresql://me@db.example:5432/corral
  corral store migrate --to postgres
  corral store migrate --to postgres --replace   the schema already holds records: replace them
  corral store migrate --to sqlite               back to corral.db; then unset database_url
\b
The source is read in one snapshot and the destination written in one transaction, checked
before it commits: each table's row count and a SHA-256 over every row must match the
source's, or nothing is written. database_url comes only from your own settings or
CORRAL_DATABASE_URL. Refused while the daemon runs or a turn is working, unless --force.
""",
)
@click.option("--to", "to", type=click.Choice(["postgres", "sqlite"]), required=True, help="Where to copy the records.")
@click.option("--replace", is_flag=True, help="Replace the records the PostgreSQL schema already holds.")
@click.option("--force", is_flag=True, help="Copy even while a daemon runs or a turn is working.")
@json_option
@pass_app
def store_migrate(app: App, to: str, replace: bool, force: bool) -> None:
    """Copy every record to PostgreSQL or back to SQLite, verified by counts and a checksum."""
    from corral.engine.api import migrate

    done = migrate(app.project, to, replace=replace, force=force)
    rows = ", ".join(f"{n} {table}" for table, n in done.copied.counts.items())
    after = (
        "This project now reads and writes PostgreSQL (database_url is set)."
        if to == "postgres"
        else "Unset database_url (corral config unset database_url) to use it."
    )
    app.answer(
        {"migrated": done.as_view()},
        [
            f"Copied {done.source} to {done.destination}: {rows}.",
            f"Verified: the counts and the checksum {done.copied.checksum[:16]} match.",
            *([f"The file it replaced is kept at {done.kept}."] if done.kept else []),
            after,
        ],
    )
