"""Where a project's turns run and who answers for them: one host (local) or a team's hosts (shared).

A project keeps its records either in its own SQLite file, where one host launches, judges and stops
every turn, or in the shared PostgreSQL store (the person's ``database_url`` setting), where turns are
queued for workers or held by the host that launched them, each host judges only the turns it holds,
their files are shipped through the store and a stop reaches a turn elsewhere through its lease
(docs/workers.md). That choice is this object, built once by :meth:`Project.open
<corral.engine.project.Project.open>` from the person's settings and reached as ``project.placement``:
every decision the mode makes is one method here, so no module outside this one and the store asks
whether a ``database_url`` is set, and a test passes the placement it wants instead of changing settings.

Who this host is on the shared store (:func:`host_id`) is here too: the identity a worker claims under is
the one a local launch, a pair or an accept of the same ``CORRAL_HOME`` holds its turn and its processes
under, so every host judges only what it owns (docs/workers.md#turns-run-on-your-own-host).

The shared placement's code lives beside the engine's other rooms for now (docs/architecture.md names
its modules); it is reached from here or through a decision made here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from corral.adapters.files import create_once
from corral.errors import StoreMissing, UsageError

if TYPE_CHECKING:
    from corral.domain.clock import Clock
    from corral.engine.config import Config
    from corral.engine.paths import ProjectPaths
    from corral.store import SQLiteStore, Store

#: The one setting that chooses the shared placement: a PostgreSQL URL, from the person's own settings only.
SETTING = "database_url"


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


class Placement(ABC):
    """The decisions the team mode makes; :class:`LocalPlacement` and :class:`SharedPlacement` make them."""

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
    def remote(self) -> bool:
        """Whether the records live on a server reached over the network (no ``corral.db`` here): it may be
        down, so a long-lived reader reaches it before serving, and ``doctor`` says it connected."""

    @abstractmethod
    def owner(self, project: Opened) -> str | None:
        """Who a process record (a supervisor, a pair, an accept) or a local turn of this host names as its
        owner: this host's identity on the shared store, None where one host keeps every record."""

    @abstractmethod
    def other_hosts(self) -> bool:
        """Whether another host may hold a turn, a pair or an accept of this project. When it may, a turn is
        judged only by the host that holds it (read here as that host shipped it), a record another host
        owns is left to it, an auto-resume or a notice is this host's only for its own turns, and the
        reconciler runs the shared sweeps: lost workers' leases, stops relayed to this host's own turns."""

    @abstractmethod
    def ships_files(self) -> bool:
        """Whether a turn's files reach other hosts through the store (shipped by the host that runs it,
        materialized by the others)."""

    @abstractmethod
    def queue_url(self) -> str | None:
        """Where turns are queued for workers (the job queue's database); None: no worker can take one."""

    @abstractmethod
    def check_restorable(self) -> None:
        """Refuse ``corral restore`` (which puts back an SQLite file) where the records are elsewhere."""


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
        raise UsageError(
            f"{SETTING} is not set, so there is no PostgreSQL database to copy to or from.",
            hint="Set it in your own settings (never corral.toml): "
            f"corral config set {SETTING} postgresql://USER@HOST:5432/DB",
        )

    def remote(self) -> bool:
        return False

    def owner(self, project: Opened) -> str | None:
        return None

    def other_hosts(self) -> bool:
        return False

    def ships_files(self) -> bool:
        return False

    def queue_url(self) -> str | None:
        return None

    def check_restorable(self) -> None:
        return None


class SharedPlacement(Placement):
    """A team's hosts over the shared PostgreSQL store at ``url`` (docs/workers.md)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return "SharedPlacement(<url>)"  # the URL may carry a password: never shown

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
                f"or unset {SETTING} to keep using SQLite.",
            ) from exc

    def existing_store(self, project: Opened) -> Store | None:
        return self.shared_store(project, create=False)

    def shared_store(self, project: Opened, *, create: bool) -> Store:
        from corral.engine.paths import prepare_private_state, private_umask
        from corral.store.postgres import PostgresStore  # psycopg only for a user who chose PostgreSQL

        with private_umask():
            prepare_private_state(project.paths)
        return PostgresStore(self.url, schema=project.pg_schema, clock=project.clock, create=create)

    def remote(self) -> bool:
        return True

    def owner(self, project: Opened) -> str | None:
        return host_id(project)

    def other_hosts(self) -> bool:
        return True

    def ships_files(self) -> bool:
        return True

    def queue_url(self) -> str | None:
        return self.url

    def check_restorable(self) -> None:
        raise UsageError(
            f"This project keeps its records in PostgreSQL ({SETTING}); `corral restore` puts back an SQLite file.",
            hint=f"Unset {SETTING}, restore, then copy it over: corral store migrate --to postgres --replace",
        )


def placement_for(config: Config) -> Placement:
    """The placement the person's settings choose (``database_url`` or ``CORRAL_DATABASE_URL``)."""
    url = config.get(SETTING)
    return SharedPlacement(str(url)) if url else LocalPlacement()
