"""Stores at an older schema version, as an older corral left them: where the migration tests start.

Each opens the store's one transaction, applies the migrations up to ``version`` as that corral did (its
``schema_migrations`` rows with them), and yields the connection so the test adds the rows it keeps, in
the same transaction, committed when the block ends.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from corral.store.migrations import MIGRATIONS
from corral.store.pg_migrations import PG_MIGRATIONS

SCHEMA_MIGRATIONS = (
    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


@contextmanager
def sqlite_at(raw: sqlite3.Connection, version: int) -> Iterator[sqlite3.Connection]:
    """``raw`` (autocommit, its pragmas set) made a schema-``version`` store."""
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(SCHEMA_MIGRATIONS + " STRICT")
    for number, name, migration in MIGRATIONS[:version]:
        migration(raw)
        raw.execute("INSERT INTO schema_migrations VALUES (?, ?, 'x')", (number, name))
    yield raw
    raw.execute("COMMIT")


@contextmanager
def postgres_at(conn: Any, schema: str, version: int) -> Iterator[Any]:
    """Schema ``schema`` made on ``conn`` (autocommit) a schema-``version`` store, ``conn`` set to it."""
    conn.execute(f'CREATE SCHEMA "{schema}"')
    conn.execute(f'SET search_path = "{schema}"')
    with conn.transaction():
        conn.execute(SCHEMA_MIGRATIONS)
        for number, name, script in PG_MIGRATIONS[:version]:
            conn.execute(script)
            conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, 'x')", (number, name))
        yield conn
