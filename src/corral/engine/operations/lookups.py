"""The short reads a surface makes without settling: each is one read transaction, nothing more.

Surfaces never open a store transaction themselves (docs/architecture.md#the-front-door); what they
used to read in one of their own, they ask here: a task's row as it is now, the turn answering a
command, every task of a store opened for shell completion, and, on the shared store, the
workers and the leases they hold. Reads of "what is going on now" settle first and are
``operations/queries``'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corral.domain.actors import Role
from corral.domain.records import Task, Turn
from corral.engine.project import Project
from corral.store import Store

if TYPE_CHECKING:  # the shared store's records: only its reads below need them, and `list` loads none
    from corral.domain.team import Lease


def task_row(project: Project, task_id: str) -> Task | None:
    """The task's row as it is now, or None once it is gone (a page re-reading the row an operation touched)."""
    with project.store.read() as tx:
        return tx.get_task(task_id)


def every_task(store: Store) -> list[Task]:
    """Every task of a store a surface opened itself without creating it (shell completion, which must stay
    quiet and cheap: no project checks, no settling)."""
    with store.read() as tx:
        return tx.tasks()


def current_command(project: Project, task_id: str) -> Turn | None:
    """The task's latest command (the turn a wait marker counts from), or None before its first turn."""
    with project.store.read() as tx:
        return tx.current_command(task_id)


def turn_by_command(project: Project, command_id: str, role: Role) -> Turn | None:
    """The ``role`` turn answering ``command_id`` once it is recorded (an ``ask`` waiting for its answer)."""
    with project.store.read() as tx:
        return tx.turn_by_command(command_id, role)


def worker_rows(project: Project) -> list[dict[str, Any]]:
    """Every worker the project's shared store has heard from, each with the refs of the turns it holds."""
    from corral.domain.team import LeaseState

    with project.store.read() as tx:
        known = tx.workers()
        claimed = tx.leases([LeaseState.CLAIMED])
        refs = tx.refs_by_id(lease.task_id for lease in claimed)
        now = tx.now()
    running: dict[str, list[str]] = {}
    for lease in claimed:
        running.setdefault(lease.worker_id or "", []).append(refs.get(lease.task_id, lease.task_id))
    return [{**w.as_view(now), "running": sorted(running.get(w.id, []))} for w in known]


def leases_of(project: Project, task_ids: Iterable[str]) -> dict[str, Lease | None]:
    """Each task's lease as the shared store has it now (None: let go), read in one transaction."""
    with project.store.read() as tx:
        return {task_id: tx.lease(task_id) for task_id in task_ids}


def claimed_by(project: Project, worker_id: str) -> list[Lease]:
    """The leases ``worker_id`` holds claimed (a worker adopting its turns after a restart)."""
    from corral.domain.team import LeaseState

    with project.store.read() as tx:
        return [lease for lease in tx.leases([LeaseState.CLAIMED]) if lease.worker_id == worker_id]
