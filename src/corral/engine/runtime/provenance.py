"""A turn's provenance: what corral launched, written before the agent starts, where the agent cannot write.

Intents and dispositions are honoured only for a run corral launched confined (docs/incidents.md,
"Confined runs"), and an unconfined agent could rewrite its own log and metadata. So the launch
writes ``provenance.json`` into the turn's log directory (inside corral's state, which the sandbox
hides from the agent) before the supervisor starts: the task, session, turn and command, the
sandbox the turn runs in, the harness, the launch time.

A scan decides trust from it once, when it first meets the turn's log (:func:`trust`): trusted
when the record is whole, names that turn (:func:`names`) and says ``bwrap``; not trusted when
there is none (a turn from before provenance, or one never launched confined); *unreadable* when
a file is there but cannot be used — then the scan waits for it, bounded by :data:`WAIT_SECONDS`
or the turn's end, and goes on under the exact-retry rule with an ``Observation incomplete`` note.
"""

from __future__ import annotations

import json
import os
from enum import Enum
from pathlib import Path
from typing import Any

from corral.adapters.files import read_bounded, write_atomic

PROVENANCE = "provenance.json"
#: How long a scan waits for provenance it cannot read before it takes the exact-retry rule.
WAIT_SECONDS = 30.0
_MAX_BYTES = 64 * 1024
_FIELDS = ("task_id", "session_id", "command_id", "sequence", "sandbox", "harness", "launched_at")


class Trust(Enum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"
    UNREADABLE = "unreadable"


def write(log_dir: Path, doc: dict[str, Any]) -> None:
    """The record, durably, before the agent starts (``doc`` holds every field of :data:`_FIELDS`)."""
    missing = [k for k in _FIELDS if k not in doc]
    if missing:
        raise ValueError(f"provenance lacks {', '.join(missing)}")
    log_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(log_dir / PROVENANCE, json.dumps(doc, sort_keys=True).encode("utf-8"), durable=True)


def trust(log_dir: Path) -> Trust:
    """Whether the run whose log is in ``log_dir`` was launched confined, by its provenance."""
    path = log_dir / PROVENANCE
    if not os.path.lexists(path):
        return Trust.UNTRUSTED
    raw, problem, _size = read_bounded(path, _MAX_BYTES)
    if problem is not None or not raw:
        return Trust.UNREADABLE
    try:
        doc = json.loads(raw)
    except ValueError:
        return Trust.UNREADABLE
    if not isinstance(doc, dict) or any(k not in doc for k in _FIELDS):
        return Trust.UNREADABLE
    if not names(doc, log_dir):
        return Trust.UNTRUSTED  # a record of another turn (copied, or moved) lends this one no trust
    return Trust.TRUSTED if doc.get("sandbox") == "bwrap" else Trust.UNTRUSTED


def names(doc: dict[str, Any], log_dir: Path) -> bool:
    """Whether the record names the turn whose log directory it is in: its sequence is the directory's
    name and, in corral's layout (``tasks/<task>/turns/<sequence>``), its task the task's."""
    if str(doc.get("sequence")) != log_dir.name:
        return False
    turns = log_dir.parent
    if turns.name == "turns" and turns.parent.parent.name == "tasks":
        return str(doc.get("task_id")) == turns.parent.name
    return True
