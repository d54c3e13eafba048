"""What corral last knew of a project's SQLite database, kept outside it: a store that lost its rows is noticed.

A database can come back wrong without SQLite ever failing: truncated to 0 bytes, replaced by a new
empty one, by another project's file, or by an older copy of itself put back by hand. Each opens
cleanly and reads "No tasks." (or fewer), and a prune would then delete what the rows named.
So corral keeps two facts beside the database, in ``store-record.json`` (0600, written whole by the
engine, which owns the state directory's files: :func:`payload` is what it writes):
the store's id and how many tasks were ever created in it. The database keeps the same two
facts in a row of its own (``shared_docs``, :data:`STORE_DOC`), raised in the transaction that
creates a task; the record is written after that commit (never on a read). Opening compares the
two (:mod:`corral.store.sqlite`): a database that is missing or empty where tasks were created,
that is another store's, or that holds fewer created tasks than the record is refused, and a
refused file that holds a database is moved to ``refused/`` beside it, never deleted.
``corral restore`` and ``corral store migrate`` put a database in place on purpose: the record of
the file they replaced is dropped (:func:`forget`), and the next open records the file now there.

The record is written after the commit, so a crash in between leaves it behind the database
(lower), which only weakens the check until the next task; it is never ahead of what committed.
PostgreSQL's store keeps no such record (its server is the one place its rows live).
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The name of the row (in ``shared_docs``) where a database keeps its own id and count of created tasks.
STORE_DOC = "corral.store"
RECORD_NAME = "store-record.json"
REFUSED_DIR = "refused"


def record_file(db: str | Path) -> Path:
    """Where the record of the database at ``db`` lives: beside it, in the project's private state."""
    return Path(db).with_name(RECORD_NAME)


def refused_dir(db: str | Path) -> Path:
    """Where a database refused at ``db`` is moved, with its ``-wal`` and ``-shm``."""
    return Path(db).with_name(REFUSED_DIR)


def known(db: str | Path) -> tuple[str, int] | None:
    """(store id, tasks created) as last recorded for ``db``; None when there is no usable record."""
    try:
        fd = os.open(record_file(db), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        raw = os.read(fd, 64 * 1024)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return parse(json.loads(raw))
    except (ValueError, RecursionError):
        return None


def parse(doc: Any) -> tuple[str, int] | None:
    """A store doc or record as (store id, tasks created), or None when it is not one."""
    if not isinstance(doc, dict):
        return None
    store_id, created = doc.get("store_id"), doc.get("tasks_created")
    if not isinstance(store_id, str) or not store_id or isinstance(created, bool) or not isinstance(created, int):
        return None
    return store_id, max(0, created)


def payload(db: str | Path, store_id: str, created: int) -> bytes:
    """The record's bytes: the store's id and how many tasks were created in it."""
    doc = {"store_id": store_id, "tasks_created": created, "database": str(db)}
    return json.dumps(doc, sort_keys=True).encode() + b"\n"


def forget(db: str | Path) -> None:
    """Drop the record of ``db``: the database there was put in place on purpose."""
    try:
        os.unlink(record_file(db))
    except FileNotFoundError:
        pass


def read_doc(db: sqlite3.Connection) -> tuple[str, int] | None:
    """The store doc a database keeps of itself, None when it has none (or no ``shared_docs``)."""
    try:
        row = db.execute("SELECT doc FROM shared_docs WHERE name = ?", (STORE_DOC,)).fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    try:
        return parse(json.loads(row[0]))
    except (ValueError, TypeError):
        return None


def move_aside(db: str | Path, when: datetime | None = None) -> Path:
    """Move the database at ``db`` (with its ``-wal`` and ``-shm``) into ``refused/``; where it went."""
    when = when or datetime.now(UTC)
    target_dir = refused_dir(db)
    target_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = "corral-" + when.strftime("%Y%m%dT%H%M%S") + f"{when.microsecond // 1000:03d}Z.db"
    target = target_dir / name
    n = 1
    while target.exists():
        n += 1
        target = target_dir / name.replace(".db", f"-{n}.db")
    for suffix in ("-wal", "-shm", ""):  # the database last: a -wal never sits beside the wrong file
        src = f"{db}{suffix}"
        if os.path.lexists(src):
            os.replace(src, f"{target}{suffix}")
    return target


def refused(db: str | Path) -> list[Path]:
    """The databases refused at ``db`` so far, oldest first."""
    try:
        return sorted(p for p in refused_dir(db).iterdir() if p.name.endswith(".db"))
    except OSError:
        return []
