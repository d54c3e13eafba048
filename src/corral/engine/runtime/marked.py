"""Which tasks' agents left markers (waits on subtasks, a progress line: ``agent_marks``).

Each such task has one empty entry in :attr:`ProjectPaths.marked`, so a read of thousands of
running turns (``list``, the board) lists one directory instead of looking for two files in
every turn's protocol directory. The entry is made before the task's first marker is written and
removed after its markers are (a turn's teardown), so a marker never exists without its entry; an
entry left without markers (a crash between) costs a reader only the look-ups it makes for them.

A reader keeps what it listed for :data:`LISTED_SECONDS` (a long-lived one, the daemon, asks per
turn); this process's own writes are seen at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from corral.engine.paths import ProjectPaths, marked_entry
from corral.engine.private_state import make_private_dir

#: How long a listing answers for (a marker another process wrote shows within it).
LISTED_SECONDS = 0.5

_listed: dict[str, tuple[float, frozenset[str]]] = {}  # the marked directory -> (when listed, its entries)


def tasks(paths: ProjectPaths) -> frozenset[str]:
    """The ids of the tasks whose agents may have left markers."""
    where = str(paths.marked)
    now = time.monotonic()
    seen = _listed.get(where)
    if seen is not None and now - seen[0] < LISTED_SECONDS:
        return seen[1]
    try:
        found = frozenset(os.listdir(where))
    except OSError:  # none made yet
        found = frozenset()
    _listed[where] = (now, found)
    return found


def note(protocol_dir: Path) -> None:
    """Before a marker of this task is written: its entry (raises what the disk raises)."""
    entry = marked_entry(protocol_dir)
    _listed.pop(str(entry.parent), None)
    make_private_dir(entry.parent)
    fd = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)


def forget(protocol_dir: Path) -> None:
    """After this task's markers are removed: its entry goes too."""
    entry = marked_entry(protocol_dir)
    _listed.pop(str(entry.parent), None)
    try:
        entry.unlink()
    except FileNotFoundError:
        pass
