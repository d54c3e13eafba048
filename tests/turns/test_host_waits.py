"""A command's own waits are data too: how long a write waits on a store another process holds, and
how long ``corral stop`` waits for the turn to end. User-only settings with ranges, resolved once when
a project opens (``Project.waits``), where a module constant once stood: a repository's ``corral.toml``
can never set them, and the person's own file or environment can, down to a millisecond.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from corral.domain.delays import HOST_NAMES, HostWaits
from corral.domain.settings import BY_NAME, Trust, default, host_owned
from corral.engine.config import load_config
from corral.engine.project import Project
from corral.errors import ConfigError, StoreError
from corral.store import postgres, sqlite
from tests.cli.helpers import json_error


def test_each_wait_is_a_user_only_setting_with_a_range_and_the_stores_default_is_the_schemas() -> None:
    for name in HOST_NAMES:
        s = BY_NAME[name]
        assert s.kind is float and s.trust is Trust.USER_ONLY and host_owned(name), name
        assert s.least == 0.001 and s.most == 3600, name
        assert getattr(HostWaits(), name) == default(name, float), name
    assert HostWaits().store_busy_timeout == sqlite.BUSY_TIMEOUT == postgres.BUSY_TIMEOUT == 10.0
    assert HostWaits().stop_wait == 15.0
    with pytest.raises(ValueError, match=r"stop_wait is 0\.0, but it must be a number from 0\.001 to 3600"):
        HostWaits(stop_wait=0.0)  # none is made out of its range


def test_the_waits_resolve_from_the_persons_file_and_environment(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text("store_busy_timeout = 0.5\nstop_wait = 2\n")
    config = load_config(user_file=user, project_file=None, env={"CORRAL_STOP_WAIT": "0.25"})
    assert HostWaits.of(config) == HostWaits(store_busy_timeout=0.5, stop_wait=0.25)
    with pytest.raises(ConfigError, match="store_busy_timeout"):
        load_config(user_file=None, project_file=None, env={"CORRAL_STORE_BUSY_TIMEOUT": "0"})


def test_an_opened_projects_store_waits_the_persons_busy_timeout(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_STORE_BUSY_TIMEOUT", "0.25")
    project = Project.open(repo)
    try:
        assert project.waits == HostWaits(store_busy_timeout=0.25)
        store = project.store
        assert isinstance(store, sqlite.SQLiteStore) and store.busy_timeout == 0.25
        with store.read() as tx:
            tx.refs()
        db = store._db
        assert isinstance(db, sqlite3.Connection) and db.execute("PRAGMA busy_timeout").fetchone()[0] == 250
        blocker = sqlite3.connect(project.paths.db, isolation_level=None)
        try:  # another process's write: ours is refused as busy once its wait is over, in a plain error
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as info, store.write():
                pass
            assert info.value.code == "store-busy"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
    finally:
        project.close()


def test_a_wait_from_a_repositorys_corral_toml_is_refused(repo: Path, corral) -> None:  # type: ignore[no-untyped-def]
    (repo / "corral.toml").write_text("store_busy_timeout = 0.001\nstop_wait = 3000\n")
    doc = corral.json("config", "show")
    for name in HOST_NAMES:
        got = doc["settings"][name]
        assert (got["value"], got["source"]) == (default(name, float), "default"), name
        (said,) = [item for item in doc["ignored"] if item.startswith(f"{name} in ")]
        assert "a repository may not set it" in said and f"CORRAL_{name.upper()}" in said, said
    err = json_error(corral("config", "set", "stop_wait", "0.001", "--scope", "project", "--json"), 2)
    assert err["code"] == "config-invalid"
    assert err["message"].startswith("stop_wait cannot be set in a repository's corral.toml")
    project = Project.open(repo)
    try:
        assert project.waits == HostWaits()  # the defaults stay in force
    finally:
        project.close()
