"""``corral store migrate --to postgres|sqlite``: copy a project's whole history between its SQLite
file and its PostgreSQL schema, verified by each table's count and a checksum over every row.

To PostgreSQL: the state directory's ``corral.db`` is read in one snapshot and written into the
project's schema of ``database_url`` in one transaction (refused when the schema already holds
records, unless ``replace``). Back to SQLite: the schema is copied into a new file beside
``corral.db``, which then takes its place; the file it replaces is kept in ``backups/`` first,
so neither direction loses anything. Refused while the daemon runs or a turn is working (they
write meanwhile, and their writes would miss the copy).
"""

from __future__ import annotations

import os
from typing import Any

from msgspec import Struct

from corral.adapters.locks import is_locked
from corral.domain.status import Status
from corral.engine.private_state import make_private_dir, private_umask
from corral.engine.project import Project, backups_dir, stamp
from corral.errors import DaemonRunning, RefusedError, StoreMissing, UsageError
from corral.store import SQLiteStore, Store
from corral.store.copy import Copied, copy_store

TARGETS = ("postgres", "sqlite")


class Migrated(Struct, frozen=True):
    to: str
    source: str
    destination: str
    copied: Copied
    kept: str | None = None  # where the file the copy replaced was kept (to sqlite)

    def as_view(self) -> dict[str, Any]:
        """The migration as --json gives it: a view (the copy's counts and checksum inline)."""
        return {
            "to": self.to,
            "source": self.source,
            "destination": self.destination,
            **self.copied.to_json(),
            "kept": self.kept,
        }


def _refuse_while_in_use(project: Project, store: Store) -> None:
    if is_locked(project.paths.daemon_lock):
        raise DaemonRunning(
            "A corral daemon runs for this repository and writes to the database; nothing was copied.",
            hint="Stop it first (`corral daemon stop`), or pass --force.",
        )
    with store.read() as tx:
        working = [t.ref for t in tx.tasks([Status.WORKING])]
    if working:
        raise RefusedError(
            f"A turn is working on {', '.join(working)}; its supervisor writes to the database. Nothing was copied.",
            code="turn-working",
            hint="Wait for it (`corral wait T`) or stop it (`corral stop T`), or pass --force.",
        )


def migrate(project: Project, to: str, *, replace: bool = False, force: bool = False) -> Migrated:
    """Copy the project's records to ``to`` ("postgres" or "sqlite"), verified before it commits."""
    if to not in TARGETS:
        raise UsageError(f"--to is postgres or sqlite, not {to!r}.")
    if not project.placement.over_network():
        project.placement.shared_store(project, create=False)  # refused here, saying how to set the database
    project.close()
    if to == "postgres":
        return _to_postgres(project, replace=replace, force=force)
    return _to_sqlite(project, force=force)


def _to_postgres(project: Project, *, replace: bool, force: bool) -> Migrated:
    db = project.paths.db
    if not db.is_file() or db.stat().st_size == 0:
        raise StoreMissing(f"There is no SQLite database at {db} to copy.", hint="Nothing was changed.")
    source = SQLiteStore(db, clock=project.clock, create=False)
    try:
        if not force:
            _refuse_while_in_use(project, source)
        dest = project.placement.shared_store(project, create=True)
        try:
            copied = copy_store(source, dest, replace=replace)
            return Migrated("postgres", source.location, dest.location, copied)
        finally:
            dest.close()
    finally:
        source.close()


def _to_sqlite(project: Project, *, force: bool) -> Migrated:
    source = project.placement.shared_store(project, create=False)
    try:
        if not force:
            _refuse_while_in_use(project, source)
        db = project.paths.db
        tmp = db.with_name(f"{db.name}.migrating.{os.getpid()}")
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)
        try:
            with private_umask():
                dest = SQLiteStore(tmp, clock=project.clock)
                try:
                    copied = copy_store(source, dest)
                finally:
                    dest.close()
                make_private_dir(backups_dir(project.paths))
                aside = backups_dir(project.paths) / f"corral-{stamp(project.clock())}-before-migrate.db"
                kept = SQLiteStore.restore_file(db, tmp, aside)
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
                leftover.unlink(missing_ok=True)
        return Migrated("sqlite", source.location, str(db), copied, kept)
    finally:
        source.close()
