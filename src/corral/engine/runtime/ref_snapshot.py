"""Before the agent: the ref guard's snapshot of every ref, the watch on the refs directories, and
the hooks directory whose ``reference-transaction`` hook logs each move the agent's git commits.

How a turn goes, and what the snapshot and the hooks are for, is ``runtime/ref_guard``'s note.
"""

from __future__ import annotations

import _thread
import json
import os
import shlex
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from corral.adapters.files import write_atomic
from corral.adapters.git import Git
from corral.adapters.ref_files import common_dir, read_refs
from corral.adapters.ref_watch import RefWatch
from corral.engine.runtime.ref_guard import (
    EXEMPT,
    HOOKS,
    MOVES,
    REPORT,
    SNAPSHOT,
    guard_dir,
)
from corral.errors import GitError

_FORMAT = "--format=%(objectname)%00%(refname)%00%(symref)"


def _refs(git: Git, cwd: Path) -> dict[str, str]:
    out = git.run("for-each-ref", _FORMAT, cwd=cwd).stdout
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, rest = line.partition("\0")
        name, _, symref = rest.partition("\0")
        if name and not symref and not name.startswith(EXEMPT):
            refs[name] = sha
    return refs


#: A process keeps at most this many turns' watches (the oldest is closed: its check reads every ref).
WATCHES_KEPT = 4
_watches: dict[str, tuple[str, RefWatch]] = {}  # guard directory -> (its command, the watch)
_watches_lock = threading.Lock()


def _keep_watch(where: Path, command_id: str, watch: RefWatch | None) -> None:
    """Hold ``watch`` for ``command_id``'s turn, whose guard directory is ``where`` (replacing one held there)."""
    with _watches_lock:
        old = _watches.pop(str(where), None)
        if watch is not None:
            _watches[str(where)] = (command_id, watch)
            while len(_watches) > WATCHES_KEPT:
                _watches.pop(next(iter(_watches)))[1].close()
    if old is not None:
        old[1].close()


def take_watch(where: Path, command_id: object) -> RefWatch | None:
    """The watch held for ``where``, if it is ``command_id``'s (one of another command is closed)."""
    with _watches_lock:
        held = _watches.pop(str(where), None)
    if held is None:
        return None
    if held[0] != command_id:
        held[1].close()
        return None
    return held[1]


def ref_values(git: Git, worktree: Path, files: bool) -> tuple[dict[str, str], bool]:
    """(refs, whether they were read from the files): ``ref_files.read_refs`` where it can, else ``for-each-ref``."""
    if files:
        found = read_refs(common_dir(worktree), EXEMPT)
        if found is not None:
            return found, True
    return _refs(git, worktree), False


_LOGGER = """#!/bin/sh
# corral's ref guard (this turn's agent only): log each committed ref update, then the repository's own hook.
data=$(cat; echo x)
data=${{data%x}}
if [ "$1" = committed ]; then
  printf '%s' "$data" >> {log} 2>/dev/null || :
fi
hook={own}
if [ -f "$hook" ] && [ -x "$hook" ]; then
  printf '%s' "$data" | "$hook" "$@"
  exit $?
fi
exit 0
"""
_FORWARD = """#!/bin/sh
# corral's ref guard: the repository's own hook, as git would have run it.
exec {own} "$@"
"""


_known_hooks: dict[tuple[str, str], str] = {}  # (worktree, command) -> the own hooks path read before its turn


def known_hooks(worktree: Path | str, command_id: str, own: str) -> None:
    """The hooks path (``git rev-parse --git-path hooks``, as configured) read for ``worktree`` a moment
    before its turn, by a look that asked it beside other facts: the turn's :func:`prepare` takes it
    (once) rather than asking git again. Read before the agent starts, so never the agent's word."""
    _known_hooks[(str(worktree), command_id)] = own


def _hooks(git: Git, worktree: Path, hooks: Path, log: Path, command_id: str) -> str:
    """Make the turn's hooks directory; returns the repository's own hooks path (as git gives it)."""
    own = _known_hooks.pop((str(worktree), command_id), None)
    if own is None:
        own = git.run("rev-parse", "--git-path", "hooks", cwd=worktree, as_configured=True).stdout.strip()
    found = Path(own) if os.path.isabs(own) else worktree / own
    names: set[str] = set()
    try:
        names = {
            e.name
            for e in os.scandir(found)
            if not e.name.endswith(".sample") and e.is_file() and os.access(e.path, os.X_OK)
        }
    except OSError:
        pass
    hooks.mkdir(mode=0o700, parents=True, exist_ok=True)

    def own_path(name: str) -> str:
        return shlex.quote(os.path.join(own, name))  # a relative hooksPath stays relative, as git reads it

    for name in names - {"reference-transaction"}:
        path = hooks / name
        path.write_text(_FORWARD.format(own=own_path(name)))
        path.chmod(0o700)
    path = hooks / "reference-transaction"
    path.write_text(_LOGGER.format(log=shlex.quote(str(log)), own=own_path("reference-transaction")))
    path.chmod(0o700)
    return own


def prepare(git: Git, log_dir: Path, worktree: Path, command_id: str) -> Path | None:
    """Take the turn's snapshot and make its hooks, once per command; the hooks directory, or None.

    A later attempt of the same turn finds them made. Never raises: a guard that could not be
    prepared leaves the agent's git as it was (and the check after the turn finds no snapshot).
    """
    where = guard_dir(log_dir)
    snap = where / SNAPSHOT
    hooks = where / HOOKS
    try:
        if snap.is_file():
            doc = json.loads(snap.read_text())
            if doc.get("command_id") == command_id:
                return hooks if doc.get("hooks") else None
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        (where / REPORT).unlink(missing_ok=True)  # another command's, in a reused directory
        at = time.time()
        log = where / MOVES
        log.write_bytes(b"")
        log.chmod(0o600)
        made: list[str | None] = [None]
        beside = _thread.allocate_lock()  # held until the hooks are made
        beside.acquire()

        def beside_work() -> None:
            try:
                made[0] = _hooks(git, worktree, hooks, log, command_id)
            except (GitError, OSError):
                pass
            finally:
                beside.release()

        # The hooks are made while the refs are read (the agent has not started: a ref another
        # process writes in between is not the agent's, whichever look saw it). A bare thread:
        # threading's waits for it to start, a scheduler's slice on a loaded machine.
        _thread.start_new_thread(beside_work, ())
        watch: RefWatch | None = None
        try:
            try:
                common = common_dir(worktree)
                watch = RefWatch.start(common, EXEMPT)  # before the read: no write after it goes unseen
                found = read_refs(common, EXEMPT, watch)
                if watch is not None and (found is None or watch.broken):
                    watch.close()
                    watch = None
                refs = found if found is not None else _refs(git, worktree)
            finally:
                beside.acquire()
            own = made[0]
            doc = {
                "command_id": command_id,
                "at": at,
                "hooks": own is not None,
                "own_hooks": own,
                "refs": refs,
                "files": found is not None,  # read from the files: the check after the turn reads them so too
            }
            # Not fsynced: the snapshot serves this turn, and a machine that crashes ends the turn with it.
            write_atomic(snap, json.dumps(doc).encode(), durable=False)
        except BaseException:
            if watch is not None:
                watch.close()
            raise
        _keep_watch(where, command_id, watch)
        return hooks if own is not None else None
    except (GitError, OSError, ValueError):
        return None


def hook_env(log_dir: Path, worktree: Path, command_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the agent's environment gains: ``core.hooksPath`` on the turn's hooks directory.

    Added after any ``GIT_CONFIG_*`` entries the environment already carries, so they stay.
    Takes the snapshot first (:func:`prepare`); empty when it could not be taken.
    """
    hooks = prepare(Git(), log_dir, worktree, command_id)
    if hooks is None:
        return {}
    raw = env.get("GIT_CONFIG_COUNT", "0") or "0"
    n = int(raw) if raw.isdigit() else 0
    return {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": "core.hooksPath",
        f"GIT_CONFIG_VALUE_{n}": str(hooks),
    }
