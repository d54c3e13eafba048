"""The store tests' ``store`` fixture: each test once on a fresh SQLite file, once on a fresh PostgreSQL schema.

A module takes it as ``store = either.store``, beside its ``pg_server`` and ``pg_schema``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.store import SQLiteStore
from corral.store.postgres import PostgresStore
from tests.conftest import FakeClock


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore | PostgresStore]:
    if request.param == "sqlite":
        db: SQLiteStore | PostgresStore = SQLiteStore(tmp_path / "corral.db", clock=clock)
    else:
        url, schema = request.getfixturevalue("pg_server"), request.getfixturevalue("pg_schema")
        db = PostgresStore(url, schema=schema, clock=clock, mark_seconds=0)
    yield db
    db.close()
