"""Faults of the disk and the file, produced for real, read as what they are.

Each test makes the fault happen — a tmpfs of 1 MiB filled to the last byte, a tmpfs remounted
read-only, ``chattr +i`` on the database, a ``-wal`` deleted under another process that still
writes, a byte of a stored text flipped — and asserts the coded error names the file and the
real cause, with a hint that loses nothing, and that ``health()`` (what ``doctor`` shows) reports it.

These tests mount tmpfs file systems and set inode flags, so they need root (or CAP_SYS_ADMIN
and CAP_LINUX_IMMUTABLE): ``chmod`` alone does not stop root from writing, so a read-only file
is made the way a person meets one — a read-only mount, an immutable file, a query-only connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.errors import StoreCorrupt, StoreDiskFull, StoreIOError, StoreMissing, StoreReadOnly
from corral.store import NewTask, SQLiteStore
from corral.store.sqlite_files import MIN_FREE_BYTES


def _make_task(store: SQLiteStore, ref: str, goal: str = "g") -> str:
    with store.write() as tx:
        return tx.insert_task(NewTask(ref=ref, goal=goal), Actor.HUMAN).id


def _refs(path: Path) -> list[str]:
    store = SQLiteStore(path)
    try:
        with store.read() as tx:
            return [t.ref for t in tx.tasks()]
    finally:
        store.close()


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` at ``where`` (root only), unmounted at the end."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True, text=True
    )
    assert done.returncode == 0, f"these tests mount a tmpfs (root needed): {done.stderr.strip()}"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _remount(where: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True)


def _fill(directory: Path) -> Path:
    """Write a filler file until the file system refuses with ENOSPC; the filler, to free the space."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * 4096
    try:
        while True:
            os.write(fd, chunk)
    except OSError as exc:
        assert exc.errno == 28, exc  # ENOSPC: the disk is full for real
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_is_store_disk_full_naming_the_file_and_the_free_space(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "4M") as disk:
        db = disk / "corral.db"
        store = SQLiteStore(db)
        _make_task(store, "before")
        filler = _fill(disk)
        with pytest.raises(StoreDiskFull) as info:
            _make_task(store, "after", goal="x" * 200_000)
        err = info.value
        assert err.code == "store-disk-full" and str(db) in err.message and "full" in err.message
        assert "cannot rollback" not in err.message
        assert err.hint and "Nothing was written" in err.hint and "do not delete corral.db-wal" in err.hint
        assert "aside" not in err.hint and "new one" not in err.hint
        assert any(isinstance(f, StoreDiskFull) for f in store.health())  # doctor sees it too
        filler.unlink()
        assert store.health() == [] and MIN_FREE_BYTES > 0
        _make_task(store, "after-space")  # the same connection works again once there is room
        store.close()
        assert _refs(db) == ["before", "after-space"]


def test_a_read_only_mount_is_store_read_only_naming_the_mount(tmp_path: Path) -> None:
    """The disk went read-only between two commands (Linux refuses to remount a file system read-only
    while a process has a file open for writing on it, so the writer is closed first)."""
    with tmpfs(tmp_path / "ro", "4M") as disk:
        db = disk / "corral.db"
        writer = SQLiteStore(db)
        _make_task(writer, "kept")
        writer.close()
        _remount(disk, "ro")
        try:
            with pytest.raises(StoreReadOnly) as info:
                SQLiteStore(db)
            err = info.value
            assert err.code == "store-read-only" and str(db) in err.message and "mounted read-only" in err.message
            assert err.hint and f"remount {disk} read-write" in err.hint and "Nothing was written" in err.hint
            assert "aside" not in err.hint
        finally:
            _remount(disk, "rw")
        assert _refs(db) == ["kept"]


def test_an_immutable_database_is_store_read_only_and_health_says_so(tmp_path: Path) -> None:
    db = tmp_path / "state" / "corral.db"
    running = SQLiteStore(db)  # a process that had it open before the flag was set
    _make_task(running, "kept")
    assert running.health() == []
    subprocess.run(["chattr", "+i", str(db)], check=True)
    try:
        (fault,) = running.health()  # doctor no longer says ok
        assert isinstance(fault, StoreReadOnly) and "immutable (chattr +i)" in fault.message
        store = SQLiteStore(db)  # the next command opens it, reads it...
        with store.read() as tx:
            assert [t.ref for t in tx.tasks()] == ["kept"]
        with pytest.raises(StoreReadOnly) as info:  # ...and cannot write it
            _make_task(store, "refused")
        err = info.value
        assert err.code == "store-read-only" and str(db) in err.message and "immutable (chattr +i)" in err.message
        assert "attempt to write a readonly database" in err.message  # SQLite's words, with the cause after
        assert err.hint and f"chattr -i '{db}'" in err.hint and "Nothing was written" in err.hint
        store.close()
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    _make_task(running, "after")
    running.close()
    assert _refs(db) == ["kept", "after"]


def test_a_query_only_connection_names_itself_as_the_cause(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "corral.db")
    store._db.execute("PRAGMA query_only = ON")
    with pytest.raises(StoreReadOnly) as info:
        _make_task(store, "refused")
    assert "query-only" in info.value.message
    assert any("query-only" in f.message for f in store.health())
    store.close()


_HOLDER = textwrap.dedent(
    """
    import sys
    from corral.domain.actors import Actor
    from corral.store import NewTask, SQLiteStore
    store = SQLiteStore(sys.argv[1])
    with store.write() as tx:
        tx.insert_task(NewTask(ref="first", goal="g"), Actor.HUMAN)
    print("ready", flush=True)
    sys.stdin.readline()  # the test deleted the -wal meanwhile: keep writing into the one we hold
    with store.write() as tx:
        tx.insert_task(NewTask(ref="second", goal="g"), Actor.HUMAN)
    faults = store.health()
    print("faults", [f.code for f in faults], flush=True)
    sys.stdin.readline()
    store.close()  # the last connection: SQLite writes the log it holds back into the file
    """
)


def test_a_wal_deleted_under_a_running_writer_is_an_io_error_naming_that_process(tmp_path: Path) -> None:
    db = tmp_path / "state" / "corral.db"
    SQLiteStore(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin and holder.stdout
    try:
        assert holder.stdout.readline().strip() == "ready"
        wal = Path(f"{db}-wal")
        wal.unlink()  # what a person's cleanup script did
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "faults ['store-io-error']"  # the holder's own health sees it
        with pytest.raises(StoreIOError) as info:  # another corral process, meanwhile
            _refs(db)
        err = info.value
        assert err.code == "store-io-error" and str(wal) in err.message
        assert f"process {holder.pid} still holds the deleted log" in err.message
        assert "cannot rollback" not in err.message
        assert err.hint and "Do not delete corral.db-wal" in err.hint and "corral daemon stop" in err.hint
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    assert _refs(db) == ["first", "second"]  # the hint lost nothing: the holder's log came back


def test_flipped_bytes_in_a_text_are_store_corrupt_on_read_and_in_health(tmp_path: Path) -> None:
    db = tmp_path / "corral.db"
    store = SQLiteStore(db)
    _make_task(store, "damaged", goal="A goal worth keeping")
    store.close()
    raw = db.read_bytes()
    assert raw.count(b"A goal worth keeping") == 1
    flipped = raw.replace(b"A goal worth keeping", b"A goal \xff\xferth keeping")  # same length
    db.write_bytes(flipped)
    store = SQLiteStore(db)  # the pages are intact: it opens
    with pytest.raises(StoreCorrupt) as info, store.read() as tx:
        tx.tasks()
    err = info.value
    assert str(db) in err.message and "not UTF-8" in err.message
    assert err.hint and "Nothing was changed" in err.hint and "corral restore" in err.hint and ".recover" in err.hint
    assert "new one" not in err.hint and "mv " not in err.hint
    (fault,) = store.health()
    assert isinstance(fault, StoreCorrupt) and "table tasks row 1: text that is not UTF-8" in fault.message
    store.close()
    assert db.read_bytes() == flipped  # left as it was


def test_a_missing_or_empty_file_is_refused_when_creating_is_not_allowed(tmp_path: Path) -> None:
    db = tmp_path / "corral.db"
    with pytest.raises(StoreMissing) as info:
        SQLiteStore(db, create=False, restore_hint="corral restore X")
    assert "missing" in info.value.message and not db.exists()
    db.write_bytes(b"")
    with pytest.raises(StoreMissing) as info:
        SQLiteStore(db, create=False, restore_hint="corral restore X")
    assert "empty (0 bytes)" in info.value.message and info.value.hint and "corral restore X" in info.value.hint
    assert db.read_bytes() == b""


def test_a_database_deleted_under_an_open_store_is_reported_by_health(tmp_path: Path) -> None:
    db = tmp_path / "corral.db"
    store = SQLiteStore(db)
    _make_task(store, "kept")
    store.backup_to(tmp_path / "copy.db")
    for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        name.unlink(missing_ok=True)
    faults = store.health()
    assert any(
        isinstance(f, StoreMissing) and "deleted or replaced after corral opened it" in f.message for f in faults
    )
    store.close()
    assert _refs(tmp_path / "copy.db") == ["kept"]


def test_backup_is_a_consistent_private_single_file_and_restore_keeps_the_replaced_one(tmp_path: Path) -> None:
    db = tmp_path / "state" / "corral.db"
    store = SQLiteStore(db)
    _make_task(store, "one")
    backup = tmp_path / "b" / "one.db"
    backup.parent.mkdir()
    store.backup_to(backup)
    assert backup.stat().st_mode & 0o777 == 0o600
    assert not Path(f"{backup}-wal").exists()
    with pytest.raises(Exception, match="never overwrites"):
        store.backup_to(backup)
    _make_task(store, "two")
    store.close()
    assert SQLiteStore.verify_file(backup) >= 1
    kept = SQLiteStore.restore_file(db, backup, tmp_path / "b" / "before.db")
    assert kept == str(tmp_path / "b" / "before.db")
    assert _refs(db) == ["one"] and _refs(Path(kept)) == ["one", "two"]
    not_corral = tmp_path / "other.db"
    import sqlite3

    with sqlite3.connect(not_corral) as raw:
        raw.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreCorrupt, match="not a corral database"):
        SQLiteStore.restore_file(db, not_corral, tmp_path / "b" / "never.db")
    assert not (tmp_path / "b" / "never.db").exists() and _refs(db) == ["one"]


def test_a_health_check_leaves_the_connection_its_locks_so_no_other_process_deletes_the_wal(tmp_path: Path) -> None:
    # The daemon runs health() and stays connected. Looking at the database's files must not
    # release this process's POSIX locks on them (closing any descriptor of a file does), or
    # the next process to close the database takes itself for the last one and deletes the
    # -wal under the daemon, whose later commits then go to a log no one else reads.
    path = tmp_path / "corral.db"
    store = SQLiteStore(path)
    try:
        with store.write() as tx:
            tx.insert_task(NewTask(ref="before", goal="Written before the check"), Actor.HUMAN)
        assert store.health() == []
        other = textwrap.dedent(
            f"""
            from corral.store import SQLiteStore
            s = SQLiteStore({str(path)!r})
            with s.read() as tx:
                tx.tasks()
            s.close()
            """
        )
        subprocess.run([sys.executable, "-c", other], check=True, timeout=60)
        assert os.path.exists(f"{path}-wal"), "another process deleted the -wal under a live connection"
        with store.write() as tx:
            tx.insert_task(NewTask(ref="after", goal="Written after the other process left"), Actor.HUMAN)
        seen = textwrap.dedent(
            f"""
            from corral.store import SQLiteStore
            s = SQLiteStore({str(path)!r})
            with s.read() as tx:
                print(sorted(t.ref for t in tx.tasks()))
            s.close()
            """
        )
        out = subprocess.run([sys.executable, "-c", seen], check=True, timeout=60, capture_output=True, text=True)
        assert out.stdout.strip() == "['after', 'before']"  # this process's commit is everyone's
    finally:
        store.close()
