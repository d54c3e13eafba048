"""The Store conformance suite (tests/store/conformance.py) run against ``SQLiteStore`` on a temp file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.store import SQLiteStore
from tests.conftest import FakeClock
from tests.store.conformance import *  # noqa: F403  (the test_* functions of the suite)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    db = SQLiteStore(tmp_path / "state" / "corral.db", clock=clock)
    yield db
    db.close()
