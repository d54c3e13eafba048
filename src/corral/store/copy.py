"""Copy every record of one SQL store into another, verified: SQLite to PostgreSQL and back.

A copy is row for row: ids, timestamps, the status changes' ids and the order sessions and
notes were written in (their ``rowid``) are kept, so the copy reads back exactly as the
original. It reads the source in one snapshot and writes the destination in one transaction,
and before that transaction commits it reads the destination back and compares each table's
row count and a SHA-256 over its rows with the source's: a copy that differs in any value is
rolled back, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from corral.domain.sanitize import without_nul
from corral.errors import RefusedError, StoreError
from corral.store.sqltx import _TASK_COLUMNS, SQLTx

#: Each table's columns, in the order the tables are filled (a row's references come first).
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tasks", (*(c.strip() for c in _TASK_COLUMNS.split(",")), "finished_at")),
    (
        "sessions",
        (
            "rowid",
            "id",
            "task_id",
            "worktree",
            "branch",
            "base_commit",
            "git_start_sha",
            "harness_session_id",
            "interrupt_reason",
            "interrupt_exit_code",
            "interrupt_at",
            "interrupt_logs",
            "consecutive_interruptions",
            "auto_resumed",
            "outcome",
            "created_at",
            "ended_at",
        ),
    ),
    (
        "turns",
        (
            "id",
            "task_id",
            "session_id",
            "sequence",
            "role",
            "actor",
            "kind",
            "content",
            "feedback_delivery",
            "delivered",
            "started_at",
            "ended_at",
            "usage",
            "failure",
            "details",
            "command_id",
        ),
    ),
    ("attempts", ("turn_id", "number", "started_at", "ended_at", "outcome", "failure_class", "failure")),
    ("status_changes", ("id", "task_id", "from_status", "to_status", "actor", "reason", "at")),
    (
        "violations",
        (
            "task_id",
            "session_id",
            "path",
            "turn_id",
            "decision",
            "decided_by",
            "decided_at",
            "created_at",
            "check_from",
        ),
    ),
    ("notes", ("rowid", "id", "task_id", "kind", "actor", "body", "at")),
    ("processes", ("task_id", "kind", "pid", "command_id", "started_at", "owner")),
    ("workers", ("id", "host", "pid", "state", "lease_seconds", "started_at", "heartbeat_at")),
    (
        "leases",
        (
            "task_id",
            "command_id",
            "epoch",
            "state",
            "plan",
            "worker_id",
            "host",
            "worktree",
            "job_id",
            "queued_at",
            "claimed_at",
            "stop_by",
            "unpushed",
        ),
    ),
    ("shipped_files", ("task_id", "path", "offset_bytes", "data")),
    ("live_turns", ("task_id", "command_id", "doc", "at")),
    ("shared_docs", ("name", "doc", "at")),
)

Rows = dict[str, list[tuple[Any, ...]]]


class Copied(Struct, frozen=True):
    """What a copy wrote: each table's row count and one checksum over every row, equal on both sides."""

    counts: dict[str, int]
    checksum: str

    def to_json(self) -> dict[str, Any]:
        """What was copied, as --json gives it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc


def read_all(tx: SQLTx) -> Rows:
    """Every row of every table, as plain tuples, in one transaction."""
    rows: Rows = {}
    for table, columns in TABLES:
        rows[table] = [tuple(r) for r in tx.execute(f"SELECT {', '.join(columns)} FROM {table}")]
    return rows


def summary(rows: Rows) -> Copied:
    """Counts and a checksum of ``rows`` that do not depend on the order a database returned them in."""
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    for table, _columns in TABLES:
        lines = sorted(
            json.dumps([_comparable(v) for v in r], ensure_ascii=False, separators=(",", ":"))
            for r in rows.get(table, ())
        )
        counts[table] = len(lines)
        digest.update(f"{table}\0{len(lines)}\0".encode())
        for line in lines:
            digest.update(line.encode())
            digest.update(b"\n")
    return Copied(counts=counts, checksum=digest.hexdigest())


def _comparable(value: Any) -> Any:
    """A column's value as both databases return it alike: text as PostgreSQL keeps it (a NUL as its
    escape), bytes as hex (SQLite gives ``bytes``, PostgreSQL's driver may give a ``memoryview``)."""
    if type(value) is str:
        return without_nul(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


def is_empty(tx: SQLTx) -> bool:
    return all(tx.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0 for table, _ in TABLES)


def clear(tx: SQLTx) -> None:
    """Delete every record (the destination's, replaced by a copy), in one transaction with the copy."""
    tx.execute("UPDATE tasks SET parent_id = NULL, session_id = NULL")
    for table, _columns in reversed(TABLES):
        tx.execute(f"DELETE FROM {table}")


def write_all(tx: SQLTx, rows: Rows) -> None:
    """Insert ``rows`` into an empty store; a task's parent is set once every task is in."""
    parents: list[tuple[str, str]] = []
    for table, columns in TABLES:
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})"
        parent_at = columns.index("parent_id") if table == "tasks" else -1
        for row in _ordered(table, columns, rows.get(table, ())):
            if parent_at >= 0 and row[parent_at] is not None:
                parents.append((row[parent_at], row[0]))
                row = (*row[:parent_at], None, *row[parent_at + 1 :])
            tx.execute(sql, row)
    for parent, child in parents:
        tx.execute("UPDATE tasks SET parent_id = ? WHERE id = ?", (parent, child))
    follow = getattr(tx, "follow_identities", None)
    if follow is not None:
        follow()


def _ordered(table: str, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # In the order they were written (by rowid): identities continue from there.
    first = columns[0]
    if first == "rowid" and table in ("sessions", "notes"):
        return sorted(rows, key=lambda r: int(r[0]))
    return list(rows)


def copy_store(source: Any, dest: Any, *, replace: bool = False) -> Copied:
    """Copy every record of ``source`` into ``dest`` (both SQL stores), verified before it commits.

    ``dest`` must hold no records, unless ``replace``: then its records are deleted in the same
    transaction (nothing changes if the copy fails).
    """
    with source.read() as stx:
        rows = read_all(stx)
    want = summary(rows)
    with dest.write() as dtx:
        if not is_empty(dtx):
            if not replace:
                raise RefusedError(
                    f"{dest.location} already holds corral records; nothing was copied.",
                    code="store-not-empty",
                    hint="Pass --replace to replace them with this copy (in one transaction), "
                    "or point database_url at another database.",
                )
            clear(dtx)
        write_all(dtx, rows)
        got = summary(read_all(dtx))
        if got != want:
            differ = [t for t in want.counts if want.counts[t] != got.counts.get(t)]
            raise StoreError(
                f"The copy into {dest.location} does not match its source "
                f"({', '.join(differ) or 'a value differs'}; checksum {got.checksum[:12]} ≠ {want.checksum[:12]}). "
                "It was rolled back.",
                code="store-copy-mismatch",
                hint="Nothing was changed. Report this with `corral doctor`'s output.",
            )
    return want


def backup_as_sqlite(source: Any, dest: str | Path) -> Copied:
    """A consistent copy of ``source`` as a new SQLite file at ``dest`` (0600, one file)."""
    import sqlite3
    from contextlib import closing

    from corral.store.sqlite import SQLiteStore, _fsync, _unlink

    target = Path(dest)
    if target.exists():
        raise StoreError(f"{target} already exists; corral never overwrites a backup.", code="backup-exists")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    _unlink(tmp)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        copy = SQLiteStore(tmp)
        try:
            copied = copy_store(source, copy)
        finally:
            copy.close()
        with closing(sqlite3.connect(tmp, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(str(target.parent))
    except BaseException:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            _unlink(leftover)
        raise
    return copied
