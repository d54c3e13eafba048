"""The shared store's roster of workers: a worker's heartbeat, the one write a worker makes outside its turns.

The worker (``corral worker``) is a surface and opens no store transaction itself (docs/architecture.md#the-front-door);
what it reads of the roster and its leases is in ``operations.queries``.
"""

from __future__ import annotations

from corral.domain.team import Worker, WorkerState
from corral.engine.project import Project


def beat(project: Project, worker_id: str, *, host: str, pid: int, state: WorkerState, lease_seconds: float) -> Worker:
    """Record that ``worker_id`` is alive (and in which state) on ``project``'s shared store; its leases stay its
    own for ``lease_seconds`` more."""
    with project.store.write() as tx:
        return tx.beat_worker(worker_id, host=host, pid=pid, state=state, lease_seconds=lease_seconds)
