"""The protocol directory between the CLI and a turn's supervisor: files, written atomically.

``command.json`` (what to do), ``status.json`` (pid, phase, heartbeat, retry state),
``progress.json`` (an agent's ephemeral progress line) and ``response.json`` (the
receipt). Every file carries ``protocol_version``. A durable write is a temp file,
fsync, rename, fsync of the directory; a crash leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
RECEIPT_MAX_BYTES = 8 * 1024 * 1024

COMMAND = "command.json"
STATUS = "status.json"
PROGRESS = "progress.json"
RESPONSE = "response.json"
STOP = "stop.json"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data: dict[str, Any], *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``data`` (plus ``protocol_version``)."""
    doc = {"protocol_version": PROTOCOL_VERSION, **data}
    payload = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, payload)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


@dataclass(frozen=True)
class Receipt:
    """A protocol file as read: its object, or why it could not be used."""

    data: dict[str, Any] | None
    problem: str | None = None  # missing | not-regular | symlink | too-large | invalid-utf8 | blank | invalid-json

    @property
    def ok(self) -> bool:
        return self.data is not None


def read_receipt(path: Path, max_bytes: int = RECEIPT_MAX_BYTES) -> Receipt:
    """Read a protocol file defensively: never follow a symlink, never load an unbounded file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Receipt(None, "missing")
    except OSError:
        return Receipt(None, "missing")
    if stat.S_ISLNK(info.st_mode):
        return Receipt(None, "symlink")
    if not stat.S_ISREG(info.st_mode):
        return Receipt(None, "not-regular")
    if info.st_size > max_bytes:
        return Receipt(None, "too-large")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return Receipt(None, "symlink")
    try:
        raw = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        return Receipt(None, "too-large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Receipt(None, "invalid-utf8")
    if not text.strip():
        return Receipt(None, "blank")
    try:
        data = json.loads(text)
    except ValueError:
        return Receipt(None, "invalid-json")
    if not isinstance(data, dict):
        return Receipt(None, "invalid-json")
    return Receipt(data)


def read(path: Path) -> dict[str, Any] | None:
    return read_receipt(path).data
