"""The state is the user's alone: directories corral makes there are 0700 and files 0600.

:func:`make_private_dir` makes a directory so; :func:`private_umask` goes around anything that
creates files it does not open itself, such as SQLite's database and its ``-wal``/``-shm``;
:func:`prepare_private_state` makes the state directory's fixed subdirectories before anything
goes in them. :func:`private_mode_findings` lists whatever is wider, for ``doctor``; a worktree's
contents are the agent's files, not corral's, and are not judged.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from msgspec import Struct

from corral.adapters.files import PRIVATE_DIR_MODE as PRIVATE_DIR_MODE  # the modes live with the helpers
from corral.adapters.files import PRIVATE_FILE_MODE as PRIVATE_FILE_MODE
from corral.engine.paths import ProjectPaths

PRIVATE_UMASK = 0o077

_umask_lock = threading.RLock()


@contextmanager
def private_umask() -> Iterator[None]:
    """Whatever is created inside is the user's alone (umask 077), then the old umask is back.

    The umask is the process's: the lock keeps two threads from restoring each other's, and
    nothing spawned inside should outlive it (a child inherits the umask it was started with).
    """
    with _umask_lock:
        old = os.umask(PRIVATE_UMASK)
        try:
            yield
        finally:
            os.umask(old)


def make_private_dir(path: Path) -> None:
    """``path`` and any missing parents, each created 0700 (an existing directory keeps its mode)."""
    with private_umask():
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)


def _try_private_dir(path: Path) -> None:
    """:func:`make_private_dir`, leaving a path it cannot make as it is: the operation that needs
    the directory reports it with its own coded error (a file where a directory belongs, say)."""
    try:
        make_private_dir(path)
    except OSError:
        pass


def prepare_private_state(paths: ProjectPaths) -> None:
    """The state directory and its fixed subdirectories, created 0700 before anything goes in them.

    Call it (and open the store) inside :func:`private_umask`, so the database is created
    0600 — SQLite gives its ``-wal`` and ``-shm`` the database's own mode.
    """
    for directory in (paths.root, paths.tasks, paths.worktrees, paths.diagnostics, paths.logs):
        _try_private_dir(directory)


class ModeFinding(Struct, frozen=True):
    """A file or directory of corral's state that others may read, write or enter."""

    path: Path
    mode: int  # the permission bits found
    wanted: int  # 0700 for a directory, 0600 for a file

    @property
    def message(self) -> str:
        return f"{self.path} is {self.mode:04o}; corral keeps it {self.wanted:04o}"

    @property
    def fix(self) -> str:
        return f"chmod {self.wanted:o} '{self.path}'"


def _judge(path: Path, findings: list[ModeFinding]) -> bool:
    """Add a finding when ``path`` is wider than private; True when it is a directory to descend."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode):
        return False
    is_dir = stat.S_ISDIR(info.st_mode)
    bits = stat.S_IMODE(info.st_mode)
    if bits & 0o077:
        findings.append(ModeFinding(path, bits, PRIVATE_DIR_MODE if is_dir else PRIVATE_FILE_MODE))
    return is_dir


def private_mode_findings(paths: ProjectPaths) -> list[ModeFinding]:
    """Everything in the project's state directory wider than 0700 (directories) or 0600 (files).

    The state directory itself, the database and its ``-wal``/``-shm``, and every directory and
    file below it, except inside a worktree (the agent's files, whose modes are the repository's):
    the worktrees directory itself is judged, its contents are not.
    """
    findings: list[ModeFinding] = []
    if not _judge(paths.root, findings):
        return findings
    skip = {paths.worktrees}
    stack = [paths.root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            child = Path(entry.path)
            if _judge(child, findings) and child not in skip:
                stack.append(child)
    return findings
