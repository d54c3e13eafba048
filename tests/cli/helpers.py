"""Helpers for the CLI tests: find the state the CLI wrote, and put tasks into states the
foundation's commands cannot reach yet (working, blocked, complete …) through the real store."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corral.domain.actors import Actor
from corral.domain.records import SCHEMA_VERSION
from corral.domain.status import Status
from corral.store import SQLiteStore

RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def state_paths(corral: Any, **kw: Any) -> dict[str, str]:
    doc = corral.json("paths", **kw)
    paths: dict[str, str] = doc["paths"]
    return paths


def database(corral: Any, **kw: Any) -> Path:
    return Path(state_paths(corral, **kw)["database"])


@contextmanager
def store_of(corral: Any) -> Iterator[SQLiteStore]:
    store = SQLiteStore(database(corral))
    try:
        yield store
    finally:
        store.close()


def create(corral: Any, goal: str, *args: str) -> dict[str, Any]:
    task: dict[str, Any] = corral.json("create", goal, *args)["task"]
    return task


def to_working(corral: Any, ref: str, *, session: bool = True) -> str:
    """backlog → working, with a session (as `start` would leave it, minus the agent)."""
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        if session:
            tx.insert_session(task.id, worktree=None, branch=task.branch, base_commit=None)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        return task.id


def park(corral: Any, ref: str, *, violations: list[str] | None = None) -> Status:
    """End the pretend turn: record any protected files changed, then park (blocked or conflict)."""
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        if violations:
            tx.record_violations(task.id, violations)
        tx.park(task.id, Actor.SYSTEM, "turn ended")
        parked = tx.get_task(task.id)
        assert parked is not None
        return parked.status


def set_status(corral: Any, ref: str, *statuses: Status, actor: Actor = Actor.HUMAN) -> None:
    with store_of(corral) as store, store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        for status in statuses:
            tx.set_status(task.id, status, actor, "test setup")


def complete(corral: Any, ref: str) -> None:
    """backlog → working → blocked → merging → complete."""
    to_working(corral, ref)
    park(corral, ref)
    set_status(corral, ref, Status.MERGING, Status.COMPLETE)


def times_in(doc: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Every (key, value) in a JSON document whose key names a time (``at`` or ``*_at``)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "at" or k.endswith("_at"):
                yield k, v
            yield from times_in(v, k)
    elif isinstance(doc, list):
        for item in doc:
            yield from times_in(item, key)


def no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout


def json_error(result: Any, exit_code: int, code: str | None = None) -> dict[str, Any]:
    """The one JSON error document of a failed --json command; checks its exact shape."""
    no_traceback(result)
    assert result.returncode == exit_code, (result.returncode, result.stdout, result.stderr)
    doc = result.json()
    assert set(doc) == {"schema_version", "error"}, doc
    assert doc["schema_version"] == SCHEMA_VERSION
    assert set(doc["error"]) == {"code", "message", "hint"}, doc
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]
    if code is not None:
        assert doc["error"]["code"] == code, doc
    err: dict[str, Any] = doc["error"]
    return err
