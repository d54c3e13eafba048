"""The two files a project's identity is kept in, and the state directories they list.

The identity is computed once per checkout and cached in the repository's git directory
(``.git/corral/identity.json``, in the common dir so the task worktrees share it), with the
state directory it names and the path the checkout was seen at. Every state directory holds
``repository.json``: the identity and the path of the one checkout attached to it.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from corral.adapters.files import write_atomic
from corral.engine.identity import Identity
from corral.engine.paths import IDENTITY_CACHE, REPOSITORY_RECORD
from corral.engine.private_state import PRIVATE_FILE_MODE, make_private_dir, private_umask

CACHE = IDENTITY_CACHE  # relative to the repository's (common) git directory
RECORD = REPOSITORY_RECORD  # in each state directory: the checkout it belongs to
VERSION = 1
_MAX_FILE = 64 * 1024  # both files are a few hundred bytes: anything bigger is not ours


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_FILE + 1)
    except OSError:
        return None
    if len(raw) > _MAX_FILE:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, Any]) -> bool:
    """Best effort: a directory that refuses writes (a read-only mount, a full disk) never stops a
    command here; what needs the state directory reports it with its own coded error, and the
    next command tries again."""
    try:
        make_private_dir(path.parent)
        with private_umask():
            write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), durable=False)
        os.chmod(path, PRIVATE_FILE_MODE)
    except OSError:
        return False
    return True


def cache_file(repo: Path) -> Path:
    return repo / ".git" / CACHE


class Cache(Struct, frozen=True):
    """What a checkout's git directory remembers: its identity, its state directory, where it was seen."""

    identity: Identity
    state: str  # the state directory's name under projects/
    path: str
    home: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            **self.identity.to_json(),
            "state": self.state,
            "path": self.path,
            "home": self.home,
        }


def read_cache(repo: Path) -> Cache | None:
    data = _read_json(cache_file(repo))
    if data is None:
        return None
    identity = Identity.from_json(data)
    state, path, home = data.get("state"), data.get("path"), data.get("home")
    if identity is None or not all(isinstance(v, str) and v for v in (state, path, home)):
        return None
    assert isinstance(state, str) and isinstance(path, str) and isinstance(home, str)
    if "/" in state or state in (".", ".."):
        return None
    return Cache(identity, state, path, home)


def write_cache(repo: Path, cache: Cache) -> None:
    _write_json(cache_file(repo), cache.to_json())


class Record(Struct, frozen=True):
    """A state directory's record of the checkout attached to it."""

    state: Path
    identity: Identity | None  # None: made by an older corral and not adopted yet
    path: str | None  # the attached checkout (None: unknown)
    attached_at: str | None = None

    @property
    def name(self) -> str:
        return self.state.name

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            **(self.identity.to_json() if self.identity else {}),
            "path": self.path,
            "attached_at": self.attached_at,
        }


def read_record(state: Path) -> Record | None:
    data = _read_json(state / RECORD)
    if data is None:
        return None
    path = data.get("path")
    at = data.get("attached_at")
    return Record(
        state,
        Identity.from_json(data),
        path if isinstance(path, str) and path else None,
        at if isinstance(at, str) else None,
    )


def write_record(state: Path, identity: Identity, path: Path) -> Record:
    record = Record(state, identity, str(path), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    _write_json(state / RECORD, record.to_json())
    return record


def projects_dir(home: Path) -> Path:
    return home / "projects"


def archive_dir(home: Path) -> Path:
    return home / "archive"


def project_states(home: Path) -> list[Path]:
    """The state directory of every project kept under ``home``, in name order."""
    try:
        return sorted(Path(e.path) for e in os.scandir(projects_dir(home)) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def legacy_repo(state: Path) -> str | None:
    """The repository a state directory of an older corral belonged to, read off a worktree's ``.git`` file."""
    try:
        entries = sorted(os.scandir(state / "worktrees"), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        try:
            with open(Path(entry.path) / ".git", encoding="utf-8", errors="replace") as f:
                line = f.read(4096).strip()
        except OSError:
            continue
        found = re.match(r"gitdir:\s*(.+?)/\.git/worktrees/[^/]+$", line)
        if found:
            return found.group(1)
    return None


def moved_legacy(repo: Path, home: Path) -> Path | None:
    """An older corral's state directory (no record) whose task worktrees this repository's git
    directory lists, and whose repository, as its worktrees name it, is gone: this one moved."""
    try:
        entries = sorted(os.scandir(repo / ".git" / "worktrees"), key=lambda e: e.name)
    except OSError:
        return None
    prefix = str(projects_dir(home)) + os.sep
    for entry in entries:
        try:
            target = (Path(entry.path) / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if not target.startswith(prefix):
            continue
        state = projects_dir(home) / target[len(prefix) :].split(os.sep, 1)[0]
        record = read_record(state)
        if not state.is_dir() or (record is not None and record.identity is not None):
            continue
        old = legacy_repo(state)
        if old is not None and old != str(repo) and not os.path.exists(old):
            return state
    return None


def holds(path: str | None, state: str) -> bool:
    """Whether the checkout at ``path`` is there and its cache names the state directory ``state``."""
    if not path:
        return False
    cache = read_cache(Path(path))
    return cache is not None and cache.state == state
