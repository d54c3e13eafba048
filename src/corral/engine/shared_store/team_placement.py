"""The shared placement: a team's hosts over one PostgreSQL store (docs/workers.md).

Each part the team mode plays (:class:`~corral.engine.placement.Placement`) is played here through the
shared store's own room: turns go to the workers through the job queue (``shared_store.job_queue``,
``shared_store.handover``) or are held by the host that launched them; a host judges only what it holds
(``shared_store.leases``, ``shared_store.own_turns``); files reach other hosts through the store
(``shared_store.shipping``) and branches through the remote (``shared_store.remote_branches``); a stop
reaches a turn elsewhere through its lease (``shared_store.relayed_stops``). Loaded by name
(:data:`corral.engine.placement.SHARED`) only when the person's settings choose the shared store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial

from corral.domain.actors import Actor
from corral.domain.delays import HostWaits
from corral.domain.records import ProcessRecord, Task, Turn
from corral.domain.substate import Live
from corral.domain.team import Lease, TurnPlan
from corral.engine.placement import Fetched, Held, Opened, Placement, host_id, host_name
from corral.engine.project import Project
from corral.errors import StoreMissing, UsageError
from corral.store import Store, Tx


def _project(project: Opened) -> Project:
    """The opened project itself: every caller of a placement passes the :class:`Project` that holds it."""
    assert isinstance(project, Project)
    return project


class SharedPlacement(Placement):
    """A team's hosts over the shared PostgreSQL store at ``url`` (docs/workers.md)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return "SharedPlacement(<url>)"  # the URL may carry a password: never shown

    # -- where the records live ------------------------------------------------------------------

    def open_store(self, project: Opened) -> Store:
        try:
            return self.shared_store(project, create=False)
        except StoreMissing as exc:
            # No schema there yet: start one only when the SQLite file holds no history, so
            # choosing PostgreSQL never reads as "every task is gone".
            held = project.sqlite_tasks()
            if held == 0:
                return self.shared_store(project, create=True)
            raise StoreMissing(
                f"{exc.message.rstrip('.')}, but this project's SQLite database {project.paths.db} holds "
                f"{'its history' if held is None else f'{held} task(s)'}. corral will not start an empty "
                "history in PostgreSQL over it.",
                hint="Nothing was changed. Copy the history there: corral store migrate --to postgres; "
                "or unset database_url to keep using SQLite.",
            ) from exc

    def existing_store(self, project: Opened) -> Store | None:
        return self.shared_store(project, create=False)

    def shared_store(self, project: Opened, *, create: bool) -> Store:
        from corral.engine.private_state import prepare_private_state, private_umask
        from corral.store.postgres import PostgresStore  # psycopg only for a user who chose PostgreSQL

        with private_umask():
            prepare_private_state(project.paths)
        return PostgresStore(
            self.url,
            schema=project.pg_schema,
            clock=project.clock,
            create=create,
            busy_timeout=HostWaits.of(project.config).store_busy_timeout,
        )

    def over_network(self) -> bool:
        return True

    def reach(self, project: Opened) -> None:
        _project(project).store  # noqa: B018 -- opened now: served once it can be reached (and is there)

    def check_restorable(self) -> None:
        raise UsageError(
            "This project keeps its records in PostgreSQL (database_url); `corral restore` puts back an SQLite file.",
            hint="Unset database_url, restore, then copy it over: corral store migrate --to postgres --replace",
        )

    # -- who owns a turn, a record -----------------------------------------------------------------

    def owner(self, project: Opened) -> str | None:
        return host_id(project)

    def records_elsewhere(self, project: Opened, tx: Tx, kind: str, task_id: str | None = None) -> list[ProcessRecord]:
        me = host_id(project)
        return [p for p in tx.processes(task_id) if p.kind == kind and p.elsewhere(me)]

    def turn_lease(self, tx: Tx, task_id: str) -> Lease | None:
        return tx.lease(task_id)

    def read_elsewhere(self, project: Opened, task_id: str) -> Live | None:
        from corral.engine.runtime.liveness import away

        opened = _project(project)
        with opened.store.read() as tx:
            lease = tx.lease(task_id)
            if lease is None or not lease.elsewhere(host_id(project)):
                return None
            if not lease.holds_turn(tx.current_command_ids([task_id]).get(task_id)):
                return None
            workers = {w.id: w for w in tx.workers()} if lease.claimed else {}
            shipped = tx.live([task_id]).get(task_id)
            now = tx.now()
        return away(lease, shipped, workers, now)

    def resumes_here(self, project: Opened, lease: Lease | None) -> bool:
        # A worker's turn is resumed by any host (it is queued again), as is a task whose last turn holds no
        # lease (an older corral's); a local one by its own host.
        return lease is None or not lease.local or lease.worker_id == host_id(project)

    def own_tasks(self, project: Opened, tx: Tx, tasks: list[Task]) -> list[Task]:
        # The tasks whose latest turn this host ran (its lease held by this host: a local turn or this home's
        # worker's claim); a task whose turns hold no lease (an older corral's) stays.
        if not tasks:
            return tasks
        me = host_id(project)
        held = {lease.task_id: lease for lease in tx.leases()}
        return [t for t in tasks if t.id not in held or held[t.id].worker_id == me]

    # -- how a turn is started and handed over -----------------------------------------------------

    def goes_to_workers(
        self, project: Opened, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None
    ) -> bool:
        from corral.engine.shared_store.job_queue import to_workers

        return to_workers(_project(project), task_id, actor, tx)

    def check_hand_over(self, project: Opened) -> bool:
        from corral.engine.shared_store.job_queue import job_queue

        if not self.goes_to_workers(project):
            return False
        job_queue(_project(project))  # refused now when no worker can be reached
        return True

    def hand_over(self, project: Opened, task: Task, turn: Turn, plan: Callable[[], TurnPlan]) -> bool:
        from corral.engine.shared_store.handover import hand_over

        if not self.goes_to_workers(project, task.id, turn.actor):
            return False
        hand_over(_project(project), task, turn, plan())
        return True

    def hold_here(self, project: Opened, tx: Tx, task_id: str, command_id: str, actor: Actor) -> None:
        # A turn for the workers takes its lease when it is queued (``hand_over``).
        if not self.goes_to_workers(project, task_id, actor, tx):
            tx.hold_local(task_id, command_id, host_id(project), host_name(project))

    def queue_url(self) -> str | None:
        return self.url

    # -- how a turn's files and branch reach other hosts -----------------------------------------

    def bring_files(self, project: Opened, task_id: str) -> int:
        from corral.engine.shared_store import shipping

        return shipping.bring(_project(project), task_id)

    def review_branch(
        self, project: Opened, task: Task, target: str, lease: Lease | None, doing: str
    ) -> Fetched | None:
        from corral.engine.shared_store import remote_branches as remote

        if lease is None or lease.local:  # a turn run on a host of its own left its work in that host's worktree
            return None
        remote.refuse_unpushed(task, lease, doing)  # the remote's tip would be stale: never reviewed
        return remote.follow_branch(_project(project), task, target)

    def remote_target(self, project: Opened, task: Task, target: str) -> str | None:
        from corral.engine.shared_store import remote_branches as remote

        return remote.fetch(_project(project), task, target).target

    def push_target(self, project: Opened, target: str, commit: str, expected: str) -> bool:
        from corral.engine.shared_store import remote_branches as remote

        return remote.push_target(_project(project), target, commit, expected)

    def retire_branch(self, project: Opened, task: Task, tip: str) -> None:
        from corral.engine.shared_store import remote_branches as remote

        remote.retire(_project(project), task, tip)

    # -- how stops are relayed and what the reconciler sweeps ----------------------------------------

    def stop_elsewhere(self, project: Opened, task: Task, actor: Actor) -> Task | None:
        from corral.engine.shared_store.relayed_stops import stop

        return stop(_project(project), task, actor)

    def sweep_held(
        self,
        project: Opened,
        working: Mapping[str, str | None],
        problems: list[str] | None,
        observed: dict[str, Live] | None,
    ) -> Held:
        from corral.engine.recovery.reconcile import tolerated
        from corral.engine.shared_store import leases, own_turns

        opened = _project(project)
        # The lease sweep must not hide the local one.
        ended: list[str] = tolerated(problems, "leases", partial(leases.sweep, opened), [])
        me = host_id(project)
        # Which turns other hosts hold is asked again on the next pass. Not knowing which working turns are
        # this host's, it judges none of them this pass: a turn another host holds has no supervisor here,
        # and would be taken for lost.
        held = tolerated(
            problems,
            "turns held elsewhere",
            partial(leases.survey, opened, me, working, observed),
            leases.Survey(set(working), []),
        )
        grace = timedelta(seconds=float(opened.config["grace_period"]))
        # A stop not relayed now is relayed on the next pass; what others shipped is read again on it.
        parked: list[str] = tolerated(
            problems, "stops asked elsewhere", partial(own_turns.relay_stops, opened, held.mine, working, grace), []
        )
        tolerated(problems, "shipped files", partial(leases.bring_shipped, opened, me), 0)
        return _Swept(ended, held.away | set(parked), opened, held.mine, problems)


class _Swept(Held):
    """The shared sweeps' result, and after the working sweep: this host's own local turns shipped."""

    def __init__(
        self, ended: list[str], leave: set[str], project: Project, mine: list[Lease], problems: list[str] | None
    ) -> None:
        super().__init__(ended, leave)
        self.project = project
        self.mine = mine
        self.problems = problems

    def after_pass(self, still: Mapping[str, str | None], seen: dict[str, Live]) -> None:
        if not self.mine:
            return
        from corral.engine.recovery.reconcile import tolerated
        from corral.engine.shared_store import own_turns

        # Shipped again on the next pass.
        ship = partial(own_turns.ship, self.project, self.mine, still, seen)
        tolerated(self.problems, "own turns shipped", ship, None)
