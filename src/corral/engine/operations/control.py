"""Controlling a running turn from outside: stop it, or wait until the task rests.

Both reconcile as they go, so a receipt that lands while they wait becomes its turn: between two
looks they watch the task's receipt file, and look again as soon as one lands (a stat, not a
reconcile, every few milliseconds), so a turn that ends is seen at once. A stop
ends with the stopped command's processes gone: whatever the supervisor did not end (or
that no supervisor was left to end) is reaped once the task is parked. A turn that runs on a
worker, or that another host runs on its own (docs/workers.md), is stopped through its lease by the
placement (``project.placement.stop_elsewhere``); no process of another host is ever signalled from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from msgspec import Struct

from corral.domain.actors import Actor, Role
from corral.domain.operations_table import WAIT_FAILS, WAIT_RESTS, Op, check_operation
from corral.domain.records import RestingCause, Task, Turn
from corral.domain.status import Status
from corral.engine.operations.refresh import settle
from corral.engine.operations.turns import Started
from corral.engine.project import Project
from corral.engine.resolve import resolve_task
from corral.engine.runtime import processes
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.processes import reap_turn


def request_stop(project: Project, task: Task, actor: Actor) -> bool:
    """Ask the supervisor to end the turn; False when no live supervisor was there to ask."""
    return processes.request_stop(project, task.id, actor.value)


def stop(project: Project, given: str, *, actor: Actor) -> Task:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    check_operation(Op.STOP, task.status, task.ref, hint=f"No turn is running; see it: corral show {task.ref}")
    relayed = project.placement.stop_elsewhere(project, task, actor)
    if relayed is not None:
        return relayed
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    stopped = _stop(project, task, actor)
    if command is not None:
        # Only the stopped command's processes: a turn launched since is not this stop's to end.
        reap_turn(project, task.id, command_id=command.command_id)
    return stopped


def ended_within(project: Project, task: Task, seconds: float, poll: float) -> Task | None:
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
        until_receipt(project, task.id, min(poll, deadline - time.monotonic()))


def _stop(project: Project, task: Task, actor: Actor) -> Task:
    if request_stop(project, task, actor):
        ended = ended_within(project, task, project.waits.stop_wait, 0.1)
        if ended is not None:
            return ended
    # No supervisor answered: end the turn here, with the same record a supervisor would have written.
    settle(project)
    return record_stopped(project, task.id, actor) or task


def record_stopped(project: Project, task_id: str, actor: Actor) -> Task | None:
    """No supervisor was left to answer a stop: the turn ends here with the record a supervisor would have
    written (a ``stopped`` agent turn, the task parked with the cause "stopped"). The task as it is after."""
    with project.store.write() as tx:
        current = tx.get_task(task_id)
        if current is None or current.status is not Status.WORKING:
            return current
        cause = RestingCause("stopped", tx.now(), actor, details={"summary": f"Stopped by {actor.value}."})
        command = proto.read_record(project.paths.protocol_dir(task_id) / proto.COMMAND, proto.Command)
        command_id = command.command_id if command else None
        if command_id is not None and tx.turn_by_command(command_id, Role.AGENT) is None:
            tx.add_turn(
                task_id,
                role=Role.AGENT,
                kind="stopped",
                content=f"Stopped by {actor.value}.",
                session_id=current.session_id,
                command_id=command_id,
            )
        tx.park(task_id, actor, f"stopped by {actor.value}", expected_from=Status.WORKING, resting_cause=cause)
        return tx.get_task(task_id) or current


class WaitResult(Struct, frozen=True):
    task: Task
    timed_out: bool

    @property
    def exit_code(self) -> int:
        if self.timed_out:
            return 124
        if self.task.resting_cause is not None or self.task.status in WAIT_FAILS:
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
        until_receipt(project, task.id, poll if deadline is None else min(poll, deadline - time.monotonic()))


def wait_answer(project: Project, started: Started, *, timeout: float, poll: float = 0.2) -> Turn | None:
    """The agent turn that answers a launched command (an ask), reconciling as it waits; None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        settle(project)
        with project.store.read() as tx:
            answer = tx.turn_by_command(started.launched.command_id, Role.AGENT)
        if answer is not None or time.monotonic() > deadline:
            return answer
        until_receipt(project, started.task.id, poll)


#: How often a wait looks at the receipt file between two reconciles (a stat: nothing to settle yet).
RECEIPT_LOOK = 0.01


def until_receipt(project: Project, task_id: str, seconds: float) -> None:
    """Sleep ``seconds``, or less once the task's receipt lands or is replaced: the turn's end, which the
    next reconcile records (a turn that ends without one is found by that reconcile all the same)."""
    path = project.paths.protocol_dir(task_id) / proto.RESPONSE
    before = _signature(path)
    end = time.monotonic() + max(seconds, 0.0)
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(RECEIPT_LOOK, left))
        if _signature(path) != before:
            return


def _signature(path: Path) -> tuple[int, int] | None:
    """What tells one receipt file from another: its inode and modification time (None: no file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns
