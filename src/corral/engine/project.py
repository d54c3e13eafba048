"""One repository's corral: its paths, store, settings, git and clock, opened together.

Every engine operation takes a ``Project``; surfaces build one per invocation. Which state
directory a checkout uses is its project identity's (:mod:`corral.engine.identity`), so a
repository that moves keeps its tasks and a copy is told apart.
Dependencies are injected so tests replace only what they must.

A database that vanished is not a fresh start: when ``corral.db`` is missing or empty but
the state directory still holds task files, worktrees, diagnostics or backups, the store is
refused (``store-missing``: what is missing, what remains, the newest backup and the
``corral restore`` command) instead of created empty. Backups live in the state directory's
``backups/``; :meth:`Project.backup` and :meth:`Project.restore` make and put them back.
"""

from __future__ import annotations

import os
from datetime import datetime
from functools import partial
from pathlib import Path

from msgspec import Struct, field

from corral.adapters.files import write_atomic
from corral.adapters.git import Git
from corral.adapters.locks import is_locked
from corral.adapters.process import Runner, SubprocessRunner
from corral.domain.actors import Actor
from corral.domain.clock import Clock, utcnow
from corral.domain.delays import HostWaits
from corral.domain.status import Status
from corral.engine.config import Config, follow_move, load_config
from corral.engine.identity import Identity
from corral.engine.paths import ProjectPaths, corral_home, user_config_file
from corral.engine.placement import Placement, placement_for
from corral.engine.private_state import make_private_dir, prepare_private_state, private_umask
from corral.engine.state_location import locate
from corral.errors import DaemonRunning, RefusedError, StoreError, StoreMissing, UsageError
from corral.store import SQLiteStore, Store, sqlite_record


def default_actor() -> Actor:
    """The CLI's channel is ``human``; ``CORRAL_ACTOR`` lets a wrapper say otherwise."""
    raw = os.environ.get("CORRAL_ACTOR", "").strip().lower()
    if not raw:
        return Actor.HUMAN
    try:
        return Actor(raw)
    except ValueError:
        raise UsageError(
            f"CORRAL_ACTOR is '{raw}', which is not an actor.",
            hint="Use one of: " + ", ".join(a.value for a in Actor) + ", or unset it.",
        ) from None


def backups_dir(paths: ProjectPaths) -> Path:
    """Where ``corral backup`` puts its files, and ``restore`` keeps the file it replaces."""
    return paths.root / "backups"


def backups(paths: ProjectPaths) -> list[Path]:
    """The backups in the state directory, oldest first (by modification time, then name)."""
    found: list[tuple[float, str, Path]] = []
    try:
        for entry in os.scandir(backups_dir(paths)):
            if entry.name.endswith(".db") and entry.is_file(follow_symlinks=False):
                try:
                    found.append((entry.stat().st_mtime, entry.name, Path(entry.path)))
                except OSError:
                    continue  # removed meanwhile
    except OSError:
        return []
    return [path for _, _, path in sorted(found)]


def restore_hint(paths: ProjectPaths) -> str:
    """How to get the history back: the newest backup and the command that restores it."""
    found = backups(paths)
    if found:
        return f"Restore the newest backup ({len(found)} in {backups_dir(paths)}): corral restore '{found[-1]}'"
    return (
        f"No backup is in {backups_dir(paths)}: if you have a copy of corral.db (or moved it), give its path "
        "to `corral restore`, which puts it back (the file in the way is kept as a backup first)"
    )


def remains(paths: ProjectPaths) -> list[str]:
    """What the state directory still holds of a project: task files, worktrees, diagnostics, backups."""
    found = []
    for what, directory in (
        ("task directories", paths.tasks),
        ("worktrees", paths.worktrees),
        ("diagnostics directories", paths.diagnostics),
        ("backups", backups_dir(paths)),
    ):
        try:
            count = sum(1 for _ in directory.iterdir())
        except OSError:
            continue
        if count:
            found.append(f"{count} {what} ({directory.name}/)")
    return found


def _no_database(db: Path) -> bool:
    """The file is missing, or empty with no -wal beside it (SQLite would start a new database there)."""
    try:
        if db.stat().st_size > 0:
            return False
        wal = db.with_name(db.name + "-wal")
        return not wal.exists() or wal.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False  # the state directory itself is unusable: opening the store says how


def _record_store(db: Path, store_id: str, created: int) -> None:
    """What corral last knew of the SQLite database, kept beside it (:mod:`corral.store.sqlite_record`)."""
    write_atomic(sqlite_record.record_file(db), sqlite_record.payload(db, store_id, created))


def stamp(when: datetime) -> str:
    """A timestamp for a file name: sortable, no colons."""
    return when.strftime("%Y%m%dT%H%M%S") + f"{when.microsecond // 1000:03d}Z"


class Project(Struct):
    paths: ProjectPaths
    config: Config
    git: Git
    clock: Clock = utcnow
    identity: Identity | None = None  # None: a repository without a commit yet
    moved_from: str | None = None  # opening it found the repository moved from here, and followed
    #: Runs every program the engine starts besides git (whose own is ``git.runner``): a mode, like ``clock``.
    runner: Runner = field(default_factory=SubprocessRunner)
    _store: Store | None = field(default=None)
    _placement: Placement | None = field(default=None)
    _waits: HostWaits | None = field(default=None)

    @classmethod
    def open(
        cls,
        repo: str | Path | None = None,
        *,
        git: Git | None = None,
        clock: Clock = utcnow,
        copy: str | None = None,
        placement: Placement | None = None,
        store: Store | None = None,
        runner: Runner | None = None,
    ) -> Project:
        """The project of the checkout containing ``repo`` (default: the current directory).

        Its state directory is found by the project's identity (:mod:`corral.engine.identity`):
        a repository that moved is reattached here, and a copy is refused with
        ``RepositoryCopied`` unless ``copy`` answers the question (``"attach"`` or ``"fresh"``).
        Its placement (:mod:`corral.engine.placement`) is the one the settings choose unless one is
        given, as its store is the one the placement opens unless one is given (tests pass both).
        ``runner`` starts every program but git: tests pass :class:`corral.testing.fake_runner.FakeRunner`
        where no real process is needed.
        """
        given = git
        git = git or Git()
        root = git.main_root(Path(repo) if repo else Path.cwd())
        config = load_config(user_file=user_config_file(), project_file=root / "corral.toml")
        if given is None:  # an injected Git keeps its own limits (tests)
            git.timeout = float(config["git_timeout"])
            git.hook_timeout = float(config["git_hook_timeout"])
        located = locate(git, root, choice=copy)
        if located.moved_from and follow_move(user_config_file(), Path(located.moved_from), root):
            config = load_config(user_file=user_config_file(), project_file=root / "corral.toml")
        return cls(
            paths=located.paths,
            config=config,
            git=git,
            clock=clock,
            identity=located.identity,
            moved_from=located.moved_from,
            _store=store,
            _placement=placement if placement is not None else placement_for(config),
            runner=runner if runner is not None else SubprocessRunner(),
        )

    @classmethod
    def attach(cls, repo: str | Path | None, state: str) -> Project:
        """Attach the checkout containing ``repo`` to the state directory named ``state`` and open it.

        For a repository found again (re-cloned, or its cache lost) whose old state ``doctor``
        lists as gone; refused when the state is another project's or its checkout still holds it.
        """
        from corral.engine.orphan_states import attach_state, find_state  # a rare step: not loaded to open

        git = Git()
        root = git.main_root(Path(repo) if repo else Path.cwd())
        home = corral_home()
        located = attach_state(git, root, find_state(home, state), home)
        project = cls.open(root)
        project.moved_from = located.moved_from
        return project

    @property
    def repo(self) -> Path:
        return self.paths.repo

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = self._open_store()
        return self._store

    @property
    def waits(self) -> HostWaits:
        """This process's own waits (a busy store, a stop), resolved once from the settings."""
        if self._waits is None:
            self._waits = HostWaits.of(self.config)
        return self._waits

    @property
    def placement(self) -> Placement:
        """Where this project's turns run and who answers for them (:mod:`corral.engine.placement`)."""
        if self._placement is None:
            self._placement = placement_for(self.config)
        return self._placement

    @property
    def pg_schema(self) -> str:
        """This project's PostgreSQL schema: named from its identity, so every clone on every host
        (a worker's, a reviewer's laptop) opens the same one (docs/workers.md)."""
        from corral.store.dsn import schema_name

        return schema_name(self.identity.key if self.identity is not None else self.paths.root.name)

    def _open_store(self) -> Store:
        return self.placement.open_store(self)

    def sqlite_tasks(self) -> int | None:
        """How many tasks the SQLite file holds (0: no file), None when it cannot be read."""
        if _no_database(self.paths.db):
            return 0
        try:
            lite = SQLiteStore(
                self.paths.db, clock=self.clock, create=False, busy_timeout=self.waits.store_busy_timeout
            )
        except StoreError:
            return None
        try:
            with lite.read() as tx:
                return len(tx.refs())
        except StoreError:
            return None
        finally:
            lite.close()

    def open_sqlite(self) -> SQLiteStore:
        # Counting what remains only when there is no database: most commands open a full one.
        left = remains(self.paths) if _no_database(self.paths.db) else []
        hint = restore_hint(self.paths)
        try:
            with private_umask():  # the state directory 0700; the database, its -wal and -shm 0600
                if not left:
                    prepare_private_state(self.paths)
                return SQLiteStore(
                    self.paths.db,
                    clock=self.clock,
                    create=not left,
                    busy_timeout=self.waits.store_busy_timeout,
                    restore_hint=hint,
                    recorder=partial(_record_store, self.paths.db),
                )
        except StoreMissing as exc:
            if not left:
                raise
            raise StoreMissing(
                f"{exc.message.rstrip('.')}, but its state directory {self.paths.root} still holds "
                f"{', '.join(left)}. "
                "corral will not start a new, empty database over them (every task would read as gone).",
                hint=f"Nothing was changed or pruned. {hint}.",
            ) from exc

    def backup(self, to: Path | None = None) -> Path:
        """A consistent copy of the database, online, at ``to`` or a timestamped file in ``backups/`` (0600)."""
        store = self.store
        if to is None:
            make_private_dir(backups_dir(self.paths))
            to = backups_dir(self.paths) / f"corral-{stamp(self.clock())}.db"
        else:
            to = to.expanduser().absolute()
        store.backup_to(str(to))
        return to

    def restore(self, source: Path, *, force: bool = False) -> tuple[int, str | None]:
        """Put the database at ``source`` in place of this project's (its schema checked first).

        Refused while a daemon runs or a turn is working (unless ``force``): they hold the file
        open. The current file is kept in ``backups/`` first. Returns the restored schema
        version and where the replaced file was kept (None: there was none).
        """
        self.placement.check_restorable()
        source = source.expanduser().absolute()
        if not source.is_file():
            raise StoreMissing(f"{source} is not a file.", hint="Name a file made by `corral backup`.")
        if source.resolve() == self.paths.db.resolve():
            raise UsageError(f"{source} is the database itself.", hint="Name a backup file.")
        version = SQLiteStore.verify_file(source)
        if not force:
            self._refuse_restore_while_in_use()
        self.close()
        make_private_dir(backups_dir(self.paths))
        aside = backups_dir(self.paths) / f"corral-{stamp(self.clock())}-before-restore.db"
        with private_umask():
            kept = SQLiteStore.restore_file(self.paths.db, source, aside)
        _ = self.store  # opened at once: what corral knows of the database now is this file's
        return version, kept

    def _refuse_restore_while_in_use(self) -> None:
        if is_locked(self.paths.daemon_lock):
            raise DaemonRunning(
                "A corral daemon runs for this repository and holds the database open; nothing was restored.",
                hint="Stop it first (`corral daemon stop`), or pass --force.",
            )
        if not self.paths.db.is_file() or self.paths.db.stat().st_size == 0:
            return  # no database in the way: no turn recorded in it can be working
        try:
            with self.store.read() as tx:
                working = [t.ref for t in tx.tasks([Status.WORKING])]
        except StoreError:
            return  # the file in the way cannot be read: no turn recorded there can be working
        if working:
            raise RefusedError(
                f"A turn is working on {', '.join(working)}; its supervisor writes to the database. "
                "Nothing was restored.",
                code="turn-working",
                hint="Wait for it (`corral wait T`) or stop it (`corral stop T`), or pass --force.",
            )

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
