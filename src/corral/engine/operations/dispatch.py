"""Queueing a turn for workers on other hosts (``dispatch = "workers"``, docs/workers.md).

The launch skeleton (``operations.turns``) calls :func:`queue` where it would start a local
supervisor: the turn's plan is saved in the task's lease first (a new epoch), then a job is
sent to the dispatch engine; a crash between the two leaves a queued lease with no job,
which the reconciler sends again (``recovery.leases``). The worker that claims the job runs
the turn (``operations.claimed``).
"""

from __future__ import annotations

from corral.domain.records import Task, Turn
from corral.domain.team import TurnPlan
from corral.engine import remote
from corral.engine.operations import launch
from corral.engine.project import Project
from corral.engine.queue import dispatcher, send, to_workers

__all__ = ["check", "queue", "send", "to_workers"]


def check(project: Project) -> None:
    """Refuse before anything is recorded when turns cannot reach a worker."""
    dispatcher(project)


def queue(project: Project, task: Task, turn: Turn, plan: TurnPlan) -> launch.Launched:
    """Save the turn's plan in the task's lease, publish its branch, and send it to the workers."""
    assert turn.command_id is not None
    # A branch made here (a start) reaches the workers through the remote; one a worker pushed is
    # the remote's already, and this host's copy is never pushed over it.
    remote.publish_branch(project, task)
    with project.store.write() as tx:
        tx.queue_turn(task.id, turn.command_id, plan.to_json())
    send(project, task.id, turn.command_id)
    log_dir = project.paths.turn_dir(task.id, turn.sequence)
    return launch.Launched(turn.command_id, None, project.paths.protocol_dir(task.id), log_dir)
