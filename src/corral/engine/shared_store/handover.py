"""Handing a turn over to workers on other hosts (``dispatch = "workers"``, docs/workers.md).

The launch skeleton (``operations.turns``) asks the placement to hand a recorded turn over where it would
start a local supervisor (``placement.hand_over``): the turn's plan is saved in the task's lease first (a
new epoch), then a job is sent to the job queue; a crash between the two leaves a queued lease with no job,
which the reconciler sends again (``shared_store.leases``). The worker that claims the job runs the turn
(``shared_store.claimed``).
"""

from __future__ import annotations

from corral.domain.records import Task, Turn
from corral.domain.team import TurnPlan
from corral.engine.project import Project
from corral.engine.shared_store import remote_branches
from corral.engine.shared_store.job_queue import send


def hand_over(project: Project, task: Task, turn: Turn, plan: TurnPlan) -> None:
    """Save the turn's plan in the task's lease, publish its branch, and send it to the workers."""
    assert turn.command_id is not None
    # A branch made here (a start) reaches the workers through the remote; one a worker pushed is
    # the remote's already, and this host's copy is never pushed over it.
    remote_branches.publish_branch(project, task)
    with project.store.write() as tx:
        tx.queue_turn(task.id, turn.command_id, plan.to_json())
    send(project, task.id, turn.command_id)
