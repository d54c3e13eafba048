"""The one writer and the one reader of the files that cross the process boundary (``protocol``'s records).

One writer, :func:`write` (temp file, fsync, rename, fsync of the directory: a crash leaves
the old file or the new one; a command goes through :func:`write_command`), and one reader,
:func:`read`: it never follows a symlink, never blocks on a FIFO, never loads more than
:data:`MAX_BYTES` (the writer refuses to write more, so a file corral wrote is always one
corral can read), and says why a file could not be used as an :class:`Unreadable` value
(missing, not a regular file, a symlink, too large, invalid UTF-8, blank, not a JSON object,
the wrong shape, or a newer protocol version). A file from an older ``protocol_version`` is
still read: its record's :meth:`Wire.upgraded` brings it to this version's shape first.

The shapes are the records' own: msgspec encodes them and validates them on decode (a field
of the wrong type is :data:`Problem.WRONG_SHAPE`, with msgspec's message naming the field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import msgspec

from corral.adapters.files import read_bounded, write_atomic
from corral.engine.private_state import make_private_dir

#: 3: the receipt's git facts (and each attempt's failure evidence) are nested objects, as their records are.
PROTOCOL_VERSION = 3
#: The one bound on a protocol file: the writer never writes more and the reader never reads more.
MAX_BYTES = 8 * 1024 * 1024

COMMAND = "command.json"
STATUS = "status.json"
PROGRESS = "progress.json"
RESPONSE = "response.json"
STOP = "stop.json"
#: The supervisor's one argument when it is started ahead (a spare, ``corral.engine.operations.spares``): its
#: command's protocol directory then arrives on its pipe.
SPARE_ARG = "--spare"

JSON = dict[str, Any]


class Problem(StrEnum):
    """Why a protocol file could not be used (each has its wording in ``domain.explain.RECEIPT_PROBLEMS``)."""

    MISSING = "missing"
    NOT_REGULAR = "not-regular"
    SYMLINK = "symlink"
    TOO_LARGE = "too-large"
    INVALID_UTF8 = "invalid-utf8"
    BLANK = "blank"
    INVALID_JSON = "invalid-json"
    WRONG_SHAPE = "wrong-shape"
    TOO_NEW = "too-new"


class Unreadable(msgspec.Struct, frozen=True):
    """A protocol file that could not be used, and why."""

    problem: Problem
    size: int | None = None
    detail: str = ""


class ShapeError(ValueError):
    """A document that is JSON but not the record it should be (a field missing or of the wrong type)."""


class Wire(msgspec.Struct, frozen=True):
    """A record written to a file of its own (``FILE``) in a turn's protocol directory.

    Every field is written, its default too (``"retry": null`` says no retry is waiting, for any
    reader of the file, typed or not), except in the command and the receipt, which leave a field at
    its default out (a work turn's command carries no read-only before-state at all; a receipt no
    empty list of reaped processes). A field the record does not know is ignored on read, and one
    missing (an older writer's) reads as its default.
    """

    FILE: ClassVar[str] = ""

    def to_json(self) -> JSON:
        """The record as the JSON object its file holds (without ``protocol_version``)."""
        doc: JSON = msgspec.to_builtins(self)
        return doc

    @classmethod
    def upgraded(cls, data: JSON, version: int) -> JSON:
        """``data``, written at protocol ``version``, in this version's shape (a record whose shape
        changed says how; the others read as they are)."""
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int = PROTOCOL_VERSION) -> Self:
        """The record from its file's object; :class:`ShapeError` names the field that is wrong."""
        doc = dict(data)
        if version < PROTOCOL_VERSION:
            doc = cls.upgraded(doc, version)
        try:
            return msgspec.convert(doc, cls)
        except msgspec.ValidationError as exc:
            raise ShapeError(str(exc)) from None


R = TypeVar("R", bound=Wire)


#: Compiled on the first write (``re``'s cache keeps it): a reader, as ``list`` is, never needs it.
_SURROGATES = "[\ud800-\udfff]"


class TooLarge(ValueError):
    """A protocol document over :data:`MAX_BYTES`: the writer refuses it rather than write what no reader takes."""


def encode(data: Mapping[str, Any]) -> bytes:
    """The bytes :func:`write_json` puts on disk for ``data``: its JSON with ``protocol_version``, one space a level.

    ``json``'s indenting encoder is written in Python and costs seconds on a receipt of a hundred
    thousand paths (and ``receipt_fit`` measures a receipt several times as it shrinks it), so the
    document is encoded compactly by ``json``'s C encoder and indented by msgspec's C formatter,
    which copies every string and number through as written: the same bytes, at a C encoder's cost.
    What that formatter refuses (a lone surrogate's escape; NaN or an infinity, which ``json`` writes
    and reads back though they are not JSON) takes the indenting encoder, byte for byte as before.
    """
    doc = {"protocol_version": PROTOCOL_VERSION, **data}
    try:
        return msgspec.json.format(json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), indent=1)
    except (UnicodeEncodeError, msgspec.DecodeError):
        pass
    text = json.dumps(doc, ensure_ascii=False, indent=1)
    # A lone surrogate (a harness that cut its output inside a character) is written as its JSON
    # escape: the file stays valid UTF-8, and the reader gets the very same text back.
    return re.sub(_SURROGATES, lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def write_json(path: Path, data: Mapping[str, Any], *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` plus ``protocol_version`` (0600)."""
    payload = encode(data)
    if len(payload) > MAX_BYTES:
        raise TooLarge(f"{path.name} would be {len(payload):,} bytes; the protocol's bound is {MAX_BYTES:,}")
    write_atomic(path, payload, durable=durable)


def write(directory: Path, record: Wire, *, durable: bool = True) -> None:
    """Write one protocol record to its file in ``directory``."""
    write_json(directory / record.FILE, record.to_json(), durable=durable)


def write_command(directory: Path, command: Wire) -> None:
    """Write a turn's ``command.json`` (a ``turn_command.Command``) into ``directory``, made private (0700) first.

    The one writer of a command, so its file is made one way wherever it lands: the protocol
    directory, where the supervisor reads it (``launch.launch``, once, before the supervisor
    starts), and the turn's log directory, where the settings it was launched with stay on record
    beside its logs once the next turn has replaced the protocol's copy (the launch skeleton
    ``turns._launch``, and a worker's ``claimed`` launch, before ``launch.launch``).
    """
    make_private_dir(directory)
    write(directory, command)


class Document(msgspec.Struct, frozen=True):
    """A protocol file as read: its object and version, or why it could not be used."""

    data: JSON | None
    problem: Problem | None = None
    size: int | None = None
    version: int = PROTOCOL_VERSION


def read_document(path: str | Path, max_bytes: int = MAX_BYTES) -> Document:
    """Read a protocol file defensively: no symlink followed, no FIFO waited on, no unbounded read."""
    raw, problem, size = read_bounded(path, max_bytes)
    if raw is None:
        return Document(None, Problem(problem or "missing"), size)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Document(None, Problem.INVALID_UTF8, len(raw))
    if not text.strip():
        return Document(None, Problem.BLANK, len(raw))
    try:
        data = json.loads(text)
    except ValueError:
        return Document(None, Problem.INVALID_JSON, len(raw))
    if not isinstance(data, dict):
        return Document(None, Problem.INVALID_JSON, len(raw))
    version = data.get("protocol_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        return Document(None, Problem.WRONG_SHAPE, len(raw))
    if version > PROTOCOL_VERSION:
        return Document(None, Problem.TOO_NEW, len(raw), version)
    return Document(data, None, len(raw), version)


def read(path: str | Path, kind: type[R]) -> R | Unreadable:
    """The typed record in ``path``, or why it could not be used."""
    doc = read_document(path)
    if doc.data is None:
        assert doc.problem is not None
        newer = doc.problem is Problem.TOO_NEW
        detail = f"protocol version {doc.version}, newer than {PROTOCOL_VERSION}" if newer else ""
        return Unreadable(doc.problem, doc.size, detail)
    try:
        return kind.from_json(doc.data, doc.version)
    except (ShapeError, ValueError, TypeError) as exc:
        return Unreadable(Problem.WRONG_SHAPE, doc.size, str(exc)[:300])


def read_record(path: str | Path, kind: type[R]) -> R | None:
    """The typed record in ``path``, or None when there is none that can be used."""
    found = read(path, kind)
    return None if isinstance(found, Unreadable) else found


def read_raw(path: str | Path) -> JSON | None:
    """A protocol file's object as it is on disk (for diagnostics and tests), or None."""
    return read_document(path).data


def remove(directory: Path, *names: str) -> None:
    for name in names:
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass
