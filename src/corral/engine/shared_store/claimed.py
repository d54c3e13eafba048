"""A worker's side of a queued turn: claim it under a new epoch, run it here, push its branch (docs/workers.md).

The worker runs the supervisor exactly as a local launch does; what differs is around it:
the claim (the store hands the queued command to one worker, with an epoch no earlier claim
holds), a worktree that follows the remote's tip of the task branch with the last worker's
uncommitted work restored, a fence in the command (every write of the turn's results checks
the epoch in its own transaction: ``recovery.receipts``), a work-in-progress push every
``wip_push_interval`` seconds while the turn runs, and after it the branch pushed with a lease
on the tip it started from. A claim whose epoch is taken over while the turn runs stops its
agent and writes nothing more.

A turn's end is never stranded: the store or the remote failing for a while is waited out with a
bounded backoff while the epoch holds, said in the worker's events and on the lease (``show``:
"work not yet pushed: …"), and the lease is let go only once the remote holds the turn's work. A
stop asked on another host reaches the turn through its lease, and is relayed to its supervisor
as a local stop; a worker shutting down with a second signal hands its turns back (:meth:`Follow.give_back`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from msgspec.structs import replace

from corral import crashpoints
from corral.adapters import tip_files
from corral.adapters.pid_identity import send_identified
from corral.domain import prompts
from corral.domain.actors import Actor
from corral.domain.records import FailureEvidence, PossibleEffects, Session, Task, Turn
from corral.domain.status import Status
from corral.domain.substate import NOT_PUSHED
from corral.domain.team import HANDED_BACK, HARNESS_HOST, Lease, LeaseState, TurnPlan
from corral.engine.git_remote import remote_name
from corral.engine.operations import control
from corral.engine.operations.turns import TurnSpec, revert_files, start_turn
from corral.engine.placement import Fetched
from corral.engine.project import Project
from corral.engine.recovery.faults import internal_fault
from corral.engine.recovery.working import process_receipt
from corral.engine.resolve import task_config
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.liveness import live_facts
from corral.engine.runtime.processes import reap_turn, supervisor_identity
from corral.engine.shared_store import remote_branches as remote
from corral.engine.shared_store import shipping
from corral.engine.shared_store.leases import end_interrupted
from corral.errors import CorralError, LeaseLost

if TYPE_CHECKING:
    from corral.engine.shared_store.transcripts import Carrier

#: How often a worker looks at the turn it runs (its receipt recorded, its epoch still its own).
POLL_SECONDS = 0.2
#: How often it ships the turn's files and live status to the store while it runs.
SHIP_SECONDS = 1.0
#: The first pause before the store or the remote, having failed, is tried again; it doubles with each
#: failure in a row, up to :data:`RETRY_MAX_SECONDS`, for as long as the epoch holds.
RETRY_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0

#: What a followed turn tells its worker: an event's kind and its fields (the worker's ``--json`` lines).
Say = Callable[..., None]


def _quiet(_kind: str, **_fields: Any) -> None:
    return None


class Me(Struct, frozen=True):
    """The worker that claims: its id (stable across its restarts on this host), host and lease."""

    id: str
    host: str


class Ran(Struct, frozen=True):
    """How a claimed job ended: ``done`` (recorded and pushed), ``lost`` (fenced off), ``skipped``,
    ``handed-back`` (the worker shut down: interrupted for another worker), ``unpushed`` (the worker shut
    down before the remote took the turn's work: its claim left to run out)."""

    outcome: str
    detail: str = ""


def claim(project: Project, me: Me, task_id: str, command_id: str) -> Lease | None:
    with project.store.write() as tx:
        return tx.claim_turn(task_id, command_id, me.id, me.host)


def run(
    project: Project,
    me: Me,
    task_id: str,
    command_id: str,
    *,
    wip_seconds: float | None = None,
    say: Say = _quiet,
    hand_back: threading.Event | None = None,
) -> Ran:
    """Claim the queued command and run it to its recorded end; what it came to."""
    lease = claim(project, me, task_id, command_id)
    if lease is None:
        return Ran("skipped", "not queued (claimed by another worker, or superseded)")
    return run_claimed(project, me, lease, wip_seconds=wip_seconds, say=say, hand_back=hand_back)


def run_claimed(
    project: Project,
    me: Me,
    lease: Lease,
    *,
    wip_seconds: float | None = None,
    say: Say = _quiet,
    hand_back: threading.Event | None = None,
) -> Ran:
    """Run a turn this worker claimed: its worktree, its command under the fence, the launch, then :class:`Follow`."""
    task_id, command_id = lease.task_id, lease.command_id
    epoch = lease.epoch
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        current = tx.current_command(task_id)
        session = tx.get_session(task.session_id) if task is not None and task.session_id else None
    if (
        task is None
        or task.status is not Status.WORKING
        or session is None
        or current is None
        or current.command_id != command_id
    ):
        with project.store.write() as tx:
            tx.release_turn(task_id, epoch)
        return Ran("skipped", "the task moved on before the turn was claimed")
    try:
        worktree, fetched, command = _launch(project, me, lease, task, session, current)
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
    followed = Follow(project, me, task, command_id, epoch, worktree, fetched.branch, interval, say, hand_back)
    # The remote's WIP ref as the claim's one ls-remote read it, under this epoch: each WIP push swaps from it
    # (a push refused because it moved since is looked at again), so it is not read again before the first.
    followed.wip, followed.wip_known = fetched.wip, True
    return followed.carrying(session.id, command).run()


def _launch(
    project: Project, me: Me, lease: Lease, task: Task, session: Session, current: Turn
) -> tuple[Path, Fetched, proto.Command]:
    """The claimed turn's worktree here, then the one launch skeleton's end (``turns.start_turn``) under the
    claim's fence; the worktree, what the remote held when it was made (the tip of the branch it started
    from, the WIP ref), and the command."""
    from corral.engine.shared_store import transcripts  # a harness session's transcript: only where a turn launches

    task_id, epoch = task.id, lease.epoch
    plan = TurnPlan.from_json(lease.plan)
    worktree, fetched = remote.worktree_for_turn(project, task, plan.target, epoch)
    with project.store.write() as tx:
        tx.set_lease_worktree(task_id, epoch, str(worktree))
    here = replace(session, worktree=str(worktree), branch=task.branch)
    if plan.reverts:
        revert_files(project, here, list(plan.reverts))
    body, sync = plan.body, plan.sync_before_work
    dirty = plan.resume_after_crash and bool(project.git.dirty_paths(worktree))
    if plan.resume_after_crash:
        body, sync = prompts.resume_after_crash(dirty, list(plan.pending)), not dirty
    config = task_config(project.config, task, on_worker=True)
    # A session made on another host is resumed here when its transcript came through the store.
    carry = transcripts.takeover(replace(project, config=config), task, here, me.host)
    if carry is not None and not carry.carried:
        # The harness session lives on the host that ran it, and its transcript could not be carried:
        # this host starts a new session, told the task and what happened before (its crash-context
        # prompt and the pending feedback).
        here = replace(here, harness_session_id=None)
        if plan.resume_after_crash:  # every pending feedback in full: no conversation above to point at
            body = prompts.resume_without_session(task.goal, task.prompt, dirty, list(plan.pending))
        else:
            body = f"{prompts.first_turn(task.goal, task.prompt)}\n\n{body}"
    spec = TurnSpec(
        plan.kind,
        body,
        delivered=plan.delivered,
        sync_before_work=sync,
        announce_merge=plan.announce_merge,
        read_only=plan.read_only,
    )

    def confirm() -> None:
        with project.store.write() as tx:
            tx.check_fence(task_id, epoch)  # taken over while this host made its worktree: nothing launched
            now = tx.get_task(task_id) or task
            metadata = {**transcripts.noted(now.metadata, carry), HARNESS_HOST: {here.id: me.host}}
            tx.update_task(task_id, metadata=metadata, touch=False)

    fence = proto.Fence(epoch, me.id, me.host)
    command, _launched = start_turn(
        project, task, here, current, spec, plan.target, config, fence=fence, confirm=confirm
    )
    return worktree, fetched, command


def resume_following(
    project: Project, me: Me, lease: Lease, *, say: Say = _quiet, hand_back: threading.Event | None = None
) -> Ran:
    """A turn this worker claimed and no job of its follows (it restarted, or the job died): followed again,
    from the remote tip it started on."""
    with project.store.read() as tx:
        task = tx.get_task(lease.task_id)
    if task is None or lease.worktree is None:
        with project.store.write() as tx:
            tx.release_turn(lease.task_id, lease.epoch)
        return Ran("skipped", "nothing of the turn was launched here")
    started_from = tip_files.ref_commit(project.git, project.repo, f"refs/remotes/{remote_name(project)}/{task.branch}")
    interval = float(project.config["wip_push_interval"])
    followed = Follow(
        project, me, task, lease.command_id, lease.epoch, Path(lease.worktree), started_from, interval, say, hand_back
    )
    command = proto.read_record(project.paths.protocol_dir(task.id) / proto.COMMAND, proto.Command)
    if command is not None and command.command_id == lease.command_id and task.session_id is not None:
        followed = followed.carrying(task.session_id, command)  # its session's transcript, shipped on
    return followed.run()


class Follow:
    """One claimed turn as its worker follows it, until its receipt is recorded (here, as it lands) and its
    work is on the remote: its files and live facts shipped and its WIP pushed on the way, a stop asked
    elsewhere relayed, the branch pushed at the end. A lost epoch stops the agent and ends it with nothing
    written; the store or the remote failing for a while is waited out while the epoch holds."""

    def __init__(
        self,
        project: Project,
        me: Me,
        task: Task,
        command_id: str,
        epoch: int,
        worktree: Path,
        started_from: str | None,
        wip_seconds: float,
        say: Say = _quiet,
        hand_back: threading.Event | None = None,
    ) -> None:
        self.project, self.me, self.task = project, me, task
        self.command_id, self.epoch = command_id, epoch
        self.worktree, self.started_from = worktree, started_from
        self.wip_seconds = wip_seconds
        self.say = say
        self.hand_back = hand_back or threading.Event()
        # What the remote's WIP ref held when this worker last looked or pushed (each WIP push swaps
        # from it); read from the remote before the first push.
        self.wip: str | None = None
        self.wip_known = False
        self.told: dict[str, str] = {}  # each kind of trouble as last said, so a long outage is said once
        self.carrier: Carrier | None = None

    def carrying(self, session_id: str, command: proto.Command) -> Follow:
        """Ship the turn's harness session with its files too, so the next host can resume it (docs/workers.md)."""
        from corral.engine.shared_store.transcripts import (
            Carrier,  # a harness session's transcript: only where turns run
        )

        self.carrier = Carrier(self.project, self.task.id, session_id, command, self.me.host)
        return self

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> Ran:
        project, task_id = self.project, self.task.id
        last_wip = last_ship = time.monotonic()
        pause = RETRY_SECONDS
        relayed = False
        while True:
            if self.hand_back.is_set():
                return self.give_back()
            try:
                lease, answered, status = self.look()
            except CorralError as exc:
                pause = self._wait(pause, "store-unavailable", exc.message)
                continue
            if lease is None or lease.epoch != self.epoch or not lease.claimed:
                reap_turn(project, task_id)
                return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
            # The turn ended: its receipt recorded (here, or by this host's reconciler), or its supervisor
            # found gone without one (the task no longer works on it).
            if answered or status is not Status.WORKING:
                break
            crashpoints.hit("worker.follow")
            if lease.stop_by and not relayed:
                relayed = True  # once: a supervisor that cannot be asked ends as a lost turn, or is fenced off
                self.relay_stop(lease.stop_by)
            # Its receipt is recorded here as soon as it lands (the worker's settle loop would, later):
            # the turn's end costs one lstat a poll, not a reconcile pass of the whole project.
            try:
                if process_receipt(project, self.task):
                    continue
            except LeaseLost:
                reap_turn(project, task_id)
                return Ran("lost", "the lease was taken over before the turn was recorded: nothing written")
            except (CorralError, OSError) as exc:
                pause = self._wait(pause, "store-unavailable", _said(exc))
                continue
            pause = RETRY_SECONDS
            self.told.pop("store-unavailable", None)
            if time.monotonic() - last_ship >= SHIP_SECONDS:
                last_ship = time.monotonic()
                try:
                    self.ship()
                except LeaseLost:
                    reap_turn(project, task_id)
                    return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
                except (CorralError, OSError):
                    pass  # the store or the disk, a moment: the next pass ships what this one could not
            if time.monotonic() - last_wip >= self.wip_seconds:
                last_wip = time.monotonic()
                try:
                    self.push_wip()
                    self.told.pop("wip-not-pushed", None)
                except LeaseLost:
                    continue  # the next look at the lease stops the agent
                except (CorralError, OSError) as exc:
                    self._tell("wip-not-pushed", _said(exc))  # the next interval tries again; the turn goes on
            time.sleep(POLL_SECONDS)
        return self.end()

    def look(self) -> tuple[Lease | None, bool, Status]:
        """Each poll's look at the store, one statement: the task's lease, whether the agent's turn of this
        command is recorded, the task's status (the task's as followed, once it is gone)."""
        with self.project.store.read() as tx:
            lease, answered, status = tx.followed(self.task.id, self.command_id)
        return lease, answered, status or self.task.status

    def _wait(self, pause: float, kind: str, why: str) -> float:
        """Say why (once per cause), wait ``pause`` (a hand-back wakes it); the next, longer pause."""
        self._tell(kind, f"{why}; trying again in {pause:g} s")
        self.hand_back.wait(pause)
        return min(pause * 2, RETRY_MAX_SECONDS)

    def _tell(self, kind: str, message: str) -> None:
        cause = message.split("; trying again", 1)[0]
        if self.told.get(kind) != cause:
            self.told[kind] = cause
            self.say(kind, task=self.task.id, message=message)

    # -- what it sends -----------------------------------------------------------------------------
    def ship(self) -> None:
        """The turn's files and live facts to the store, for reviewers elsewhere, and its harness session's
        transcript, for the host that takes the session over next (each write fenced)."""
        live = (self.command_id, live_facts(self.project, self.task))
        shipping.ship(self.project, self.task.id, self.epoch, live=live)  # files and live facts: one write
        if self.carrier is not None:
            try:
                self.carrier.ship(self.epoch)
            except OSError as exc:  # a harness file unreadable now: the next round tries again
                self._tell("transcript-not-shipped", _said(exc))

    def push_wip(self, *, final: bool = False) -> None:
        """The worktree's uncommitted work to the WIP ref: a swap from what this worker saw there last,
        made while the epoch holds."""
        if not self.worktree.is_dir():
            return
        if not self.wip_known:
            remote.hold(self.project, self.task, self.epoch)
            self.wip, self.wip_known = remote.wip_seen(self.project, self.task), True
        try:
            self.wip = remote.push_wip(
                self.project, self.task, self.worktree, epoch=self.epoch, seen=self.wip, final=final
            )
        except CorralError:
            self.wip_known = False  # looked at again (after the epoch is checked) before the next push
            raise

    def push(self, *, final: bool) -> None:
        """The branch, leased on the tip the turn started from, then its WIP; each while the epoch holds."""
        remote.push_branch(self.project, self.task, self.started_from, epoch=self.epoch)
        self.push_wip(final=final)

    # -- the end -------------------------------------------------------------------------------------
    def end(self) -> Ran:
        """The recorded turn's files shipped, its work pushed, then its lease let go; tried again (with a
        bounded backoff, said on the lease) while the store or the remote fails and the epoch holds."""
        pause = RETRY_SECONDS
        while True:
            try:
                self.ship()  # the whole turn, before its lease is let go
                self.push(final=True)
                with self.project.store.write() as tx:
                    if not tx.release_turn(self.task.id, self.epoch):
                        return Ran("lost", "the lease was taken over before it was let go: nothing more written")
                return Ran("done")
            except LeaseLost:
                return Ran("lost", "the lease was taken over before the push: nothing pushed")
            except (CorralError, OSError) as exc:
                why = _said(exc)
            try:
                with self.project.store.write() as tx:
                    tx.note_unpushed(self.task.id, self.epoch, why)  # what a reviewer reads (show, accept)
            except LeaseLost:
                return Ran("lost", "the lease was taken over before the push: nothing pushed")
            except CorralError:
                pass  # the store itself: the event says it
            if self.hand_back.is_set():
                return Ran("unpushed", f"{NOT_PUSHED} ({why}); its claim runs out with the worker")
            pause = self._wait(pause, "not-pushed", f"{NOT_PUSHED}: {why}")

    def relay_stop(self, actor: str) -> bool:
        """A stop asked on another host: the WIP pushed first (while the epoch holds), then the supervisor
        asked here exactly as a local ``corral stop`` asks it (it stops the agent's group: SIGTERM, then
        SIGKILL after its grace); whether a supervisor was there to ask."""
        who = Actor(actor) if actor in Actor._value2member_map_ else Actor.HUMAN
        try:
            self.push_wip()
        except (CorralError, OSError) as exc:
            self._tell("wip-not-pushed", _said(exc))  # the turn's end pushes it again
        asked = control.request_stop(self.project, self.task, who)
        told = "relayed to its supervisor" if asked else "no live supervisor here to ask"
        self.say("stop", task=self.task.id, message=f"stop asked by {who.value}: {told}")
        return asked

    def give_back(self) -> Ran:
        """The worker shuts down (a second signal while it drained): the turn's work pushed, its agent
        stopped, the turn recorded interrupted, the lease let go for auto-resume to queue it for another
        worker under the breaker."""
        project, task_id = self.project, self.task.id
        why = f"handed back by worker {self.me.host} on shutdown"
        try:
            self.push(final=False)
        except LeaseLost:
            reap_turn(project, task_id)
            return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
        except (CorralError, OSError) as exc:
            why += f" (its work could not be pushed first: {_said(exc)})"
        evidence = FailureEvidence(
            source="corral",
            code=HANDED_BACK,
            phase="running",
            category="crash",
            possible_effects=PossibleEffects.UNKNOWN,
            details={"reason": why, "host": self.me.host, "worker": self.me.id, "epoch": self.epoch},
        )
        claim = Lease(task_id, self.command_id, self.epoch, LeaseState.CLAIMED)
        try:
            with project.store.write() as tx:
                tx.check_fence(task_id, self.epoch)
                interrupted = end_interrupted(tx, claim, f"The turn was interrupted: {why}.", why, evidence)
        except LeaseLost:
            reap_turn(project, task_id)
            return Ran("lost", "the lease was taken over: its agent was stopped, nothing more written")
        except CorralError as exc:
            # Nothing can be recorded now: its agent is stopped all the same (no worker would watch it
            # once this one is gone), and its claim runs out, for another host to take it for lost.
            self._stop_agent()
            return Ran("unpushed", f"the store could not record the hand-back ({exc.message}); its agent was stopped")
        if not interrupted:
            return self.end()  # it ended meanwhile: pushed and let go as any turn
        self._stop_agent()
        try:
            process_receipt(project, self.task)  # one written before it was stopped: the turn's true end
        except (CorralError, OSError):
            pass
        ran = self.end()
        if ran.outcome != "done":
            return ran
        from corral.engine.operations.auto_resume import maybe_auto_resume  # the resume goes to the queue

        try:
            maybe_auto_resume(project, task_id)
        except CorralError as exc:
            self.say("problem", task=task_id, message=f"auto-resume: {exc.message}")
        return Ran("handed-back", why)

    def _stop_agent(self) -> None:
        """The supervisor first, and at once (a receipt it wrote now would be a second end of the
        turn), then the agent's group."""
        project, task_id = self.project, self.task.id
        status = proto.read_record(project.paths.protocol_dir(task_id) / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.command_id == self.command_id:
            send_identified(supervisor_identity(status), signal.SIGKILL)
        reap_turn(project, task_id, command_id=self.command_id)


def _said(exc: BaseException) -> str:
    return exc.message if isinstance(exc, CorralError) else f"{type(exc).__name__}: {exc}"


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
