"""A project's dispatch queue (docs/workers.md): which one its person's turns go to, and sending a queued
lease's job there. The launch (``operations.dispatch``) and the lease sweep (``recovery.leases``) share it.

Who this host is on the shared store (``host_id``, ``owner``) is the placement's
(:mod:`corral.engine.placement`), named here too for the modules that ask the queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.domain.actors import Actor
from corral.engine.placement import host_id as host_id
from corral.engine.placement import host_name as host_name
from corral.engine.placement import worker_id as worker_id
from corral.engine.project import Project
from corral.errors import UsageError
from corral.store import Tx

if TYPE_CHECKING:  # the dispatch engine (and asyncio with it) loads only where a turn is queued
    from corral.adapters.jobs import Dispatch


def owner(project: Project) -> str | None:
    """The identity a process record or a local turn of this host names: :func:`host_id` on the shared store,
    None on SQLite, which one host keeps (its records name no owner, as before)."""
    return project.placement.owner(project)


def to_workers(project: Project, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None) -> bool:
    """Whether a turn goes to the workers: a person's by their own ``dispatch`` setting; the system's
    (an auto-resume, wherever it is decided) when the task's last turn went to workers (a task whose last
    turn ran on its own host, ``local``, is resumed there). ``tx``: read in the caller's transaction."""
    if str(project.config["dispatch"]) == "workers":
        return True
    if actor is not Actor.SYSTEM or task_id is None or not project.placement.other_hosts():
        return False
    if tx is not None:
        lease = tx.lease(task_id)
    else:
        with project.store.read() as read:
            lease = read.lease(task_id)
    return lease is not None and not lease.local


def dispatcher(project: Project) -> Dispatch:
    url = project.placement.queue_url()
    if url is None or project.identity is None:
        raise UsageError(
            'dispatch = "workers" needs the shared PostgreSQL store and a repository with a commit.',
            code="workers-need-postgres",
            hint="Set database_url in your own settings (corral config set database_url postgresql://…), "
            'or dispatch = "local".',
        )
    from corral.adapters.jobs import Dispatch

    return Dispatch(url)


def send(project: Project, task_id: str, command_id: str) -> int | None:
    """Enqueue the job of a queued lease and note it there; None when the task already has one waiting."""
    assert project.identity is not None
    job = dispatcher(project).defer(project.identity.key, task_id, command_id)
    if job is not None:
        with project.store.write() as tx:
            tx.note_job(task_id, command_id, job)
    return job
