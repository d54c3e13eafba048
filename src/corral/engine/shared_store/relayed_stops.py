"""A stop asked of a turn another host holds (docs/workers.md): it rides on the task's lease.

A turn queued for workers, or run by one (on any host, this one's too): the worker that holds it relays the
stop to its supervisor as this host would, and a turn still queued, or whose worker does not answer, is
fenced off and parked here. A turn another host runs on its own is stopped through its lease too, relayed by
that host's reconcile pass (``shared_store.own_turns``); no process of another host is ever signalled from here.
"""

from __future__ import annotations

from corral.domain.actors import Actor, Role
from corral.domain.records import RestingCause, Task
from corral.domain.status import Status
from corral.domain.team import Lease, LeaseState
from corral.engine.operations.control import ended_within
from corral.engine.project import Project
from corral.errors import StopUnanswered


def stop(project: Project, task: Task, actor: Actor) -> Task | None:
    """Stop the task's turn through its lease when another host holds it (a worker's claim, a queued turn, or
    another host's own local turn); None when the turn is this host's to stop."""
    with project.store.read() as tx:
        lease = tx.lease(task.id)
        current = tx.current_command(task.id)
    if lease is None:
        return None
    if lease.state in (LeaseState.QUEUED, LeaseState.CLAIMED):
        return _stop_on_worker(project, task, lease, actor)
    held = lease.holds_turn(current.command_id if current else None)
    if held and lease.elsewhere(project.placement.owner(project)):
        return _stop_elsewhere(project, task, lease, actor)
    return None


def _stop_elsewhere(project: Project, task: Task, lease: Lease, actor: Actor) -> Task:
    """A turn another host runs on its own (its ``local`` lease): the stop rides on the lease, and that host's
    reconcile pass (its daemon's tick, or any corral command run there) relays it to the supervisor exactly
    as a local stop asks it, with the same outcome. This host signals nothing: a pid of another host means
    nothing here. Not acted on within the ``stop_wait`` setting's seconds: ``StopUnanswered``, the stop still asked."""
    with project.store.write() as tx:
        asked = tx.ask_stop(task.id, lease.epoch, actor.value)
    ended = ended_within(project, task, project.waits.stop_wait if asked else 0.0, 0.2)
    if ended is not None:
        return ended
    host = lease.host or "the host that runs it"
    if not asked:  # the turn ended and the task was launched again meanwhile: that turn is not this stop's
        raise StopUnanswered(
            f"{task.ref}'s turn on {host} ended before the stop reached it, and the task runs again.",
            hint=f"See it: corral show {task.ref}; stop the new turn with corral stop {task.ref}.",
        )
    raise StopUnanswered(
        f"{task.ref}'s turn runs on {host}, which did not act on the stop within {project.waits.stop_wait:g} s. "
        "corral never signals another host's process, so the turn still runs there.",
        hint=f"The stop stays asked: {host} stops the turn at its next corral command or daemon tick "
        f"(corral daemon start there keeps one running), or run corral stop {task.ref} on {host}.",
    )


def _stop_on_worker(project: Project, task: Task, lease: Lease, actor: Actor) -> Task:
    """A turn queued for workers, or run by one (on any host, this one's too): the stop rides on its lease.

    The worker that holds it pushes the turn's work, asks its supervisor as a local stop does, and
    records the turn stopped as its receipt says; then it pushes and lets the lease go as for any
    turn's end. A queued turn, or one whose worker does not answer in time, is fenced off (its worker,
    back, stops its agent and writes nothing) and parked here with the same record.
    """
    asked = False
    if lease.claimed:
        with project.store.write() as tx:
            asked = tx.ask_stop(task.id, lease.epoch, actor.value)
    if asked and (ended := ended_within(project, task, project.waits.stop_wait, 0.2)) is not None:
        return ended
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            return current or task
        held = tx.lease(task.id)
        if held is not None and held.state is not LeaseState.RELEASED:
            tx.fence_off(task.id, held.epoch)
        command_id = held.command_id if held is not None else lease.command_id
        if tx.turn_by_command(command_id, Role.AGENT) is None:
            tx.add_turn(
                task.id,
                role=Role.AGENT,
                kind="stopped",
                content=f"Stopped by {actor.value}.",
                session_id=current.session_id,
                command_id=command_id,
            )
        cause = RestingCause("stopped", tx.now(), actor, details={"summary": f"Stopped by {actor.value}."})
        tx.park(task.id, actor, f"stopped by {actor.value}", expected_from=Status.WORKING, resting_cause=cause)
        return tx.get_task(task.id) or current
