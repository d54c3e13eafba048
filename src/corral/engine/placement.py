"""Where a project's turns run and who answers for them: one host (local) or a team's hosts (shared).

A project keeps its records either in its own SQLite file, where one host launches, judges and stops
every turn, or in the shared PostgreSQL store (the person's ``database_url`` setting), where turns are
queued for workers or held by the host that launched them, each host judges only the turns it holds,
their files are shipped through the store and a stop reaches a turn elsewhere through its lease
(docs/workers.md). That choice is this object, built once by :meth:`Project.open
<corral.engine.project.Project.open>` from the person's settings and reached as ``project.placement``:
every part the mode plays is one method here, which the local placement (:class:`LocalPlacement`, below)
plays as one host does, most often by doing nothing, and the shared placement
(:class:`~corral.engine.shared_store.team_placement.SharedPlacement`) through the shared store's own room,
``corral.engine.shared_store``. So no module outside the two and the store asks whether a ``database_url`` is
set, none below the shared room imports its code, and a test passes the placement it wants.

The shared room sits above every other room of the engine (it queues turns the launch skeleton starts,
and ends turns the recovery sweeps would): this house names its placement by module and loads it when the
settings choose it (:data:`SHARED`), as a driver is loaded, and every other call reaches it through here.

Who this host is on the shared store (:func:`host_id`) is here too: the identity a worker claims under is
the one a local launch, a pair or an accept of the same ``CORRAL_HOME`` holds its turn and its processes
under, so every host judges only what it owns (docs/workers.md#turns-run-on-your-own-host).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from msgspec import Struct

from corral.adapters.files import create_once
from corral.errors import UsageError

if TYPE_CHECKING:
    from corral.domain.actors import Actor
    from corral.domain.clock import Clock
    from corral.domain.records import ProcessRecord, Task, Turn
    from corral.domain.substate import Live
    from corral.domain.team import Lease, TurnPlan
    from corral.engine.config import Config
    from corral.engine.paths import ProjectPaths
    from corral.store import SQLiteStore, Store, Tx

#: The one setting that chooses the shared placement: a PostgreSQL URL, from the person's own settings only.
SETTING = "database_url"

#: The shared placement, by module and class: loaded only when the settings choose it (its room is above
#: every room that calls it, and a single user's corral never loads the team's code).
SHARED = ("corral.engine.shared_store.team_placement", "SharedPlacement")


class Opened(Protocol):
    """What a placement reads of an opened project (:class:`~corral.engine.project.Project`, which opens it,
    so it is named here by what it offers)."""

    @property
    def paths(self) -> ProjectPaths: ...
    @property
    def config(self) -> Config: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def pg_schema(self) -> str: ...
    def open_sqlite(self) -> SQLiteStore: ...
    def sqlite_tasks(self) -> int | None: ...


def host_name(project: Opened) -> str:
    """The name this host's worker shows: the ``worker_host`` setting, else the host's own name."""
    configured = project.config.get("worker_host")
    if configured:
        return str(configured)
    import socket  # the host's name: asked only on the shared store, never by a read on SQLite

    return socket.gethostname()


#: The file in a ``CORRAL_HOME`` holding the random token of its worker's id, made once.
WORKER_TOKEN = "worker.token"


def worker_id(home: Path, host: str) -> str:
    """This home's worker: its host and a random token made once for the home (0600, in corral's own
    state), so a restarted worker is the same worker while two hosts with the same home path (or one
    host name) never are."""
    import secrets  # a home's token is made once: a read never pays for the module

    token = create_once(home / WORKER_TOKEN, secrets.token_hex(6).encode()).decode().strip()
    return f"{host}-{token}"


def host_id(project: Opened) -> str:
    """This home's identity on the shared store: its worker's id (:func:`worker_id`), which its local turns,
    pairs and accepts are held under too, so a worker and a local launch of one home agree."""
    return worker_id(project.paths.home, host_name(project))


def wants_workers(project: Opened) -> bool:
    """The person's own ``dispatch`` setting sends their turns to the workers (``"workers"``)."""
    return str(project.config["dispatch"]) == "workers"


def workers_need_the_shared_store() -> UsageError:
    """Turns meant for workers with no queue to reach them (no shared store, or no commit to name the project)."""
    return UsageError(
        'dispatch = "workers" needs the shared PostgreSQL store and a repository with a commit.',
        code="workers-need-postgres",
        hint=f"Set {SETTING} in your own settings to the shared server's postgresql:// URL, or run the turns here: "
        "corral config set dispatch local",
    )


def no_shared_store(doing: str) -> UsageError:
    """What only the shared store can do, asked where there is none."""
    return UsageError(
        f"{SETTING} is not set, so there is no PostgreSQL database to {doing}.",
        hint="Set it in your own settings (never corral.toml): "
        f"corral config set {SETTING} postgresql://USER@HOST:5432/DB",
    )


class Fetched(Struct, frozen=True):
    """What the remote holds for a task: its branch tip, its WIP commit, the target's tip (None: absent)."""

    branch: str | None
    wip: str | None
    target: str | None


class Held:
    """What the shared sweeps of a reconcile pass (:meth:`Placement.sweep_held`) leave to its working sweep:
    the tasks whose turns they ended (a lost worker's), and the working tasks this host must not judge (held
    by another host, or parked here by a stop relayed from one). :meth:`after_pass` is the part played once
    the working sweep is done; one host plays none."""

    def __init__(self, ended: list[str] | None = None, leave: set[str] | None = None) -> None:
        self.ended = ended or []
        self.leave = leave or set()

    def after_pass(self, still: Mapping[str, str | None], seen: dict[str, Live]) -> None:
        """With ``still`` (the working tasks whose turns go on, with their commands) and what the pass saw of
        this host's running turns (``seen``): ship this host's own turns for the others to read."""
        return None


class Placement(ABC):
    """The part the team mode plays; :class:`LocalPlacement` plays it on one host, ``SharedPlacement`` on many."""

    # -- where the records live ------------------------------------------------------------------

    @abstractmethod
    def open_store(self, project: Opened) -> Store:
        """Where the project's records live: its SQLite file, or its schema in the shared database."""

    @abstractmethod
    def existing_store(self, project: Opened) -> Store | None:
        """The project's store only if it is already there (None: nothing to read); nothing is created."""

    @abstractmethod
    def shared_store(self, project: Opened, *, create: bool) -> Store:
        """The project's schema in the shared database (to copy records to or from); refused locally."""

    @abstractmethod
    def over_network(self) -> bool:
        """Whether the records live on a server reached over the network (no ``corral.db`` here), which
        ``doctor`` says it connected to."""

    @abstractmethod
    def reach(self, project: Opened) -> None:
        """Before a long-lived reader serves the project: reach its records where they may be down (the
        server's ``StoreError`` raised here, not at its first read); one host's file has nothing to reach."""

    @abstractmethod
    def check_restorable(self) -> None:
        """Refuse ``corral restore`` (which puts back an SQLite file) where the records are elsewhere."""

    # -- who owns a turn, a record -----------------------------------------------------------------

    @abstractmethod
    def owner(self, project: Opened) -> str | None:
        """Who a process record (a supervisor, a pair, an accept) or a local turn of this host names as its
        owner: this host's identity on the shared store, None where one host keeps every record."""

    @abstractmethod
    def records_elsewhere(self, project: Opened, tx: Tx, kind: str, task_id: str | None = None) -> list[ProcessRecord]:
        """The process records of ``kind`` (of ``task_id``, or every task's) another host owns, read in ``tx``:
        their pids and lock files are that host's, which judges and ends them. None on one host."""

    @abstractmethod
    def turn_lease(self, tx: Tx, task_id: str) -> Lease | None:
        """The lease of the task's turn, read in ``tx`` (a worker's turn was launched at its claim); one host
        keeps no leases."""

    @abstractmethod
    def read_elsewhere(self, project: Opened, task_id: str) -> Live | None:
        """What is known of the task's turn when another host holds it (as that host shipped it), for a reader
        with no reconcile pass behind it; None: this host judges it (every turn, on one host)."""

    @abstractmethod
    def resumes_here(self, project: Opened, lease: Lease | None) -> bool:
        """Whether this host may auto-resume the task whose last turn holds ``lease``: a turn a host ran on its
        own is resumed by that host only, where its worktree and harness session are."""

    @abstractmethod
    def own_tasks(self, project: Opened, tx: Tx, tasks: list[Task]) -> list[Task]:
        """Of ``tasks``, those whose incidents this host tells (read in ``tx``): on the shared store every
        host's daemon serves the project, and only the host whose turn it was tells one."""

    # -- how a turn is started and handed over -----------------------------------------------------

    @abstractmethod
    def goes_to_workers(
        self, project: Opened, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None
    ) -> bool:
        """Whether the task's next turn (started by ``actor``) runs on a worker, in that worker's worktree,
        rather than here. ``tx``: read in the caller's transaction."""

    @abstractmethod
    def check_hand_over(self, project: Opened) -> bool:
        """Before a person's launch records anything: refuse now turns meant for workers that cannot reach
        one; True when the turn will go to them (its harness is checked by the worker that claims it)."""

    @abstractmethod
    def hand_over(self, project: Opened, task: Task, turn: Turn, plan: Callable[[], TurnPlan]) -> bool:
        """Hand the recorded ``turn`` to the hosts that run it instead of this one (its ``plan`` saved in the
        task's lease, a job sent to the workers); False: this host launches it."""

    @abstractmethod
    def hold_here(self, project: Opened, tx: Tx, task_id: str, command_id: str, actor: Actor) -> None:
        """In the transaction that records a turn this host will run: hold it under this host's identity, so
        every other host reads it as this host's before its supervisor even starts."""

    @abstractmethod
    def queue_url(self) -> str | None:
        """Where turns are queued for workers (the job queue's database); None: no worker can take one."""

    # -- how a turn's files and branch reach other hosts -----------------------------------------

    @abstractmethod
    def bring_files(self, project: Opened, task_id: str) -> int:
        """Before a read of the task's files: this host's copy of what another host shipped of its turns.
        The bytes written (none on one host, where every file is written here)."""

    @abstractmethod
    def review_branch(
        self, project: Opened, task: Task, target: str, lease: Lease | None, doing: str
    ) -> Fetched | None:
        """Before a review (``doing``: ``accept``, ``diff``) of a task whose turns ran on workers (``lease``):
        the local branch at the remote's tip, refused while its last turn's work has not reached the remote;
        what the remote holds. None: this host's branch is the task's."""

    @abstractmethod
    def remote_target(self, project: Opened, task: Task, target: str) -> str | None:
        """The remote's tip of ``target`` as fetched now, for an accept of a task whose turns ran on workers."""

    @abstractmethod
    def push_target(self, project: Opened, target: str, commit: str, expected: str) -> bool:
        """Move the remote's ``target`` from ``expected`` to ``commit`` (a compare-and-swap); False when it moved."""

    @abstractmethod
    def retire_branch(self, project: Opened, task: Task, tip: str) -> None:
        """After an accept of a task whose turns ran on workers: the remote's branch archived, its WIP gone."""

    # -- how stops are relayed and what the reconciler sweeps ----------------------------------------

    @abstractmethod
    def stop_elsewhere(self, project: Opened, task: Task, actor: Actor) -> Task | None:
        """Stop the task's turn when another host (a worker, or a host running it on its own) holds it: the
        stop rides on its lease; the task as it is after. None: the turn is this host's to stop."""

    @abstractmethod
    def sweep_held(
        self,
        project: Opened,
        working: Mapping[str, str | None],
        problems: list[str] | None,
        observed: dict[str, Live] | None,
    ) -> Held:
        """The sweeps a reconcile pass runs before judging ``working`` (each working task's current command):
        lost workers' turns ended, which turns other hosts hold (read into ``observed``), stops asked
        elsewhere relayed, what others shipped brought here. A failing one is a line in ``problems`` (raised
        with none), never the pass's end. One host has none to run."""


class LocalPlacement(Placement):
    """One host: the records in the project's ``corral.db``, every turn launched, judged and stopped here."""

    def __repr__(self) -> str:
        return "LocalPlacement()"

    def open_store(self, project: Opened) -> Store:
        return project.open_sqlite()

    def existing_store(self, project: Opened) -> Store | None:
        from corral.store import SQLiteStore

        db = project.paths.db
        return SQLiteStore(db, create=False) if db.is_file() else None

    def shared_store(self, project: Opened, *, create: bool) -> Store:
        raise no_shared_store("copy to or from")

    def over_network(self) -> bool:
        return False

    def reach(self, project: Opened) -> None:
        return None

    def check_restorable(self) -> None:
        return None

    def owner(self, project: Opened) -> str | None:
        return None

    def records_elsewhere(self, project: Opened, tx: Tx, kind: str, task_id: str | None = None) -> list[ProcessRecord]:
        return []

    def turn_lease(self, tx: Tx, task_id: str) -> Lease | None:
        return None

    def read_elsewhere(self, project: Opened, task_id: str) -> Live | None:
        return None

    def resumes_here(self, project: Opened, lease: Lease | None) -> bool:
        return True

    def own_tasks(self, project: Opened, tx: Tx, tasks: list[Task]) -> list[Task]:
        return tasks

    def goes_to_workers(
        self, project: Opened, task_id: str | None = None, actor: Actor | None = None, tx: Tx | None = None
    ) -> bool:
        return wants_workers(project)  # asked for, with no worker to reach: refused where it would be queued

    def check_hand_over(self, project: Opened) -> bool:
        if wants_workers(project):
            raise workers_need_the_shared_store()
        return False

    def hand_over(self, project: Opened, task: Task, turn: Turn, plan: Callable[[], TurnPlan]) -> bool:
        if wants_workers(project):
            raise workers_need_the_shared_store()
        return False

    def hold_here(self, project: Opened, tx: Tx, task_id: str, command_id: str, actor: Actor) -> None:
        return None

    def queue_url(self) -> str | None:
        return None

    def bring_files(self, project: Opened, task_id: str) -> int:
        return 0

    def review_branch(
        self, project: Opened, task: Task, target: str, lease: Lease | None, doing: str
    ) -> Fetched | None:
        return None

    def remote_target(self, project: Opened, task: Task, target: str) -> str | None:
        raise no_shared_store("read a worker's remote from")

    def push_target(self, project: Opened, target: str, commit: str, expected: str) -> bool:
        raise no_shared_store("accept a worker's turn through")

    def retire_branch(self, project: Opened, task: Task, tip: str) -> None:
        raise no_shared_store("retire a worker's branch through")

    def stop_elsewhere(self, project: Opened, task: Task, actor: Actor) -> Task | None:
        return None

    def sweep_held(
        self,
        project: Opened,
        working: Mapping[str, str | None],
        problems: list[str] | None,
        observed: dict[str, Live] | None,
    ) -> Held:
        return Held()


def chooses_shared_store(config: Config) -> bool:
    """Whether the person's settings choose the shared store, asked without opening it (``doctor`` outside a
    repository: the team's engine is needed only then)."""
    return bool(config.get(SETTING))


def placement_for(config: Config) -> Placement:
    """The placement the person's settings choose (``database_url`` or ``CORRAL_DATABASE_URL``)."""
    url = config.get(SETTING)
    if not url:
        return LocalPlacement()
    import importlib

    module, name = SHARED
    shared: Callable[[str], Placement] = getattr(importlib.import_module(module), name)
    return shared(str(url))
