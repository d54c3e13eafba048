"""The fence of a worker's turn: an agent acts only while its worker's lease holds its turn.

An agent whose turn a worker runs under a lease (docs/workers.md) is fenced as its worker is: the
project it acts on (:func:`fenced`) checks, inside every write transaction, that the task's lease
still has the turn's epoch and is claimed by that worker, and refuses the write (``LeaseLost``,
nothing written) when another host took the turn over; a door also checks it before a call that
changes anything (:func:`hold_fence`), so nothing outside the store (a push, a merge) starts either.
Both are the one rule, :func:`_hold`. The caller and its fence come from ``operations/gates``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from msgspec.structs import replace

from corral.engine.operations.gates import Caller
from corral.engine.project import Project
from corral.errors import LeaseLost, StoreError
from corral.store.contract import Store, Tx


def _hold(tx: Tx, caller: Caller) -> None:
    """The rule: a fenced agent acts only while its task's lease has its turn's epoch, claimed by its worker."""
    fence = caller.fence
    if fence is None or caller.task_id is None:
        return
    try:
        lease = tx.check_fence(caller.task_id, fence.epoch)
    except LeaseLost:
        lease = None
    if lease is not None and lease.worker_id == fence.worker_id:
        return
    raise LeaseLost(
        f"{caller.task_ref}'s turn no longer holds its task's lease (it runs on {fence.host} under epoch "
        f"{fence.epoch}; the lease was taken over): nothing was written.",
        hint=f"This turn is over: end it. The task goes on where its lease is now (corral show {caller.task_ref}).",
    )


def hold_fence(project: Project, caller: Caller) -> None:
    """Before a call that changes anything: refused (``LeaseLost``) when the caller's turn lost its lease."""
    if caller.fence is None:
        return
    with project.store.read() as tx:
        _hold(tx, caller)


class FencedStore:
    """A store whose every write transaction first holds the caller's fence (:func:`_hold`), in that
    same transaction: a takeover commits either before it (the write is refused, and rolled back)
    or after it (the write happened while the lease held). Writers are serialized per project
    (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock), so nothing slips between."""

    def __init__(self, inner: Store, caller: Caller) -> None:
        self.inner = inner
        self.caller = caller

    @property
    def location(self) -> str:
        return self.inner.location

    def read(self) -> AbstractContextManager[Tx]:
        return self.inner.read()

    def write(self) -> AbstractContextManager[Tx]:
        return self._write()

    @contextmanager
    def _write(self) -> Iterator[Tx]:
        with self.inner.write() as tx:
            _hold(tx, self.caller)
            yield tx

    def schema_version(self) -> int:
        return self.inner.schema_version()

    def check(self) -> list[str]:
        return self.inner.check()

    def health(self) -> list[StoreError]:
        return self.inner.health()

    def backup_to(self, dest: str) -> None:
        self.inner.backup_to(dest)

    def close(self) -> None:
        self.inner.close()


def fenced(project: Project, caller: Caller) -> Project:
    """``project`` as ``caller`` writes to it: under its turn's fence when a worker runs that turn."""
    if caller.fence is None:
        return project
    return replace(project, _store=FencedStore(project.store, caller))
