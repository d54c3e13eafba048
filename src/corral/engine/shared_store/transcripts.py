"""A harness session carried between worker hosts through the store (docs/harnesses.md#sessions-across-hosts).

A harness keeps a session's transcript on the host that ran it (``~/.claude``, ``$CODEX_HOME``,
Pi's session files). The worker that runs a turn ships the transcript of the turn's session into
the store as the turn runs and once more before it lets the turn's lease go (:class:`Carrier`,
:func:`ship`): chunked as a turn's files are (``runtime/shipping``: the same rows,
under ``transcripts/<harness session id>/``), with a manifest of what a whole copy holds written
in the same transaction as the chunks, and only until another worker claims the task
(:func:`_holds`). A worker that takes the session over on another host puts that copy where its
harness's resume looks (:func:`takeover`, :func:`carry`): only a copy that is whole and within
:data:`CAP`, each file one the harness names as the session's own, rewritten as the harness needs
it here, written under the harness's own session directory and nowhere else
(``adapters/harness/sessions``). Otherwise it says why, and the turn starts a fresh session told
what happened. The rows go with the task (``corral delete``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.adapters.harness import make_harness
from corral.adapters.harness.sessions import install
from corral.domain.actors import Role
from corral.domain.team import HARNESS_CARRY, HARNESS_HOST, Lease, LeaseState, SessionCarry
from corral.engine.paths import OUTPUT_LOG
from corral.engine.runtime import protocol as proto
from corral.engine.shared_store.shipping import CHUNK, FILE_CAP
from corral.errors import LeaseLost

if TYPE_CHECKING:
    from corral.adapters.harness.base import Harness
    from corral.domain.records import Session, Task
    from corral.engine.project import Project
    from corral.store.contract import Tx

#: Where a task's shipped files keep its harness sessions' transcripts (never a path ``materialize`` fills).
PREFIX = "transcripts/"
#: Bytes of one session's files together that travel: past it, the session stays on its host.
CAP = FILE_CAP
#: Files of one session that travel (a Claude Code session keeps each long tool output in a file).
MAX_FILES = 1000
#: Bytes of a turn's output read for the harness's announcement of a new session's id.
ANNOUNCE_BYTES = 1024 * 1024


def _manifest_path(session_id: str) -> str:
    return f"{PREFIX}{session_id}/manifest.json"


def _file_path(session_id: str, name: str) -> str:
    return f"{PREFIX}{session_id}/files/{name}"


def _manifest(tx: Tx, task_id: str, session_id: str) -> dict[str, Any] | None:
    data = b"".join(d for _o, d in tx.shipped(task_id, _manifest_path(session_id)))
    try:
        doc = json.loads(data) if data else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _put(tx: Tx, task_id: str, path: str, data: bytes) -> None:
    """A whole small file, replacing what the store held of it."""
    for offset in range(0, max(len(data), 1), CHUNK):
        tx.ship(task_id, path, offset, data[offset : offset + CHUNK])


def _read(path: Path, start: int, end: int) -> list[tuple[int, bytes]]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        chunks, offset = [], start
        while offset < end:
            data = os.pread(fd, min(CHUNK, end - offset), offset)
            if not data:
                break
            chunks.append((offset, data))
            offset += len(data)
        return chunks
    finally:
        os.close(fd)


def ship(
    project: Project,
    task_id: str,
    epoch: int,
    harness: Harness,
    session_id: str,
    worktree: Path,
    host: str,
    env: Mapping[str, str] | None = None,
) -> int:
    """Ship what the store lacks of session ``session_id``'s transcript on this host; the bytes shipped.

    A copy the store holds from another host is replaced whole (this host's may differ from its first
    byte: Pi's names this worktree). Only while the worker under ``epoch`` holds the session (:func:`_holds`);
    ``LeaseLost`` otherwise, with nothing written. Files of the task's other sessions leave the store.
    """
    files = harness.session_files(os.environ if env is None else env, worktree, session_id)
    if files is None:
        return 0
    sizes: dict[str, int] = {}
    for name in files.names:
        try:
            info = os.lstat(files.place / name)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            sizes[name] = info.st_size
    if not sizes:
        return 0  # nothing of it here (yet, or any more): what the store holds stays
    with project.store.read() as tx:
        held = {p: s for p, s in tx.shipped_sizes(task_id).items() if p.startswith(PREFIX)}
        before = _manifest(tx, task_id, session_id)
    ours = before is not None and before.get("host") == host  # else the store's copy is another host's
    doc: dict[str, Any] = {"harness": harness.name, "session": session_id, "host": host}
    chunks: list[tuple[str, int, bytes]] = []
    total = sum(sizes.values())
    if total > CAP or len(sizes) > MAX_FILES:
        doc["over"] = {"bytes": total, "files": len(sizes)}  # nothing of it travels: too large to carry
    else:
        listed: dict[str, int] = {}
        for name, size in sizes.items():
            path = _file_path(session_id, name)
            have = held.get(path, 0) if ours else 0
            start = 0 if size < have else have  # a file that shrank was rewritten: again from its start
            try:
                got = _read(files.place / name, start, size) if start < size else []
            except OSError:
                return 0  # gone or replaced meanwhile: the next round ships what is there then
            chunks += [(path, offset, data) for offset, data in got]
            listed[name] = (got[-1][0] + len(got[-1][1])) if got else min(size, start)
        doc["files"] = listed
    keep = {_manifest_path(session_id), *(_file_path(session_id, n) for n in doc.get("files", {}))}
    stale = [
        p for p in held if p not in keep or (not ours and p != _manifest_path(session_id) and not _starts(chunks, p))
    ]
    if not chunks and not stale and before == doc:
        return 0
    with project.store.write() as tx:
        lease = tx.lease(task_id)
        if not _holds(lease, epoch):
            raise LeaseLost(
                f"The transcript of {task_id}'s session was not shipped: this worker holds epoch {epoch}, "
                f"the task {'no lease' if lease is None else f'epoch {lease.epoch}'}.",
                hint=f"Nothing was written; another worker runs the task now (corral show {task_id}).",
            )
        for path in stale:
            tx.unship(task_id, path)
        for path, offset, data in chunks:
            tx.ship(task_id, path, offset, data)
        _put(tx, task_id, _manifest_path(session_id), json.dumps(doc, sort_keys=True).encode())
    return sum(len(d) for _p, _o, d in chunks)


def _holds(lease: Lease | None, epoch: int) -> bool:
    """Whether the worker under ``epoch`` may still write the session's transcript: its epoch is the task's
    last, or the next turn is only queued (its own turn's last round may come just after a quick
    ``unblock``); once another worker claims the task, or the lease is fenced off, never again."""
    if lease is None:
        return False
    return lease.epoch == epoch or (lease.state is LeaseState.QUEUED and lease.epoch == epoch + 1)


def _starts(chunks: list[tuple[str, int, bytes]], path: str) -> bool:
    """Whether this round writes ``path`` from its first byte (which replaces the store's copy)."""
    return any(p == path and offset == 0 for p, offset, _d in chunks)


def takeover(
    project: Project, task: Task, session: Session, host: str, env: Mapping[str, str] | None = None
) -> SessionCarry | None:
    """What becomes of the task's harness session in a turn on ``host`` (``session`` as it is here):
    None when there is none or this host made it (resumed as it is); else its transcript carried
    here from the store (resumed), or why it could not be (the turn starts a fresh session)."""
    if session.harness_session_id is None or session.worktree is None:
        return None
    made = task.metadata.get(HARNESS_HOST)
    made_on = made.get(session.id) if isinstance(made, dict) else None
    if made_on == host:
        return None
    from corral.engine.config import harness_settings

    harness = make_harness(task.harness or project.config["harness"], harness_settings(project.config))
    where = made_on if isinstance(made_on, str) else None
    return carry(project, task.id, harness, session.harness_session_id, Path(session.worktree), where, host, env)


def noted(metadata: Mapping[str, Any], carry: SessionCarry | None) -> dict[str, Any]:
    """A task's metadata with the note of its latest turn's takeover (none: the note goes)."""
    out = {k: v for k, v in metadata.items() if k != HARNESS_CARRY}
    if carry is not None:
        out[HARNESS_CARRY] = carry.to_json()
    return out


def carry(
    project: Project,
    task_id: str,
    harness: Harness,
    session_id: str,
    worktree: Path,
    made_on: str | None,
    host: str,
    env: Mapping[str, str] | None = None,
) -> SessionCarry:
    """Put the store's copy of session ``session_id`` where this host's harness resumes it; what became of it."""

    def fresh(why: str) -> SessionCarry:
        return SessionCarry(made_on, host, False, why)

    if made_on is None:
        return fresh("the host that made it is not recorded")
    files = harness.session_files(os.environ if env is None else env, worktree, session_id)
    if files is None:
        return fresh(f"the {harness.name} harness keeps no session corral can carry")
    with project.store.read() as tx:
        doc = _manifest(tx, task_id, session_id)
        held = tx.shipped_sizes(task_id)
        if doc is None:
            return fresh("no copy of it reached the store")
        if doc.get("harness") != harness.name or doc.get("session") != session_id:
            return fresh("the copy in the store is of another harness session")
        over = doc.get("over")
        if isinstance(over, dict):
            return fresh(
                f"it is over the bound of what travels ({_size(over.get('bytes'))}, {over.get('files')} files)"
            )
        listed = doc.get("files")
        if not isinstance(listed, dict) or not listed:
            return fresh("the copy in the store lists no file")
        if not all(isinstance(n, str) and isinstance(s, int) and s >= 0 for n, s in listed.items()):
            return fresh("the copy in the store is not in the shape corral writes")
        if len(listed) > MAX_FILES or sum(listed.values()) > CAP:
            return fresh(f"it is over the bound of what travels ({_size(sum(listed.values()))})")
        if any(held.get(_file_path(session_id, n), 0) != s for n, s in listed.items()):
            return fresh("the copy in the store is incomplete")
        stored = {n: _assemble(tx.shipped(task_id, _file_path(session_id, n)), s) for n, s in listed.items()}
    carried: dict[str, bytes] = {}
    for name, data in stored.items():
        if data is None:
            return fresh("the copy in the store is incomplete")
        made = harness.carried(name, data, worktree, session_id)
        if made is None:
            return fresh(f"the store names {name[:200]!r}, which is not one of the session's files")
        carried[name] = made
    try:
        install(files, carried)
    except (OSError, ValueError) as exc:
        return fresh(f"it could not be written here: {exc}")
    return SessionCarry(made_on, host, True)


def _assemble(chunks: list[tuple[int, bytes]], size: int) -> bytes | None:
    """The file's bytes from its chunks, None when they leave a gap before ``size``."""
    out = bytearray()
    for offset, data in chunks:
        if offset > len(out):
            return None
        out[offset : offset + len(data)] = data
    return bytes(out[:size]) if len(out) >= size else None


def _size(n: object) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if isinstance(n, int) else "?"


def announced(harness: Harness, log: Path) -> str | None:
    """The session id the harness announced at the start of a turn's output (a new session's), or None."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, ANNOUNCE_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    for line in data.splitlines():
        for event in harness.parse(line):
            if event.kind == "session" and event.session_id:
                return event.session_id
    return None


class Carrier:
    """The transcript of one claimed turn's session, shipped by the worker that follows the turn
    (``shared_store.claimed.Follow``) with the turn's own files: every round while the turn runs, and once
    more before its lease is let go, so the next host never meets a copy older than the turn it takes
    over. The session is the one the turn resumes, else the one its harness announces; once the turn
    ended, the one its receipt (or its recorded session) names."""

    def __init__(self, project: Project, task_id: str, session_id: str, command: proto.Command, host: str) -> None:
        self.project, self.task_id, self.session_id, self.command, self.host = (
            project,
            task_id,
            session_id,
            command,
            host,
        )
        self.harness = make_harness(command.harness, command.harness_settings.as_mapping())
        self.worktree, self.log = Path(command.worktree), Path(command.log_dir) / OUTPUT_LOG
        self.harness_session = command.resume_id

    def ship(self, epoch: int) -> int:
        """What the store lacks of the session's transcript; ``LeaseLost`` (nothing written) once another
        worker holds the task. The bytes shipped."""
        receipt_path = self.project.paths.protocol_dir(self.task_id) / proto.RESPONSE
        receipt = proto.read_record(receipt_path, proto.Receipt) if os.path.lexists(receipt_path) else None
        if receipt is not None and receipt.command_id == self.command.command_id and receipt.harness_session_id:
            self.harness_session = receipt.harness_session_id
        else:
            with self.project.store.read() as tx:
                recorded = tx.turn_by_command(self.command.command_id, Role.AGENT) is not None
                session = tx.get_session(self.session_id) if recorded else None
            if session is not None and session.harness_session_id:
                self.harness_session = session.harness_session_id
        self.harness_session = self.harness_session or announced(self.harness, self.log)
        if self.harness_session is None:
            return 0  # no session to carry yet: its harness has not announced one
        return ship(self.project, self.task_id, epoch, self.harness, self.harness_session, self.worktree, self.host)
