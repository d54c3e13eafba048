"""Controlling a running turn from outside: stop it, or wait until the task rests.

Both reconcile as they go, so a receipt that lands while they wait becomes its turn. A stop
ends with the stopped command's processes gone: whatever the supervisor did not end (or
that no supervisor was left to end) is reaped once the task is parked. A turn that runs on a
worker (docs/workers.md) is stopped through its lease in the store: its worker relays the stop
to its supervisor as this host would, and a turn still queued, or whose worker does not answer,
is fenced off and parked here. A turn another host runs on its own is stopped through its lease
too, relayed by that host's reconcile pass; no process of another host is ever signalled from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from corral.domain.actors import Actor, Role
from corral.domain.operations_table import WAIT_RESTS, Op, check_operation
from corral.domain.record import record
from corral.domain.records import RestingCause, Task, Turn
from corral.domain.status import Status
from corral.domain.team import Lease, LeaseState
from corral.engine.operations.refresh import settle
from corral.engine.operations.turns import Started
from corral.engine.project import Project
from corral.engine.queue import owner
from corral.engine.recovery.owned import record_stopped
from corral.engine.resolve import resolve_task
from corral.engine.runtime import processes
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn
from corral.errors import StopUnanswered

STOP_WAIT_SECONDS = 15.0


def request_stop(project: Project, task: Task, actor: Actor) -> bool:
    """Ask the supervisor to end the turn; False when no live supervisor was there to ask."""
    return processes.request_stop(project, task.id, actor.value)


def stop(project: Project, given: str, *, actor: Actor) -> Task:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        lease = tx.lease(task.id)
        current = tx.current_command(task.id)
    check_operation(Op.STOP, task.status, task.ref, hint=f"No turn is running; see it: corral show {task.ref}")
    if lease is not None and lease.state in (LeaseState.QUEUED, LeaseState.CLAIMED):
        return _stop_on_worker(project, task, lease, actor)
    held = lease is not None and lease.holds_turn(current.command_id if current else None)
    if lease is not None and held and lease.elsewhere(owner(project)):
        return _stop_elsewhere(project, task, lease, actor)
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    stopped = _stop(project, task, actor)
    if command is not None:
        # Only the stopped command's processes: a turn launched since is not this stop's to end.
        reap_turn(project, task.id, command_id=command.command_id)
    return stopped


def _ended(project: Project, task: Task, seconds: float, poll: float) -> Task | None:
    """The task once its turn has ended (each look settles first, so a receipt that landed is recorded),
    looked at until ``seconds`` have passed; None while it still works."""
    deadline = time.monotonic() + seconds
    while True:
        settle(project)
        with project.store.read() as tx:
            current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            return current or task
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll)


def _stop(project: Project, task: Task, actor: Actor) -> Task:
    if request_stop(project, task, actor) and (ended := _ended(project, task, STOP_WAIT_SECONDS, 0.1)) is not None:
        return ended
    # No supervisor answered: end the turn here, with the same record a supervisor would have written.
    settle(project)
    return record_stopped(project, task.id, actor) or task


def _stop_elsewhere(project: Project, task: Task, lease: Lease, actor: Actor) -> Task:
    """A turn another host runs on its own (its ``local`` lease): the stop rides on the lease, and that host's
    reconcile pass (its daemon's tick, or any corral command run there) relays it to the supervisor exactly
    as a local stop asks it, with the same outcome. This host signals nothing: a pid of another host means
    nothing here. Not acted on within :data:`STOP_WAIT_SECONDS`: ``StopUnanswered``, the stop still asked."""
    with project.store.write() as tx:
        asked = tx.ask_stop(task.id, lease.epoch, actor.value)
    ended = _ended(project, task, STOP_WAIT_SECONDS if asked else 0.0, 0.2)
    if ended is not None:
        return ended
    host = lease.host or "the host that runs it"
    if not asked:  # the turn ended and the task was launched again meanwhile: that turn is not this stop's
        raise StopUnanswered(
            f"{task.ref}'s turn on {host} ended before the stop reached it, and the task runs again.",
            hint=f"See it: corral show {task.ref}; stop the new turn with corral stop {task.ref}.",
        )
    raise StopUnanswered(
        f"{task.ref}'s turn runs on {host}, which did not act on the stop within {STOP_WAIT_SECONDS:g} s. "
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
    if asked and (ended := _ended(project, task, STOP_WAIT_SECONDS, 0.2)) is not None:
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


# -- waiting ---------------------------------------------------------------------------


@record
class WaitResult:
    task: Task
    timed_out: bool

    @property
    def exit_code(self) -> int:
        if self.timed_out:
            return 124
        if self.task.resting_cause is not None or self.task.status is Status.ABANDONED:
            return 1
        return 0


def rests(task: Task) -> bool:
    return task.status in WAIT_RESTS


def wait(
    project: Project,
    given: str,
    *,
    timeout: float | None = None,
    on_tick: Callable[[Task], None] | None = None,
    poll: float = 0.2,
) -> WaitResult:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        settle(project)
        with project.store.read() as tx:
            task = tx.get_task(task.id) or task
        if on_tick is not None:
            on_tick(task)
        if rests(task):
            return WaitResult(task, False)
        if deadline is not None and time.monotonic() >= deadline:
            return WaitResult(task, True)
        time.sleep(poll)


def wait_answer(project: Project, started: Started, *, timeout: float, poll: float = 0.2) -> Turn | None:
    """The agent turn that answers a launched command (an ask), reconciling as it waits; None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        settle(project)
        with project.store.read() as tx:
            answer = tx.turn_by_command(started.launched.command_id, Role.AGENT)
        if answer is not None or time.monotonic() > deadline:
            return answer
        time.sleep(poll)
