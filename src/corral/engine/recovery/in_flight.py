"""An accept's in-flight record: what it is about to do, written before it does it.

``accept_in_flight_from`` (:data:`MARKER`, recorded when an accept starts) names the status
to restore when the accept aborts or dies. An accept that brings a checked-out target along
also records, before it acts, what it is about to do (:data:`JOURNAL`: the target, its old
tip, the new commit, the destination worktree and the message of the stash it may make), so
that after a kill recovery can finish or undo the destination's update (``recovery/destination``).

Locks, the checkout and its stash are the accepting host's own. On the shared store an accept
in flight is therefore recorded as a process (:data:`ACCEPT`) named by that host's identity, written
with its marker (:func:`mark_in_flight`): another host never takes it for stranded (its locks there
are free, its target there is not the one that moved), and only the host it runs on recovers it
(docs/workers.md#turns-run-on-your-own-host).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from msgspec import Struct

from corral.domain.status import Status
from corral.engine.project import Project
from corral.store import Tx

MARKER = "accept_in_flight_from"
#: The in-flight record of an accept that brings a checked-out target along (see the module doc).
JOURNAL = "accept_in_flight"


class InFlight(Struct, frozen=True):
    """What an accept is about to do to its target and the target's checkout."""

    target: str
    old: str
    new: str
    destination: str | None = None
    stash_message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as the task's metadata keeps it: its fields, each by name (None included)."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc

    @classmethod
    def from_json(cls, data: Any) -> InFlight | None:
        """The record kept in a task's metadata; None when it is not one (not an object, or its target,
        old or new tip missing or not a string).

        Deliberately tolerant of the two optional fields: a ``destination`` or ``stash_message`` that is
        not a string (a hand-edited record) reads as None rather than losing the whole record, so
        recovery still learns which target moved.
        """
        if not isinstance(data, dict):
            return None
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError:
            pass
        optional = {key: value if isinstance(value := data.get(key), str) else None for key in _OPTIONAL}
        try:
            return msgspec.convert({**data, **optional}, cls)
        except msgspec.ValidationError:
            return None


#: The fields a damaged record may lose without losing the record (see :meth:`InFlight.from_json`).
_OPTIONAL = ("destination", "stash_message")


def save_in_flight(project: Project, task_id: str, flight: InFlight | None) -> None:
    """Save (or, with None, drop) the accept's in-flight record: written before the step it describes."""
    with project.store.write() as tx:
        task = tx.get_task(task_id)
        if task is None:
            return
        meta = {k: v for k, v in task.metadata.items() if k != JOURNAL}
        if flight is not None:
            meta[JOURNAL] = flight.to_json()
        tx.update_task(task_id, metadata=meta, touch=False)


def without_flight(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in (MARKER, JOURNAL)}


#: The process record of an accept in flight on the shared store (the host that runs it).
ACCEPT = "accept"


def mark_in_flight(project: Project, task_id: str, prior: Status) -> None:
    """An accept starts: the status to restore should it die, and (on the shared store) the host it runs on."""
    with project.store.write() as tx:
        write_mark(project, tx, task_id, prior)


def write_mark(project: Project, tx: Tx, task_id: str, prior: Status) -> None:
    """:func:`mark_in_flight` in the caller's transaction (an accept with no pre-accept turn writes it with its
    move to ``merging``)."""
    task = tx.get_task(task_id)
    if task is None:
        return
    tx.update_task(task_id, metadata={**task.metadata, MARKER: prior.value}, touch=False)
    me = project.placement.owner(project)
    if me is not None:
        tx.register_process(task_id, ACCEPT, os.getpid(), owner=me)


def accepting_elsewhere(project: Project, task_id: str) -> bool:
    """Whether the task's accept in flight runs on another host (only that host may recover it)."""
    with project.store.read() as tx:
        return bool(project.placement.records_elsewhere(project, tx, ACCEPT, task_id))
