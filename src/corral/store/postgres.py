"""The PostgreSQL implementation of the ``Store`` protocol: one schema per project, psycopg 3 with a pool.

Opt-in per user (``database_url`` from the user's settings or ``CORRAL_DATABASE_URL``); psycopg
is imported only when such a store is opened. What a transaction reads and writes is the shared
SQL of :class:`~corral.store.sqltx.SQLTx`; this module opens, begins, commits and diagnoses.

- Scoping: every project's rows live in its own schema (``corral_<state directory name>``), set
  as the connection's ``search_path``, so the shared SQL names bare tables and one database serves
  many projects, each with its own ``schema_migrations``.
- Writes are serialized per project by a transaction-scoped advisory lock taken at ``BEGIN`` (as
  SQLite's ``BEGIN IMMEDIATE`` serializes writers): a compare-and-set read then write is never
  raced. A writer waits ``busy_timeout`` seconds for it (``lock_timeout``), then ``store-busy``.
- Reads run in ``REPEATABLE READ READ ONLY`` transactions: one snapshot per transaction.
- Durability is the server's: a commit returns once PostgreSQL has made it durable (the default
  ``synchronous_commit = on``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from corral import crashpoints
from corral.domain.clock import Clock, rfc3339, utcnow
from corral.domain.sanitize import without_nul
from corral.domain.settings import default
from corral.errors import CorralError, StoreDiskFull, StoreError, StoreMissing, StoreReadOnly, StoreTooNew
from corral.store.dsn import redact
from corral.store.migrations import LATEST, too_new
from corral.store.pg_migrations import PG_MIGRATIONS
from corral.store.sqltx import SQLTx, _Decoded
from corral.store.team_extra import team_module

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

#: Seconds a writer waits for another's lock before ``store-busy`` (as SQLite's busy timeout): the
#: ``store_busy_timeout`` setting's default; a project passes the person's (``HostWaits``).
BUSY_TIMEOUT = default("store_busy_timeout", float)
#: Seconds to wait for the server when connecting, before ``store-unreachable``.
CONNECT_TIMEOUT = 5.0
#: Connections a process keeps at most (the daemon's threads share them).
POOL_SIZE = 4

#: Seconds a change mark is answered from the last query: every open live view asks several times a second.
MARK_SECONDS = 0.5

#: What changes with every commit a board shows: the newest note by its identity, and for the small
#: tables each row version's transaction id (``xmin`` is new in a row's every update) with the row
#: count (a delete). A status change is recorded in the same transaction as its task's row changes
#: (numbered within its task since schema 8, so it has no table-wide newest). One statement, so one snapshot.
_MARK = """
    SELECT (SELECT max(rowid) FROM notes),
           (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM tasks),
           (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM leases),
           (SELECT count(*) || ':' || coalesce(max(xmin::text::bigint), 0) FROM live_turns)
"""

#: Tables a corral schema has from its first migration on.
CORRAL_TABLES = ("tasks", "sessions", "turns", "attempts", "status_changes", "violations", "notes", "processes")


def _driver() -> Any:
    # The pool reports a dropped connection it replaces as a warning; corral replaces it itself
    # and reports what matters as coded errors, so nothing of the driver's reaches a terminal.
    for name in ("psycopg", "psycopg.pool"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
    # The driver and its pool come with the corral[team] extra: without it, the line that adds it.
    team_module("psycopg_pool", wanted_by="A PostgreSQL store (database_url)")
    return team_module("psycopg", wanted_by="A PostgreSQL store (database_url)")


@lru_cache(maxsize=1)
def _connection_class() -> Any:
    """psycopg's connection, which hands the pool a connection already opened, once.

    A store opens its first connection itself, to say plainly why a server cannot be used and
    to migrate; the pool then takes that connection instead of opening a second one.
    """
    psycopg = _driver()

    class Connection(psycopg.Connection):  # type: ignore[misc,name-defined]
        @classmethod
        def connect(cls, conninfo: str = "", *, handover: list[Any] | None = None, **kwargs: Any) -> Any:
            if handover:
                return handover.pop()
            return super().connect(conninfo, **kwargs)

    return Connection


@lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> type[tuple[Any, ...]]:
    """A tuple that also indexes by column name, as ``sqlite3.Row`` does."""
    index = {name: i for i, name in enumerate(names)}
    get = tuple.__getitem__

    class PgRow(tuple[Any, ...]):
        __slots__ = ()

        def __getitem__(self, key: Any) -> Any:
            if isinstance(key, str):
                return get(self, index[key])
            return get(self, key)

        def keys(self) -> list[str]:
            return list(names)

    return PgRow


def _rows(cursor: Any) -> Callable[[Sequence[Any]], Any]:
    """psycopg's row factory: rows that index by position and by name."""
    description = cursor.description
    if description is None:
        return tuple
    cls = _row_class(tuple(column.name for column in description))
    return cls


@lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    """The shared SQL's ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Db:
    """A psycopg connection with the ``execute(sql, args)`` the shared SQL uses (``?`` parameters)."""

    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if args:
            # PostgreSQL's text cannot hold a NUL: an agent's words that carried one keep it as its
            # printable escape (the intake's rule, domain/sanitize), never a refused write.
            safe = tuple(without_nul(a) if type(a) is str else a for a in args)
            return self.conn.execute(_pg_sql(sql), safe)
        return self.conn.execute(sql)  # without parameters psycopg takes the text as it is


class PostgresTx(SQLTx):
    """One transaction on a pooled PostgreSQL connection; the SQL is :class:`SQLTx`'s."""

    @staticmethod
    def _ref_taken(exc: Exception) -> bool:
        diag = getattr(exc, "diag", None)
        return getattr(exc, "sqlstate", None) == "23505" and getattr(diag, "constraint_name", None) == "tasks_ref_key"

    @contextmanager
    def _may_fail(self) -> Iterator[None]:
        # PostgreSQL aborts the whole transaction on an error: a savepoint keeps it usable.
        self._db.execute("SAVEPOINT may_fail")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK TO SAVEPOINT may_fail")
            raise
        self._db.execute("RELEASE SAVEPOINT may_fail")

    def follow_identities(self) -> None:
        """After rows were copied in with their ids: new ids continue after the largest."""
        for table, column in (("sessions", "rowid"), ("notes", "rowid")):
            self._db.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
            )


def lock_key(schema: str) -> int:
    """The advisory lock that serializes one project's writers: a signed 64-bit digest of its schema."""
    return int.from_bytes(hashlib.sha256(f"corral:{schema}".encode()).digest()[:8], "big", signed=True)


class PostgresStore:
    """A ``Store`` on a PostgreSQL database, in the schema ``schema`` (created and migrated on open).

    Every failure leaves as a coded :class:`~corral.errors.StoreError` naming the server (without
    its password) and the real cause: an unreachable server, refused credentials, a read-only
    server, a full disk, a lock held too long, a newer schema.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        clock: Clock = utcnow,
        busy_timeout: float = BUSY_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        pool_size: int = POOL_SIZE,
        create: bool = True,
        mark_seconds: float = MARK_SECONDS,
    ) -> None:
        if busy_timeout < 0:
            raise ValueError("busy_timeout is a number of seconds, zero or more")
        self.url = url
        self.schema = schema
        self._clock = clock
        self.busy_timeout = busy_timeout
        self.connect_timeout = connect_timeout
        self._lock = lock_key(schema)
        self._decoded = _Decoded()
        self._pool: ConnectionPool[Any] | None = None
        self.mark_seconds = mark_seconds
        self._mark: tuple[float, object] | None = None  # (when, what) of the last change mark asked
        psycopg = _driver()
        self._errors = psycopg.errors
        self._psycopg = psycopg
        # The first connection says plainly why a server cannot be used; then the pool takes it over.
        first = self._connect()
        try:
            self._migrate(_Db(first), create=create)
        except BaseException:
            first.close()
            raise
        from psycopg_pool import ConnectionPool

        handover = [first]
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            connection_class=_connection_class(),
            configure=self._configure,
            kwargs={**self._kwargs(), "handover": handover},  # the pool copies it: the same list
            timeout=max(connect_timeout, busy_timeout),
            name=f"corral-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=max(1.0, connect_timeout))
        except Exception as exc:
            first.close()
            self._pool.close()
            self._pool = None
            raise self._fault(exc) from exc

    @property
    def location(self) -> str:
        return f"{redact(self.url)} (schema {self.schema})"

    # -- connections ----------------------------------------------------------------------
    def _kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,  # BEGIN and COMMIT are this module's, as in SQLiteStore
            "row_factory": _rows,
            "connect_timeout": max(1, round(self.connect_timeout)),
            "application_name": "corral",
        }

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        from psycopg import sql

        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{round(self.busy_timeout * 1000)}ms")))

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn: psycopg.Connection[Any] = _connection_class().connect(self.url, **self._kwargs())
        except self._psycopg.Error as exc:
            raise self._unreachable(exc) from exc
        try:
            self._configure(conn)
        except self._psycopg.Error as exc:
            conn.close()
            raise self._fault(exc) from exc
        return conn

    def _unreachable(self, exc: BaseException) -> StoreError:
        told = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "password authentication failed" in str(exc) or "no password supplied" in str(exc):
            hint = (
                "Nothing was changed. Check the user and password in database_url (`corral config show` "
                "shows it masked), or the server's pg_hba.conf."
            )
        else:
            hint = (
                "Nothing was changed. Start the server or check database_url's host and port "
                "(`corral config show`); unset database_url to use this project's SQLite database."
            )
        return StoreError(
            f"The corral database {self.location} cannot be reached: {told}.", code="store-unreachable", hint=hint
        )

    def _fault(self, exc: BaseException) -> CorralError:
        """The coded error for a failure of PostgreSQL or of the connection to it."""
        if isinstance(exc, CorralError):
            return exc
        errors = self._errors
        pool_timeout: type[BaseException] | None
        try:
            from psycopg_pool import PoolTimeout

            pool_timeout = PoolTimeout
        except ImportError:  # pragma: no cover
            pool_timeout = None
        told = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, errors.LockNotAvailable):
            return StoreError(
                f"The corral database {self.location} is busy ({told}).",
                code="store-busy",
                hint="Another corral process holds it; try again in a moment.",
            )
        if isinstance(exc, errors.DiskFull):
            return StoreDiskFull(
                f"The disk of the PostgreSQL server holding {self.location} is full ({told}).",
                hint="Nothing was written (the transaction rolled back). Free space on the server, then run it again.",
            )
        if isinstance(exc, (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege)):
            return StoreReadOnly(
                f"The corral database {self.location} cannot be written ({told}).",
                hint="Nothing was written. Use a primary server and a role that may create and write the "
                f"schema {self.schema} (GRANT CREATE ON DATABASE to that role); then run the command again.",
            )
        if (pool_timeout is not None and isinstance(exc, pool_timeout)) or isinstance(
            exc, (self._psycopg.OperationalError, self._psycopg.InterfaceError)
        ):
            return self._unreachable(exc)
        return StoreError(
            f"The corral database {self.location} failed: {told}.",
            hint="Nothing was changed on purpose. `corral doctor` checks the connection and the schema.",
        )

    # -- schema ----------------------------------------------------------------------------
    @staticmethod
    def _version_of(db: _Db, schema: str) -> int | None:
        """The schema's version: None when the schema does not exist, 0 when it has no migrations yet."""
        if db.execute("SELECT 1 FROM pg_namespace WHERE nspname = ?", (schema,)).fetchone() is None:
            return None
        exists = db.execute(
            "SELECT 1 FROM pg_tables WHERE schemaname = ? AND tablename = 'schema_migrations'", (schema,)
        ).fetchone()
        if exists is None:
            return 0
        (version,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(version)

    def _too_new(self, version: int) -> StoreTooNew:
        return too_new(self.location, version)

    def _migrate(self, db: _Db, *, create: bool) -> None:
        from psycopg import sql

        try:
            version = self._version_of(db, self.schema)
            if version is not None and version > LATEST:
                raise self._too_new(version)
            if version == LATEST:
                return
            if version is None and not create:
                raise StoreMissing(
                    f"The corral database {self.location} has no schema {self.schema}.",
                    hint="Nothing was changed. `corral store migrate --to postgres` copies this project's history "
                    "there.",
                )
            db.execute(f"BEGIN; SELECT pg_advisory_xact_lock({self._lock})")
            try:
                db.conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                db.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
                )
                version = self._version_of(db, self.schema) or 0  # another process may have migrated meanwhile
                if version > LATEST:
                    raise self._too_new(version)
                for number, name, script in PG_MIGRATIONS:
                    if number <= version:
                        continue
                    db.execute(script)
                    db.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?,?,?)",
                        (number, name, rfc3339(self._clock())),
                    )
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
        except self._psycopg.Error as exc:
            raise self._fault(exc) from exc

    def schema_version(self) -> int:
        with self._connection() as db:
            try:
                return self._version_of(db, self.schema) or 0
            except self._psycopg.Error as exc:
                raise self._fault(exc) from exc

    # -- transactions ----------------------------------------------------------------------
    def _open_pool(self) -> ConnectionPool[Any]:
        if self._pool is None:
            raise StoreError(f"internal: the store {self.location} is closed", code="internal-error")
        return self._pool

    def _getconn(self) -> psycopg.Connection[Any]:
        try:
            conn: psycopg.Connection[Any] = self._open_pool().getconn()
        except Exception as exc:
            raise self._fault(exc) from exc
        return conn

    @contextmanager
    def _connection(self) -> Iterator[_Db]:
        conn = self._getconn()
        try:
            yield _Db(conn)
        finally:
            self._open_pool().putconn(conn)

    @contextmanager
    def _tx(self, begin: str, writable: bool) -> Iterator[PostgresTx]:
        driver = self._psycopg
        pool = self._open_pool()
        conn: psycopg.Connection[Any] | None = self._getconn()
        try:
            assert conn is not None
            db = _Db(conn)
            try:
                db.execute(begin)
            except driver.Error as exc:
                _rollback(db)
                if not conn.closed:
                    raise self._fault(exc) from exc
                # The server dropped this idle connection (a restart, an idle timeout) and nothing
                # ran on it yet: once more, on a live one (the pool discards the dead ones).
                pool.putconn(conn)
                conn = None
                pool.check()
                conn = self._getconn()
                db = _Db(conn)
                try:
                    db.execute(begin)
                except driver.Error as again:
                    _rollback(db)
                    raise self._fault(again) from again
            tx = PostgresTx(db, self._clock, writable=writable, decoded=self._decoded)
            try:
                yield tx
            except driver.IntegrityError:
                _rollback(db)
                raise  # a constraint a caller broke: a bug to see as it is, not a fault of the server
            except driver.Error as exc:
                _rollback(db)
                raise self._fault(exc) from exc
            except BaseException:
                _rollback(db)
                raise
            else:
                if writable:
                    crashpoints.hit("store.before-commit")
                try:
                    db.execute("COMMIT")
                except driver.Error as exc:
                    _rollback(db)
                    raise self._fault(exc) from exc
                if writable:
                    crashpoints.hit("store.after-commit")
        finally:
            if conn is not None:
                pool.putconn(conn)

    def read(self) -> AbstractContextManager[PostgresTx]:
        return self._tx("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", writable=False)

    def write(self) -> AbstractContextManager[PostgresTx]:
        # The advisory lock in the same round trip as BEGIN: writers queue up front, as in SQLite.
        return self._tx(f"BEGIN; SELECT pg_advisory_xact_lock({self._lock})", writable=True)

    # -- health ----------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Integrity problems of the schema (missing tables, foreign keys PostgreSQL enforces itself)."""
        try:
            with self._connection() as db:
                found = {
                    r[0] for r in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = ?", (self.schema,))
                }
        except CorralError as exc:
            return [exc.message]
        except self._psycopg.Error as exc:
            return [self._fault(exc).message]
        lacking = [t for t in (*CORRAL_TABLES, "schema_migrations") if t not in found]
        return [f"schema {self.schema} lacks the table {t}" for t in lacking]

    def health(self) -> list[StoreError]:
        """Every fault found now: the server unreachable, the schema newer or incomplete, writes refused."""
        faults: list[StoreError] = []
        try:
            with self._connection() as db:
                version = self._version_of(db, self.schema)
                (read_only,) = db.execute("SHOW transaction_read_only").fetchone()
                (recovery,) = db.execute("SELECT pg_is_in_recovery()").fetchone()
                (may_create,) = db.execute(
                    "SELECT has_schema_privilege(current_user, ?, 'CREATE')", (self.schema,)
                ).fetchone()
        except CorralError as exc:
            return [exc if isinstance(exc, StoreError) else StoreError(exc.message, hint=exc.hint)]
        except self._psycopg.Error as exc:
            found = self._fault(exc)
            return [found if isinstance(found, StoreError) else StoreError(found.message, hint=found.hint)]
        if version is not None and version > LATEST:
            faults.append(self._too_new(version))
        problems = self.check()
        if problems:
            faults.append(
                StoreError(
                    f"The corral database {self.location} is incomplete: {'; '.join(problems[:3])}.",
                    code="store-corrupt",
                    hint="Nothing was changed. `corral store migrate --to postgres --replace` copies the SQLite "
                    "history there again.",
                )
            )
        if str(read_only).lower() == "on" or recovery or not may_create:
            cause = "the server is a read-only standby" if recovery or str(read_only) == "on" else "no CREATE right"
            faults.append(
                StoreReadOnly(
                    f"The corral database {self.location} cannot be written: {cause}.",
                    hint="Use the primary server, and a role that owns the schema or may create in it.",
                )
            )
        return faults

    # -- backup ----------------------------------------------------------------------------
    def backup_to(self, dest: str) -> None:
        """A consistent copy of every record at ``dest``, as an SQLite file (``corral restore`` reads it)."""
        from corral.store.copy import backup_as_sqlite

        backup_as_sqlite(self, dest)

    def change_mark(self) -> object:
        now = time.monotonic()
        if self._mark is not None and now - self._mark[0] < self.mark_seconds:
            return self._mark[1]
        try:
            with self._connection() as db:
                mark = tuple(db.execute(_MARK).fetchone())
        except self._psycopg.Error as exc:
            raise self._fault(exc) from exc
        self._mark = (now, mark)
        return mark

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _rollback(db: _Db) -> None:
    """Roll back whatever is open; a connection that is gone has nothing to roll back."""
    try:
        db.conn.execute("ROLLBACK")
    except Exception:
        pass  # the error being raised says what went wrong; this one would hide it
