"""A project's job queue (docs/workers.md): whether a turn goes to the workers, and sending a queued lease's
job there. The hand-over (``shared_store.handover``) and the lease sweep (``shared_store.leases``) share it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.domain.actors import Actor
from corral.engine.placement import wants_workers, workers_need_the_shared_store
from corral.engine.project import Project
from corral.store import Tx

if TYPE_CHECKING:  # the job queue (and asyncio with it) loads only where a turn is queued
    from corral.adapters.jobs import JobQueue


def to_workers(project: Project, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None) -> bool:
    """Whether a turn goes to the workers: a person's by their own ``dispatch`` setting; the system's
    (an auto-resume, wherever it is decided) when the task's last turn went to workers (a task whose last
    turn ran on its own host, ``local``, is resumed there). ``tx``: read in the caller's transaction."""
    if wants_workers(project):
        return True
    if actor is not Actor.SYSTEM or task_id is None:
        return False
    if tx is not None:
        lease = tx.lease(task_id)
    else:
        with project.store.read() as read:
            lease = read.lease(task_id)
    return lease is not None and not lease.local


def job_queue(project: Project) -> JobQueue:
    """The job queue the project's turns are sent to; refused without a queue or a commit naming the project."""
    url = project.placement.queue_url()
    if url is None or project.identity is None:
        raise workers_need_the_shared_store()
    from corral.adapters.jobs import JobQueue

    return JobQueue(url)


def send(project: Project, task_id: str, command_id: str) -> int | None:
    """Enqueue the job of a queued lease and note it there; None when the task already has one waiting."""
    assert project.identity is not None
    job = job_queue(project).defer(project.identity.key, task_id, command_id)
    if job is not None:
        with project.store.write() as tx:
            tx.note_job(task_id, command_id, job)
    return job
