"""A worker's side of a queued turn: claim it under a new epoch, run it here, push its branch (docs/workers.md).

The worker runs the supervisor exactly as a local launch does; what differs is around it:
the claim (the store hands the queued command to one worker, with an epoch no earlier claim
holds), a worktree that follows the remote's tip of the task branch with the last worker's
uncommitted work restored, a fence in the command (every write of the turn's results checks
the epoch in its own transaction: ``recovery.receipts``), a work-in-progress push every
``wip_push_interval`` seconds while the turn runs, and after it the branch pushed with a lease
on the tip it started from. A claim whose epoch is taken over while the turn runs stops its
agent and writes nothing more.
"""

from __future__ import annotations

import time
from pathlib import Path

from corral.domain import prompts
from corral.domain.actors import Role
from corral.domain.record import record, replace
from corral.domain.records import Session, Task, Turn
from corral.domain.team import HARNESS_HOST, Lease, TurnPlan
from corral.engine import remote
from corral.engine.operations import launch
from corral.engine.operations.turns import revert_files
from corral.engine.paths import make_private_dir
from corral.engine.project import Project
from corral.engine.recovery.faults import internal_fault
from corral.engine.recovery.working import process_receipt
from corral.engine.resolve import task_config
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import shipping
from corral.engine.runtime.processes import reap_turn
from corral.errors import CorralError, LeaseLost

#: How often a worker looks at the turn it runs (its receipt recorded, its epoch still its own).
POLL_SECONDS = 0.2
#: How often it ships the turn's files and live status to the store while it runs.
SHIP_SECONDS = 1.0


@record
class Me:
    """The worker that claims: its id (stable across its restarts on this host), host and lease."""

    id: str
    host: str


@record
class Ran:
    """How a claimed job ended: ``done`` (recorded and pushed), ``lost`` (fenced off), ``skipped``."""

    outcome: str
    detail: str = ""


def claim(project: Project, me: Me, task_id: str, command_id: str) -> Lease | None:
    with project.store.write() as tx:
        return tx.claim_turn(task_id, command_id, me.id, me.host)


def run(project: Project, me: Me, task_id: str, command_id: str, *, wip_seconds: float | None = None) -> Ran:
    """Claim the queued command and run it to its recorded end; what it came to."""
    lease = claim(project, me, task_id, command_id)
    if lease is None:
        return Ran("skipped", "not queued (claimed by another worker, or superseded)")
    return run_claimed(project, me, lease, wip_seconds=wip_seconds)


def run_claimed(project: Project, me: Me, lease: Lease, *, wip_seconds: float | None = None) -> Ran:
    """Run a turn this worker claimed: its worktree, its command under the fence, the launch, then :func:`follow`."""
    task_id, command_id = lease.task_id, lease.command_id
    epoch = lease.epoch
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        current = tx.current_command(task_id)
        session = tx.get_session(task.session_id) if task is not None and task.session_id else None
    if task is None or session is None or current is None or current.command_id != command_id:
        with project.store.write() as tx:
            tx.release_turn(task_id, epoch)
        return Ran("skipped", "the task moved on before the turn was claimed")
    try:
        worktree, started_from = _launch(project, me, lease, task, session, current)
    except LeaseLost:
        return Ran("lost", "the lease was taken over before the turn was launched: nothing launched")
    except Exception as exc:
        # Claimed, never launched (the remote unreachable, a worktree in the way): the task rests with
        # the cause, as a local launch that fails does, instead of waiting out its grace period.
        with project.store.read() as tx:
            held = tx.lease(task_id)
        if held is not None and held.epoch == epoch and held.claimed:
            internal_fault(project, task, exc, phase="prepare")
            with project.store.write() as tx:
                tx.release_turn(task_id, epoch)
        raise
    interval = float(wip_seconds if wip_seconds is not None else project.config["wip_push_interval"])
    return follow(project, task_id, command_id, epoch, worktree, started_from, interval)


def _launch(
    project: Project, me: Me, lease: Lease, task: Task, session: Session, current: Turn
) -> tuple[Path, str | None]:
    """The claimed turn's worktree here, its command under the fence, its supervisor started;
    the worktree and the remote tip of the branch it started from."""
    from corral.engine.runtime import transcripts  # a harness session's transcript: only where a turn launches

    task_id, epoch = task.id, lease.epoch
    plan = TurnPlan.from_json(lease.plan)
    worktree, fetched = remote.worktree_for_turn(project, task, plan.target, epoch)
    with project.store.write() as tx:
        tx.set_lease_worktree(task_id, epoch, str(worktree))
    here = replace(session, worktree=str(worktree), branch=task.branch)
    if plan.reverts:
        revert_files(project, here, list(plan.reverts))
    body, sync = plan.body, plan.sync_before_work
    if plan.resume_after_crash:
        dirty = bool(project.git.dirty_paths(worktree))
        body, sync = prompts.resume_after_crash(dirty, list(plan.pending)), not dirty
    config = task_config(project.config, task, on_worker=True)
    # A session made on another host is resumed here when its transcript came through the store.
    carry = transcripts.takeover(replace(project, config=config), task, here, me.host)
    if carry is not None and not carry.carried:
        # The harness session lives on the host that ran it, and its transcript could not be carried:
        # this host starts a new session, told the task and what happened before (its crash-context
        # prompt and the pending feedback).
        here = replace(here, harness_session_id=None)
        body = f"{prompts.first_turn(task.goal, task.prompt)}\n\n{body}"
    command = launch.build_command(
        replace(project, config=config),
        task,
        here,
        current,
        kind=plan.kind,
        body=body,
        delivered=list(plan.delivered),
        target=plan.target,
        sync_before_work=sync,
        announce_merge=plan.announce_merge,
        read_only=plan.read_only,
    )
    command = replace(command, fence=proto.Fence(epoch, me.id, me.host))
    make_private_dir(Path(command.log_dir))
    proto.write(Path(command.log_dir), command)
    with project.store.write() as tx:
        tx.check_fence(task_id, epoch)  # taken over while this host made its worktree: nothing launched
        now = tx.get_task(task_id) or task
        metadata = {**transcripts.noted(now.metadata, carry), HARNESS_HOST: {here.id: me.host}}
        tx.update_task(task_id, metadata=metadata, touch=False)
    launch.launch(project, task, command)
    # Its session's transcript goes to the store as the turn runs, so the next host can resume it.
    transcripts.follow(project, task, here.id, command, epoch, me.host)
    return worktree, fetched.branch


def resume_following(project: Project, lease: Lease) -> Ran:
    """A turn this worker claimed before it restarted: followed again, from the remote tip it started on."""
    with project.store.read() as tx:
        task = tx.get_task(lease.task_id)
    if task is None or lease.worktree is None:
        with project.store.write() as tx:
            tx.release_turn(lease.task_id, lease.epoch)
        return Ran("skipped", "nothing of the turn was launched here")
    started_from = project.git.rev_parse(f"refs/remotes/{remote.remote_name(project)}/{task.branch}", cwd=project.repo)
    interval = float(project.config["wip_push_interval"])
    return follow(project, lease.task_id, lease.command_id, lease.epoch, Path(lease.worktree), started_from, interval)


def follow(
    project: Project,
    task_id: str,
    command_id: str,
    epoch: int,
    worktree: Path,
    started_from: str | None,
    wip_seconds: float,
) -> Ran:
    """Until the turn's receipt is recorded (here, as it lands): its files and live facts shipped and its
    WIP pushed on the way, the branch pushed at the end; a lost epoch stops the agent and ends it with
    nothing written."""
    last_wip = last_ship = time.monotonic()
    with project.store.read() as tx:
        task = tx.get_task(task_id)
    assert task is not None
    while True:
        with project.store.read() as tx:
            lease = tx.lease(task_id)
            answered = tx.turn_by_command(command_id, Role.AGENT) is not None
        if lease is None or lease.epoch != epoch or not lease.claimed:
            reap_turn(project, task_id)
            return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
        if answered:
            break
        # Its receipt is recorded here as soon as it lands (the worker's settle loop would, later):
        # the turn's end costs one lstat a poll, not a reconcile pass of the whole project.
        try:
            if process_receipt(project, task):
                continue
        except LeaseLost:
            reap_turn(project, task_id)
            return Ran("lost", "the lease was taken over before the turn was recorded: nothing written")
        if time.monotonic() - last_ship >= SHIP_SECONDS:
            last_ship = time.monotonic()
            try:
                _ship(project, task, command_id, epoch)
            except LeaseLost:
                reap_turn(project, task_id)
                return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
            except (CorralError, OSError):
                pass  # the store or the disk, a moment: the next pass ships what this one could not
        if time.monotonic() - last_wip >= wip_seconds:
            last_wip = time.monotonic()
            try:
                remote.push_wip(project, task, worktree)
            except CorralError:
                pass  # the next interval tries again; the turn goes on
        time.sleep(POLL_SECONDS)
    try:
        _ship(project, task, command_id, epoch)  # the whole turn, before its lease is let go
        with project.store.read() as tx:
            tx.check_fence(task_id, epoch)
        if worktree.is_dir():
            remote.push_wip(project, task, worktree, final=True)
        remote.push_branch(project, task, started_from)
    except LeaseLost:
        return Ran("lost", "the lease was taken over before the push: nothing pushed")
    with project.store.write() as tx:
        tx.release_turn(task_id, epoch)
    return Ran("done")


def _ship(project: Project, task: Task, command_id: str, epoch: int) -> None:
    """The turn's files and live facts to the store, for reviewers elsewhere (only while the epoch holds)."""
    with project.store.read() as tx:
        tx.check_fence(task.id, epoch)
    shipping.ship(project, task.id)
    shipping.ship_live(project, task, command_id)


def stop_if_fenced(project: Project, leases: dict[str, int]) -> list[str]:
    """The turns this worker runs whose epoch was taken over: their agents stopped; their ids."""
    stopped = []
    with project.store.read() as tx:
        now = {task_id: tx.lease(task_id) for task_id in leases}
    for task_id, epoch in leases.items():
        lease = now[task_id]
        if lease is None or lease.epoch != epoch or not lease.claimed:
            reap_turn(project, task_id)
            stopped.append(task_id)
    return stopped
