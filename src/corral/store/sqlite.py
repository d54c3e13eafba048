"""The SQLite implementation of the ``Store`` protocol: one WAL file per repository.

Durability settings: WAL journal, ``synchronous=FULL`` (every commit is fsynced),
``BEGIN IMMEDIATE`` for writes (a writer takes the lock up front, so two writers
never deadlock on an upgrade), and a busy timeout so concurrent CLIs and the
daemon wait for each other instead of failing.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, closing
from pathlib import Path
from typing import NoReturn

import corral.store.sqlite_record as sqlite_record
from corral import crashpoints
from corral.domain.actors import Actor
from corral.domain.clock import Clock, rfc3339, utcnow
from corral.domain.records import Task
from corral.domain.settings import default
from corral.errors import (
    CorralError,
    StoreCorrupt,
    StoreDiskFull,
    StoreError,
    StoreIOError,
    StoreMissing,
    StoreReadOnly,
    StoreReplaced,
    StoreTooNew,
)
from corral.store.contract import NewTask
from corral.store.migrations import LATEST, MIGRATIONS, too_new
from corral.store.sqlite_files import (
    FS_APPEND_FL,
    FS_IMMUTABLE_FL,
    MIN_FREE_BYTES,
    file_size,
    free_bytes,
    holders_of_deleted,
    inode_flags,
    probe,
    read_only_mount,
    sidecars,
)
from corral.store.sqltx import SQLTx, _Decoded

#: How long (seconds) a connection waits for another process's lock before a transaction
#: fails as ``store-busy``: concurrent CLIs and the daemon wait for each other this long. The
#: ``store_busy_timeout`` setting's default; a project passes the person's (``HostWaits``).
BUSY_TIMEOUT = default("store_busy_timeout", float)


class SQLiteTx(SQLTx):
    """One transaction over an open SQLite connection; the SQL is :class:`~corral.store.sqltx.SQLTx`'s.

    Creating a task raises the count of tasks ever created that the database keeps of itself
    (:mod:`corral.store.sqlite_record`), in the same transaction; :attr:`created` is the (store id,
    count) to record once it commits.
    """

    created: tuple[str, int] | None = None

    @staticmethod
    def _ref_taken(exc: Exception) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "tasks.ref" in str(exc)

    def insert_task(self, new: NewTask, actor: Actor, *, task_id: str | None = None) -> Task:
        task = super().insert_task(new, actor, task_id=task_id)
        doc = sqlite_record.read_doc(self._db)
        if doc is not None:  # a database without its doc (a copy being made) counts nothing
            self.created = (doc[0], doc[1] + 1)
            self._db.execute(
                "UPDATE shared_docs SET doc = ?, at = ? WHERE name = ?",
                (_store_doc(*self.created), rfc3339(self.now()), sqlite_record.STORE_DOC),
            )
        return task


def _store_doc(store_id: str, created: int) -> str:
    return json.dumps({"store_id": store_id, "tasks_created": created}, sort_keys=True)


#: Tables a corral database has from its first migration on: a file without them is not one.
_CORRAL_TABLES = frozenset({"tasks", "sessions", "turns", "attempts", "status_changes", "notes", "schema_migrations"})


class SQLiteStore:
    """A ``Store`` over one SQLite file (or ``:memory:`` for tests of the store alone).

    Every SQLite failure leaves as a coded :class:`~corral.errors.StoreError` naming the file and
    the real cause, found in the file system (a read-only mount, an immutable file, a full disk,
    a ``-wal`` deleted under a process that still holds it), never as a masking rollback error.
    ``create=False`` refuses a missing or empty file instead of starting a new database there.

    ``recorder`` keeps what corral last knew of the database outside it (its store id and how many
    tasks were created in it: :mod:`corral.store.sqlite_record`): it is called with both when they
    are first known and after each commit that created a task. With one, a database that is missing
    or empty where tasks were created, another store's, or one holding fewer created tasks than
    recorded is refused; a refused file holding a database is moved to ``refused/`` beside it.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock = utcnow,
        busy_timeout: float = BUSY_TIMEOUT,
        create: bool = True,
        restore_hint: str | None = None,
        recorder: Callable[[str, int], None] | None = None,
    ) -> None:
        """``busy_timeout``: seconds to wait for another process's lock before ``store-busy``.

        ``restore_hint``: how to get the history back (the newest backup and the command), for hints.
        """
        if busy_timeout < 0:
            raise ValueError("busy_timeout is a number of seconds, zero or more")
        self.path = str(path)
        self._clock = clock
        self.busy_timeout = busy_timeout
        self.restore_hint = restore_hint or "`corral restore BACKUP` puts a backup made by `corral backup` back"
        self._identity: tuple[int, int] | None = None
        self._decoded = _Decoded()
        self._recorder = recorder if self.path != ":memory:" else None
        if self._recorder is not None and self.missing():
            last = sqlite_record.known(self.path)
            if last is not None and last[1] > 0:
                raise self._lost(last, str(self.missing()))
        if not create and self.path != ":memory:" and self.missing():
            raise StoreMissing(
                f"The corral database {self.path} is {self.missing()}.",
                hint=f"Nothing was changed. {self.restore_hint}.",
            )
        self._db = self._open()
        if self._recorder is not None:
            self._check_known(self._recorder)

    @property
    def location(self) -> str:
        return self.path

    def missing(self) -> str | None:
        """Why the file holds no database ("missing", "empty (0 bytes)"), or None when it has content."""
        size = file_size(self.path)
        if size is None:
            return "missing" if not os.path.lexists(self.path) else None
        if size == 0 and not file_size(self.path + "-wal"):
            return "empty (0 bytes)"
        return None

    # -- what corral last knew of it --------------------------------------------------------
    def _check_known(self, recorder: Callable[[str, int], None]) -> None:
        """Compare the database with the record kept outside it; refuse one that is not the store known here."""
        try:
            doc = sqlite_record.read_doc(self._db)
        except sqlite3.Error as exc:
            self._db.close()
            raise self._fault(exc) from exc
        last = sqlite_record.known(self.path)
        if doc is None:
            if last is not None and last[1] > 0:
                self._refuse(last, "it has no store id: a new or foreign database")
            try:
                doc = self._own_doc()
            except (StoreReadOnly, StoreDiskFull):
                return  # a database from before the record, that cannot be written now: it still reads
        elif last is not None and last[1] > 0 and doc[0] != last[0]:
            self._refuse(last, f"it is another store's ({doc[0][:12]}, {_tasks(doc[1])} created)")
        elif last is not None and doc[0] == last[0] and doc[1] < last[1]:
            self._refuse(last, f"it holds {_tasks(doc[1])} created, an older copy or rows lost")
        if last != doc:
            try:
                recorder(*doc)
            except OSError:
                # A state directory that refuses the record refuses the database's writes too, and
                # says so when one is tried; a read goes on, and the next open records it.
                pass

    def _own_doc(self) -> tuple[str, int]:
        """The database's own store id and count, made once (a database from before they were kept)."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                doc = sqlite_record.read_doc(db)
                if doc is None:
                    (count,) = db.execute("SELECT COUNT(*) FROM tasks").fetchone()
                    doc = (uuid.uuid4().hex, int(count))
                    db.execute(
                        "INSERT INTO shared_docs (name, doc, at) VALUES (?,?,?)",
                        (sqlite_record.STORE_DOC, _store_doc(*doc), rfc3339(self._clock())),
                    )
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
        except sqlite3.Error as exc:
            raise self._fault(exc) from exc
        return doc

    def _refuse(self, last: tuple[str, int], why: str) -> NoReturn:
        """Move the database aside (never deleted) and refuse it: it is not the store corral knew here."""
        self._db.close()
        try:
            kept = sqlite_record.move_aside(self.path, self._clock())
        except OSError as exc:
            raise StoreReplaced(
                f"The corral database {self.path} is not the store corral last knew here "
                f"({last[0][:12]}, {_tasks(last[1])} created): {why}; and it could not be moved aside "
                f"({exc.strerror}).",
                hint=f"Nothing was changed. Move it aside yourself, then: {self.restore_hint}.",
            ) from exc
        raise StoreReplaced(
            f"The corral database {self.path} is not the store corral last knew here "
            f"({last[0][:12]}, {_tasks(last[1])} created): {why}. It was moved, unchanged, to {kept}.",
            hint=f"If it is the one you mean to use: corral restore '{kept}'. Otherwise {self.restore_hint}.",
        )

    def _lost(self, last: tuple[str, int], missing: str) -> StoreMissing:
        kept = sqlite_record.refused(self.path)
        found = f" The file refused here last is kept at {kept[-1]}." if kept else ""
        return StoreMissing(
            f"The corral database {self.path} is {missing}, where corral last knew "
            f"{_tasks(last[1])} created (store {last[0][:12]}).{found}",
            hint=(
                f"Nothing was changed. {self.restore_hint}. If those tasks are gone for good, "
                f"`rm '{sqlite_record.record_file(self.path)}'` lets corral begin a new, empty database."
            ),
        )

    def _record(self, created: tuple[str, int]) -> None:
        """After a commit that created a task: the record follows, unless the file was replaced meanwhile."""
        if self._recorder is None or self._moved():
            return
        try:
            self._recorder(*created)
        except OSError as exc:
            raise StoreIOError(
                f"The task was saved, but corral could not write {sqlite_record.record_file(self.path)} "
                f"({exc.strerror}).",
                hint="Make the state directory writable; the next task created writes it again.",
            ) from exc

    # -- faults ---------------------------------------------------------------------------
    def _damaged_hint(self) -> str:
        return (
            f"Nothing was changed; keep the file, it holds the history. {self.restore_hint}; or rescue the rows: "
            f"`sqlite3 '{self.path}' .recover | sqlite3 '{self.path}.recovered'` then "
            f"`corral restore '{self.path}.recovered'` (the damaged file is kept as a backup)."
        )

    def _corrupt(self, exc: BaseException) -> StoreCorrupt:
        return StoreCorrupt(f"The corral database {self.path} cannot be read ({exc}).", hint=self._damaged_hint())

    def _not_utf8(self, exc: BaseException) -> StoreCorrupt:
        if isinstance(exc, UnicodeDecodeError):
            where = f"{exc.reason} at byte {exc.start}"
        else:  # sqlite3's "Could not decode to UTF-8 column 'goal' with text '…'": the column, not the text
            column = re.search(r"column '([^']*)'", str(exc))
            where = f"in column {column.group(1)}" if column else "in a column"
        return StoreCorrupt(
            f"The corral database {self.path} has damaged bytes: a text value is not UTF-8 "
            f"({where}); its pages are intact, a value in them is not.",
            hint=self._damaged_hint(),
        )

    def _read_only_cause(self) -> tuple[str, str]:
        """Why writes are refused, and how to allow them again (nothing is lost either way)."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if self._identity is not None and self._moved():
            return (
                "the file was deleted or replaced while corral had it open",
                f"put the file back at {self.path}, or {self.restore_hint}",
            )
        if read_only_mount(directory):
            return "its file system is mounted read-only", f"remount {directory} read-write"
        for name in (self.path, *sidecars(self.path)):
            flags = inode_flags(name)
            if flags & FS_IMMUTABLE_FL:
                return f"{name} is immutable (chattr +i)", f"chattr -i '{name}'"
            if flags & FS_APPEND_FL:
                return f"{name} is append-only (chattr +a)", f"chattr -a '{name}'"
        if not os.access(directory, os.W_OK):
            return f"its directory {directory} is not writable by this user", f"chmod u+w '{directory}'"
        for name in (self.path, *sidecars(self.path)):
            if os.path.exists(name) and not os.access(name, os.W_OK):
                return f"{name} is not writable by this user", f"chmod u+w '{name}'"
        db = getattr(self, "_db", None)
        if db is not None:
            try:
                if db.execute("PRAGMA query_only").fetchone()[0]:
                    return "the connection is query-only (PRAGMA query_only)", "open it without query_only"
            except sqlite3.Error:
                pass
        return "the file system refused the write", "make the file and its directory writable"

    def _moved(self) -> bool:
        try:
            info = os.stat(self.path)
        except OSError:
            return True
        return (info.st_dev, info.st_ino) != self._identity

    def _full(self, exc: BaseException | None = None) -> StoreDiskFull:
        directory = os.path.dirname(os.path.abspath(self.path))
        free = free_bytes(directory)
        told = f" ({exc})" if exc else ""
        return StoreDiskFull(
            f"The disk holding the corral database {self.path} is full{told}: "
            f"{'unknown' if free is None else f'{free:,} bytes'} free.",
            hint=(
                f"Nothing was written (the transaction rolled back). Free space on that disk (`df -h '{directory}'`), "
                "then run the command again; do not delete corral.db-wal or corral.db-shm, they hold recent changes."
            ),
        )

    def _io(self, exc: BaseException) -> StoreError:
        """A ``disk I/O error``, named by what the file system shows: a deleted -wal, a full or read-only disk."""
        wal, _shm = sidecars(self.path)
        holders = holders_of_deleted(wal)
        if holders or (self._identity is not None and not os.path.exists(wal) and self._wal_mode()):
            return self._deleted_wal(holders, exc)
        directory = os.path.dirname(os.path.abspath(self.path))
        free = free_bytes(directory)
        if free is not None and free < MIN_FREE_BYTES:
            return self._full(exc)
        if read_only_mount(directory):
            cause, fix = self._read_only_cause()
            return self._read_only(exc, cause, fix)
        return StoreIOError(
            f"Reading or writing the corral database {self.path} failed ({exc}).",
            hint=f"Nothing was changed on purpose. Check the disk (`dmesg`, `df -h '{directory}'`); "
            f"`corral doctor` checks the file; {self.restore_hint}.",
        )

    def _deleted_wal(self, holders: list[int], exc: BaseException | None = None) -> StoreIOError:
        wal = self.path + "-wal"
        who = f"process {', '.join(map(str, holders))} still holds" if holders else "this process holds"
        told = f" ({exc})" if exc else ""
        return StoreIOError(
            f"The corral database's write-ahead log {wal} was deleted while open{told}: "
            f"{who} the deleted log, with the newest changes.",
            hint=(
                "Do not delete corral.db-wal or corral.db-shm. Stop that process cleanly (`corral daemon stop` "
                "for the daemon): as the last connection closes, SQLite writes its log back into "
                f"{self.path}. Then run the command again."
            ),
        )

    def _wal_mode(self) -> bool:
        db = getattr(self, "_db", None)
        try:
            return db is not None and str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
        except sqlite3.Error:
            return False

    def _read_only(self, exc: BaseException | None, cause: str, fix: str) -> StoreReadOnly:
        told = f" ({exc})" if exc else ""
        return StoreReadOnly(
            f"The corral database {self.path} cannot be written{told}: {cause}.",
            hint=f"Nothing was written. To let corral write again: {fix}; then run the command again.",
        )

    def _fault(self, exc: BaseException) -> CorralError:
        """The coded error for a failure of SQLite (or of decoding what it returned)."""
        if isinstance(exc, CorralError):
            return exc
        if isinstance(exc, UnicodeDecodeError) or str(exc).startswith("Could not decode to UTF-8"):
            return self._not_utf8(exc)
        name = str(getattr(exc, "sqlite_errorname", "") or "")
        if name in ("SQLITE_BUSY", "SQLITE_LOCKED") or name.startswith(("SQLITE_BUSY_", "SQLITE_LOCKED_")):
            return StoreError(
                f"The corral database {self.path} is busy ({exc}).",
                code="store-busy",
                hint="Another corral process holds it; try again in a moment.",
            )
        if name.startswith("SQLITE_FULL"):
            return self._full(exc)
        if name.startswith("SQLITE_READONLY"):
            cause, fix = self._read_only_cause()
            return self._read_only(exc, cause, fix)
        if name.startswith("SQLITE_IOERR"):
            return self._io(exc)
        if name.startswith("SQLITE_CANTOPEN"):
            directory = os.path.dirname(os.path.abspath(self.path))
            if read_only_mount(directory) or not os.access(directory, os.W_OK):
                cause, fix = self._read_only_cause()
                return self._read_only(exc, cause, fix)
            return StoreIOError(
                f"The corral database {self.path} cannot be opened ({exc}).",
                hint=f"Nothing was changed. Check that {directory} exists and is yours; {self.restore_hint}.",
            )
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or not name:
            return self._corrupt(exc)
        return StoreError(f"The corral database {self.path} failed: {exc} ({name}).", hint=self._damaged_hint())

    # -- opening ------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = Path(self.path).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"corral cannot create its state directory {parent}: {exc.strerror}.",
                    code="state-dir-unusable",
                    hint="Point CORRAL_HOME at a writable local directory.",
                ) from exc
            wal, shm = sidecars(self.path)
            # A -shm without its -wal: the log was deleted. If a process still holds it, opening
            # would let SQLite rebuild the index without it — a stale view, then two histories.
            if os.path.exists(shm) and not os.path.exists(wal):
                holders = holders_of_deleted(wal)
                if holders:
                    raise self._deleted_wal(holders)
        try:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._fault(exc) from exc
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout = {round(self.busy_timeout * 1000)}")
            # Refuse a newer schema before anything (even the journal mode) touches the file.
            version = self._version(db)
            if version > LATEST:
                raise self._too_new(version)
            if self.path != ":memory:":
                mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(
                        f"The corral database {self.path} could not switch to WAL mode (got {mode}).",
                        hint="Put CORRAL_HOME on a local disk that supports shared memory files.",
                    )
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            self._migrate(db)
            if self.path != ":memory:":
                info = os.stat(self.path)
                self._identity = (info.st_dev, info.st_ino)
        except CorralError:
            db.close()
            raise
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            db.close()
            raise self._fault(exc) from exc
        except OSError as exc:
            db.close()
            raise StoreIOError(f"The corral database {self.path} vanished as it was opened: {exc.strerror}.") from exc
        return db

    @staticmethod
    def _version(db: sqlite3.Connection) -> int:
        exists = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if not exists:
            return 0
        (version,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(version)

    def _too_new(self, version: int) -> StoreTooNew:
        return too_new(self.path, version)

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = self._version(db)
        if version > LATEST:
            raise self._too_new(version)
        if version == LATEST:
            return
        # A migration may make a table again (SQLite cannot change its constraints in place): with the foreign
        # keys enforced, dropping a table that rows refer to would check every such row (and delete nothing).
        # They are checked over the whole file before the migration commits, which must leave no reference broken
        # that was not broken before (SQLite's own procedure for changing a table's schema); the pragma takes
        # effect only outside a transaction.
        db.execute("PRAGMA foreign_keys = OFF")
        try:
            self._migrate_unchecked(db)
        finally:
            db.execute("PRAGMA foreign_keys = ON")

    def _migrate_unchecked(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT"
            )
            version = self._version(db)  # another process may have migrated meanwhile
            if version > LATEST:
                raise self._too_new(version)
            if version == LATEST:
                db.execute("COMMIT")
                return
            before = len(db.execute("PRAGMA foreign_key_check").fetchall()) if version else 0
            for number, name, migration in MIGRATIONS:
                if number <= version:
                    continue
                migration(db)
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?,?,?)",
                    (number, name, rfc3339(self._clock())),
                )
            broken = db.execute("PRAGMA foreign_key_check").fetchall()
            if len(broken) > before:
                raise StoreCorrupt(
                    f"Migrating the corral database {self.path} to schema {LATEST} would leave rows referring to "
                    f"rows it lacks ({', '.join(f'{r[0]} row {r[1]} -> {r[2]}' for r in broken[:3])}); "
                    "nothing was changed.",
                    hint=self._damaged_hint(),
                )
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def schema_version(self) -> int:
        try:
            return self._version(self._db)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise self._fault(exc) from exc

    def read(self) -> AbstractContextManager[SQLiteTx]:
        return _Scope(self, "BEGIN DEFERRED", False)

    def write(self) -> AbstractContextManager[SQLiteTx]:
        return _Scope(self, "BEGIN IMMEDIATE", True)

    # -- health ---------------------------------------------------------------------------
    def check(self) -> list[str]:
        try:
            problems = [r[0] for r in self._db.execute("PRAGMA quick_check") if r[0] != "ok"]
            problems += [
                f"foreign key: {r[0]} row {r[1]} -> {r[2]}" for r in self._db.execute("PRAGMA foreign_key_check")
            ]
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            problems = [str(self._fault(exc).message)]
        return problems

    def _undecodable(self) -> list[str]:
        """Where a text value is not UTF-8 (``quick_check`` does not look inside values)."""
        found: list[str] = []
        wal, shm = sidecars(self.path)
        if not os.path.exists(self.path) or (os.path.exists(shm) and not os.path.exists(wal)):
            return found  # a second connection on a deleted -wal would rebuild the index without it
        # A connection of its own: the shared one may be reading in another thread meanwhile.
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.busy_timeout)
        db.text_factory = bytes
        try:
            tables = [tuple(r) for r in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")]
            for table, sql in tables:
                name = table.decode("utf-8", "replace") if isinstance(table, bytes) else str(table)
                # A row is named by its rowid, or by its key in a table without one (status_changes: task, number).
                label = "rowid"
                if sql and b"WITHOUT ROWID" in bytes(sql).upper():
                    keys = sorted((r[5], r[1]) for r in db.execute(f'PRAGMA table_info("{name}")') if r[5])
                    label = " || '/' || ".join(f'"{k.decode() if isinstance(k, bytes) else k}"' for _, k in keys)
                for row in db.execute(f'SELECT {label}, * FROM "{name}"'):
                    for value in row[1:]:
                        if isinstance(value, bytes):
                            try:
                                value.decode("utf-8")
                            except UnicodeDecodeError as exc:
                                where = row[0].decode("utf-8", "replace") if isinstance(row[0], bytes) else row[0]
                                found.append(f"table {name} row {where}: text that is not UTF-8 ({exc.reason})")
                                break
                    if len(found) >= 10:
                        return found
        finally:
            db.close()
        return found

    def health(self) -> list[StoreError]:
        """Every fault of the database found now, each a coded error with its hint; empty when healthy.

        Beyond :meth:`check`: damaged text values, the file replaced or deleted since it was
        opened, a deleted ``-wal``, a file or mount that refuses writes, a full disk.
        """
        if self.path == ":memory:":
            return [StoreCorrupt(p, hint=self._damaged_hint()) for p in self.check()]
        faults: list[StoreError] = []
        if self._moved():
            faults.append(
                StoreMissing(
                    f"The corral database {self.path} was deleted or replaced after corral opened it.",
                    hint=f"Nothing was changed. Put the file back, or {self.restore_hint}; then restart this process.",
                )
            )
        try:
            problems = self.check()
            problems += self._undecodable()
        except sqlite3.Error as exc:
            found = self._fault(exc)
            faults.append(found if isinstance(found, StoreError) else self._corrupt(exc))
            problems = []
        if problems:
            faults.append(
                StoreCorrupt(
                    f"The corral database {self.path} is damaged: {'; '.join(problems[:3])}.", hint=self._damaged_hint()
                )
            )
        wal, _shm = sidecars(self.path)
        holders = holders_of_deleted(wal)
        if holders or (not os.path.exists(wal) and self._wal_mode()):
            faults.append(self._deleted_wal(holders))
        refused = self._write_refused()
        if refused:
            faults.append(self._read_only(None, *refused))
        free = free_bytes(os.path.dirname(os.path.abspath(self.path)))
        if free is not None and free < MIN_FREE_BYTES:
            faults.append(self._full())
        return faults

    def _write_refused(self) -> tuple[str, str] | None:
        """Why a write would be refused now (cause, fix), found without writing; None when it would not."""
        directory = os.path.dirname(os.path.abspath(self.path))
        if read_only_mount(directory):
            return self._read_only_cause()
        for name in (self.path, *sidecars(self.path)):
            flags, writable = probe(name)
            if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) or writable is False:
                return self._read_only_cause()
        try:
            if self._db.execute("PRAGMA query_only").fetchone()[0]:
                return self._read_only_cause()
        except sqlite3.Error:
            pass
        if not os.access(directory, os.W_OK):
            return self._read_only_cause()
        return None

    # -- backup and restore -----------------------------------------------------------------
    def backup_to(self, dest: str | Path) -> None:
        """A consistent copy of the whole database at ``dest`` (0600, one self-contained file).

        Through SQLite's online backup API: other processes may read and write meanwhile.
        ``dest`` must not exist; a temp file beside it is renamed into place when complete.
        """
        target = Path(dest)
        if target.exists():
            raise StoreError(f"{target} already exists; corral never overwrites a backup.", code="backup-exists")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            copy = sqlite3.connect(tmp, isolation_level=None)
            try:
                self._db.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
            finally:
                copy.close()
            _fsync(tmp)
            os.replace(tmp, target)
            _fsync(str(target.parent))
        except sqlite3.Error as exc:
            _unlink(tmp)
            raise self._fault(exc) from exc
        except OSError as exc:
            _unlink(tmp)
            if exc.errno == errno.ENOSPC:
                raise self._full(exc) from exc
            raise StoreIOError(f"The backup {target} could not be written: {exc.strerror}.") from exc

    @staticmethod
    def verify_file(path: str | Path) -> int:
        """The schema version of a corral database at ``path``, read-only; refused when it is not one."""
        where = str(path)
        hint = "Nothing was changed. Name a file made by `corral backup` (they are in the state directory's backups/)."
        if not os.path.isfile(where) or file_size(where) == 0:
            raise StoreMissing(f"{where} is not a file with a database in it.", hint=hint)
        try:
            with closing(sqlite3.connect(f"file:{where}?mode=ro", uri=True, isolation_level=None)) as db:
                problems = [r[0] for r in db.execute("PRAGMA quick_check") if r[0] != "ok"]
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                version = SQLiteStore._version(db) if "schema_migrations" in tables else 0
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise StoreCorrupt(f"{where} is not a usable corral database ({exc}).", hint=hint) from exc
        if problems:
            raise StoreCorrupt(f"{where} is damaged: {'; '.join(problems[:3])}.", hint=hint)
        lacking = sorted(_CORRAL_TABLES - tables)
        if lacking:
            raise StoreCorrupt(
                f"{where} is an SQLite file but not a corral database (no {', '.join(lacking)}).", hint=hint
            )
        if version > LATEST:
            raise StoreTooNew(
                f"{where} has schema version {version}, newer than this corral understands (up to {LATEST}).",
                hint="Nothing was changed. Upgrade corral to the version that wrote it, then restore it.",
            )
        return version

    @staticmethod
    def restore_file(db_path: str | Path, source: str | Path, aside: str | Path) -> str | None:
        """Put the database at ``source`` (verified) in place of ``db_path``; the current one kept at ``aside``.

        No connection may be open on ``db_path`` (the caller makes sure). The current file is
        copied to ``aside`` first — through the backup API when it opens, else byte for byte
        with its ``-wal`` — so nothing is lost; returns where it was kept (None: there was none).
        """
        target, src, keep = str(db_path), str(source), Path(aside)
        SQLiteStore.verify_file(src)
        tmp = f"{target}.restoring.{os.getpid()}"
        _unlink(tmp)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        try:
            with (
                closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as origin,
                closing(sqlite3.connect(tmp)) as new,
            ):
                origin.backup(new)
                new.execute("PRAGMA journal_mode = DELETE")
            _fsync(tmp)
            kept = _keep_aside(target, keep)
            for sidecar in sidecars(target):
                _unlink(sidecar)  # a log of the old file must never be replayed into the new one
            sqlite_record.forget(target)  # put there on purpose: the next open records this file
            os.replace(tmp, target)
            _fsync(os.path.dirname(os.path.abspath(target)))
        except BaseException:
            _unlink(tmp)
            raise
        return kept

    def change_mark(self) -> object:
        # Another connection's commit moves data_version; this one's, the rows it changed. Exact,
        # unlike a file's times (a coarse clock can give two commits one mtime), and no I/O.
        try:
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error as exc:
            raise self._fault(exc) from exc
        return (version, self._db.total_changes)

    def close(self) -> None:
        self._db.close()


class _Scope:
    """One transaction of a :class:`SQLiteStore`, begun on entry, committed on a clean exit, else rolled back.

    A class rather than a generator: it wraps every status change, whose cost the disk's sync bounds
    (bench/bench_transitions.py), and a generator's context manager costs a few microseconds more.
    """

    __slots__ = ("_begin", "_store", "_tx", "_writable")

    def __init__(self, store: SQLiteStore, begin: str, writable: bool) -> None:
        self._store = store
        self._begin = begin
        self._writable = writable
        self._tx: SQLiteTx | None = None

    def __enter__(self) -> SQLiteTx:
        store = self._store
        try:
            store._db.execute(self._begin)
        except sqlite3.Error as exc:
            raise store._fault(exc) from exc
        self._tx = tx = SQLiteTx(store._db, store._clock, writable=self._writable, decoded=store._decoded)
        return tx

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        store, db = self._store, self._store._db
        if kind is not None:
            _rollback(db)
            if issubclass(kind, sqlite3.IntegrityError):
                return  # a constraint a caller broke: a bug to see as it is, not a fault of the disk
            if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):
                # SQLite may have rolled back already (an I/O error does): _rollback asks first, since a
                # second ROLLBACK would replace the real cause with "cannot rollback - no transaction is active".
                raise store._fault(exc) from exc
            return
        writable = self._writable
        if writable:
            crashpoints.hit("store.before-commit")
        try:
            db.execute("COMMIT")
        except sqlite3.Error as err:
            _rollback(db)
            raise store._fault(err) from err
        if writable:
            crashpoints.hit("store.after-commit")
            tx = self._tx
            if tx is not None and tx.created is not None:
                store._record(tx.created)


def _tasks(n: int) -> str:
    return f"{n} task{'' if n == 1 else 's'}"


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open; SQLite ends some itself (an I/O error, a full disk)."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the error being raised says what went wrong; this one would hide it


def _fsync(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _keep_aside(target: str, aside: Path) -> str | None:
    """Copy the database at ``target`` to ``aside`` (0600) before it is replaced; where it went, or None."""
    if not os.path.lexists(target) or (file_size(target) == 0 and not file_size(target + "-wal")):
        return None  # nothing there to keep: an empty file holds no history
    aside.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as old:
            old.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            os.close(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            with closing(sqlite3.connect(aside)) as copy:
                old.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")
    except sqlite3.Error:
        # It does not open as a database: keep its bytes, and its -wal beside them.
        import shutil  # only here: keeping a broken database's bytes

        _unlink(aside)
        for suffix in ("", "-wal"):
            if os.path.exists(target + suffix):
                fd = os.open(str(aside) + suffix, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(target + suffix, "rb") as src, os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                    dst.flush()
                    os.fsync(dst.fileno())
    _fsync(str(aside))
    return str(aside)
