"""What a reviewer on another host reads of a turn, carried through the shared store (docs/workers.md#shipped).

The worker that runs a turn (and a host that runs a turn of its own on the shared store, from its
reconcile passes: ``shared_store.own_turns``) ships its task's files — every turn's output and stderr logs and
their index, the command, receipt and provenance, each session's failure journal, the task's
diagnostics — in chunks as they grow (:func:`ship`), and the turn's live facts
(:func:`ship_live`). A host that did not run the turn fills its own copy of those files from the
store before it reads them (:func:`materialize`), so ``show``, ``logs``, ``failures`` and the
dashboard read the same files, through the same safe translator, on every host. Nothing is read
through a symlink or from anything but a regular file; a file past :data:`FILE_CAP` is shipped
up to it. A file that shrank was rewritten, and is shipped again from its start.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from corral.domain.records import Task
from corral.domain.substate import Live
from corral.engine.paths import TASKS_DIR
from corral.engine.placement import host_id
from corral.engine.private_state import make_private_dir
from corral.engine.project import Project
from corral.engine.runtime.journal_scan import CURSOR
from corral.engine.runtime.liveness import live_facts, live_to_json

if TYPE_CHECKING:
    from corral.store.contract import Tx

#: Bytes per stored chunk: one row, one round trip.
CHUNK = 256 * 1024
#: Bytes of files shipped in one write transaction (a file larger goes alone, in its own).
TX_BYTES = 4 * CHUNK
#: Bytes of one file a reviewer elsewhere can read: past it, the worker's own copy is the whole.
FILE_CAP = 64 * 1024 * 1024
#: A reader's own state, rebuilt from the files it reads: never shipped.
_NOT_SHIPPED = frozenset({CURSOR})


def _roots(project: Project, task_id: str) -> list[Path]:
    task_dir = project.paths.task_dir(task_id)
    return [task_dir / "turns", task_dir / "sessions", project.paths.diagnostics_dir(task_id)]


def _files(project: Project, task_id: str) -> Iterator[tuple[str, Path, int]]:
    """Each regular file to ship: its path relative to the project's state, the path, its size."""
    root = project.paths.root
    for top in _roots(project, task_id):
        if not top.is_dir() or top.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(top):  # os.walk never follows a symlinked directory
            dirnames.sort()
            for name in sorted(filenames):
                if name in _NOT_SHIPPED or name.endswith(".tmp"):
                    continue
                path = Path(dirpath) / name
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    yield str(path.relative_to(root)), path, info.st_size


def _read(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        offset = start
        while offset < end:
            data = os.pread(fd, min(CHUNK, end - offset), offset)
            if not data:
                return
            yield offset, data
            offset += len(data)
    finally:
        os.close(fd)


def ship(project: Project, task_id: str, epoch: int, live: tuple[str, Live | None] | None = None) -> int:
    """Ship what the store lacks of the task's files, each write only while ``epoch`` holds the task's lease
    (checked in the same transaction: a worker fenced off ships nothing more); the bytes shipped.

    The files go in as few write transactions as :data:`TX_BYTES` allows, each checking the fence once: a
    turn's dozen small files are one transaction on the store's write lock, not a dozen. ``live`` (the turn's
    command id and its live facts, as :func:`put_live` takes them) goes in the last of them: a worker's round
    of shipping is one write transaction, not two."""
    with project.store.read() as tx:
        held = tx.shipped_sizes(task_id)
    sent = 0
    batch: list[tuple[str, list[tuple[int, bytes]]]] = []
    size_of_batch = 0
    for rel, path, size in _files(project, task_id):
        have = held.get(rel, 0)
        start = 0 if size < have else have
        end = min(size, FILE_CAP)
        if start >= end:
            continue
        try:
            chunks = list(_read(path, start, end))
        except OSError:
            continue  # gone or replaced meanwhile: the next pass ships what is there then
        if batch and size_of_batch + end - start > TX_BYTES:
            sent += _write(project, task_id, epoch, batch)
            batch, size_of_batch = [], 0
        batch.append((rel, chunks))
        size_of_batch += end - start
    if batch or live is not None:
        sent += _write(project, task_id, epoch, batch, live)
    return sent


def _write(
    project: Project,
    task_id: str,
    epoch: int,
    files: list[tuple[str, list[tuple[int, bytes]]]],
    live: tuple[str, Live | None] | None = None,
) -> int:
    """One write transaction: the fence checked, then each file's chunks stored (and the live facts, given);
    the bytes written."""
    with project.store.write() as tx:
        tx.check_fence(task_id, epoch)
        tx.ship_files(task_id, [(rel, offset, data) for rel, chunks in files for offset, data in chunks])
        if live is not None:
            _set_live(project, tx, task_id, *live)
    return sum(len(d) for _rel, chunks in files for _o, d in chunks)


def ship_live(project: Project, task: Task, command_id: str, epoch: int) -> None:
    """The running turn's live facts as this host judges them (phase, retry, usage-limit wait, the agent's
    waits and progress line), for ``list``, ``show``, ``watch`` and the dashboard elsewhere; written only
    while ``epoch`` holds the task's lease, checked in the same transaction."""
    put_live(project, task.id, command_id, epoch, live_facts(project, task))


def put_live(project: Project, task_id: str, command_id: str, epoch: int, live: Live | None) -> None:
    """:func:`ship_live` of facts already judged (``live``; None once the turn ended), with the agent's
    wait intervals; fenced by ``epoch`` as every shipped write."""
    with project.store.write() as tx:
        tx.check_fence(task_id, epoch)
        _set_live(project, tx, task_id, command_id, live)


def _set_live(project: Project, tx: Tx, task_id: str, command_id: str, live: Live | None) -> None:
    """The live facts and wait intervals written in ``tx`` (the intervals a worker shipped earlier, where no
    local line has them, read in it too)."""
    from corral.engine.runtime.wait_intervals import intervals  # the waits' file: read where it is shipped

    doc: dict[str, object] = {"live": live_to_json(live)} if live is not None else {}
    doc["intervals"] = [i.to_json() for i in intervals(project, task_id, tx)]
    tx.set_live(task_id, command_id, doc)


def bring(project: Project, task_id: str) -> int:
    """:func:`materialize` when the task's turns run (or ran) on another host (its worker, or that host's
    own local turn); 0 otherwise."""
    with project.store.read() as tx:
        lease = tx.lease(task_id)
    if lease is None or lease.worker_id is None or lease.worker_id == host_id(project):
        return 0
    return materialize(project, task_id)


def materialize(project: Project, task_id: str) -> int:
    """Fill this host's copy of the task's files from the store (what it lacks of each); the bytes written.

    Only under the task's own directories of this project's state: a stored path that would lead
    anywhere else is ignored. One read transaction for the task: its files' sizes, then what this copy
    lacks of them, several files' chunks a statement (up to :data:`TX_BYTES` of them; a larger file alone),
    written as they are read: a host brings every task another host ran on each pass.
    """
    with project.store.read() as tx:
        return materialize_in(project, tx, task_id)


def materialize_in(project: Project, tx: Tx, task_id: str) -> int:
    """:func:`materialize` inside the read transaction ``tx`` (a pass bringing many tasks reads them all in one)."""
    root = project.paths.root
    allowed = [r.resolve() for r in _roots(project, task_id)]
    tops = (TASKS_DIR + "/", "diagnostics/")
    written = 0
    held = tx.shipped_sizes(task_id)
    lacking: dict[str, tuple[Path, int, int]] = {}  # path -> (where, what this copy has, the size to reach)
    # Each directory resolved once (a turn's files share a few): a file's own name is never followed (a link
    # there is not a regular file, and is left alone), and a name that would climb (``..``) is no file's.
    resolved: dict[str, Path] = {}
    for rel, held_size in held.items():
        size = min(held_size, FILE_CAP)  # the bound a shipper keeps: a row past it is no shipper's
        head, _, name = rel.rpartition("/")
        if not rel.startswith(tops) or name in ("", ".", ".."):
            continue
        parent = resolved.get(head)
        if parent is None:
            parent = resolved[head] = (root / head).resolve()
        dest = parent / name
        if not any(dest.is_relative_to(a) for a in allowed):
            continue
        try:
            info = os.lstat(dest)
            have = info.st_size if stat.S_ISREG(info.st_mode) else None
        except FileNotFoundError:
            have = 0
        if have is None or have >= size:
            continue
        lacking[rel] = (dest, have, size)
    batch: dict[str, int] = {}
    size_of_batch = 0
    for rel, (_dest, have, size) in lacking.items():
        if batch and size_of_batch + size - have > TX_BYTES:
            written += _fill(tx.shipped_past(task_id, batch), lacking)
            batch, size_of_batch = {}, 0
        batch[rel] = have
        size_of_batch += size - have
    if batch:
        written += _fill(tx.shipped_past(task_id, batch), lacking)
    return written


def _fill(found: dict[str, list[tuple[int, bytes]]], lacking: dict[str, tuple[Path, int, int]]) -> int:
    """Write each file's chunks read from the store into this host's copy, from what it has up to its size."""
    written = 0
    made: set[Path] = set()
    for rel, chunks in found.items():
        dest, have, size = lacking[rel]
        if dest.parent not in made:
            make_private_dir(dest.parent)
            made.add(dest.parent)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            for offset, data in chunks:
                skip = max(0, have - offset)
                piece = data[skip : max(skip, size - offset)]
                if piece:
                    os.pwrite(fd, piece, offset + skip)
                    written += len(piece)
        finally:
            os.close(fd)
    return written
