"""A project's dispatch queue (docs/workers.md): which one its person's turns go to, and sending a queued
lease's job there. The launch (``operations.dispatch``) and the lease sweep (``recovery.leases``) share it.

It also says who this host is on the shared store (:func:`host_id`, :func:`owner`): the identity a worker
claims under is the one a local launch, a pair or an accept of the same ``CORRAL_HOME`` holds its turn and
its processes under, so every host judges only what it owns (docs/workers.md#turns-run-on-your-own-host)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from corral.adapters.files import create_once
from corral.domain.actors import Actor
from corral.engine.project import Project
from corral.errors import UsageError
from corral.store import Tx

if TYPE_CHECKING:  # the dispatch engine (and asyncio with it) loads only where a turn is queued
    from corral.adapters.jobs import Dispatch


def host_name(project: Project) -> str:
    """The name this host's worker shows: the ``worker_host`` setting, else the host's own name."""
    configured = project.config.get("worker_host")
    if configured:
        return str(configured)
    import socket  # the host's name: asked only on the shared store, never by a read on SQLite

    return socket.gethostname()


#: The file in a ``CORRAL_HOME`` holding the random token of its worker's id, made once.
WORKER_TOKEN = "worker.token"


def worker_id(home: Path, host: str) -> str:
    """This home's worker: its host and a random token made once for the home (0600, in corral's own
    state), so a restarted worker is the same worker while two hosts with the same home path (or one
    host name) never are."""
    import secrets  # a home's token is made once: a read never pays for the module

    token = create_once(home / WORKER_TOKEN, secrets.token_hex(6).encode()).decode().strip()
    return f"{host}-{token}"


def host_id(project: Project) -> str:
    """This home's identity on the shared store: its worker's id (:func:`worker_id`), which its local turns,
    pairs and accepts are held under too, so a worker and a local launch of one home agree."""
    return worker_id(project.paths.home, host_name(project))


def owner(project: Project) -> str | None:
    """The identity a process record or a local turn of this host names: :func:`host_id` on the shared store,
    None on SQLite, which one host keeps (its records name no owner, as before)."""
    return host_id(project) if project.database_url is not None else None


def to_workers(project: Project, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None) -> bool:
    """Whether a turn goes to the workers: a person's by their own ``dispatch`` setting; the system's
    (an auto-resume, wherever it is decided) when the task's last turn went to workers (a task whose last
    turn ran on its own host, ``local``, is resumed there). ``tx``: read in the caller's transaction."""
    if str(project.config["dispatch"]) == "workers":
        return True
    if actor is not Actor.SYSTEM or task_id is None or project.database_url is None:
        return False
    if tx is not None:
        lease = tx.lease(task_id)
    else:
        with project.store.read() as read:
            lease = read.lease(task_id)
    return lease is not None and not lease.local


def dispatcher(project: Project) -> Dispatch:
    url = project.database_url
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
