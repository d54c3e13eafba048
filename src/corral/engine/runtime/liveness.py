"""Reading running turns' supervisors from outside: what ``status.json`` says and whether they live."""

from __future__ import annotations

from corral.domain.records import Task
from corral.domain.status import Status
from corral.domain.substate import Live
from corral.engine.project import Project


def live_facts(project: Project, task: Task) -> Live | None:
    """What the task's supervisor reports right now; None for a task that is not working.

    One read of ``status.json`` through the protocol's reader (the one the reconciler
    uses, so ``list`` and a reconcile pass agree on what a supervisor said) and one
    liveness probe of its pid. A missing or unusable status file is a supervisor not
    (yet) seen alive.
    """
    if task.status is not Status.WORKING:
        return None
    from corral.engine.runtime import protocol as proto  # only a working task has a supervisor to read
    from corral.engine.runtime.processes import supervisor_alive

    status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    if status is None:
        return Live(alive=False)
    retry = status.retry
    return Live(
        alive=supervisor_alive(status),  # frozen, gone or its pid reused: not alive
        phase=status.phase,
        kind=status.kind,
        retry_attempt=retry.attempt if retry else None,
        retry_class=retry.failure_class if retry else None,
        retry_reason=retry.reason if retry else None,
    )


def supervisor_pids(project: Project) -> set[int]:
    """The live supervisors of the project's turns: those the store registered, and those the
    working tasks' ``status.json`` name (a supervisor may be running before it is registered)."""
    from corral.adapters.process import pid_alive
    from corral.engine.runtime import protocol as proto

    pids: set[int] = set()
    with project.store.read() as tx:
        working = tx.tasks([Status.WORKING])
        pids.update(r.pid for r in tx.processes() if r.kind == "supervisor")
    for task in working:
        status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.pid > 1:
            pids.add(status.pid)
    return {p for p in pids if pid_alive(p)}
