"""Refs are guarded: after a turn, every ref the agent moved — other than its task's own branch — is put back.

An agent works on its task's branch. Any other ref it moves (the target, another task's
``corral/*`` branch, a tag, ``refs/corral/…``) is put back to its value before the turn, and
the agent's version is kept on ``refs/corral/kept/<task ref>/<turn>-<ref>`` (for example
``refs/corral/kept/fix-login/3-refs/heads/main``), beside the read-only turns' kept refs of
:mod:`corral.engine.readonly`. Without it an agent that runs ``git update-ref refs/heads/main
HEAD`` would have its own task completed by the merged-branch sweep: a self-accept with no
review.

How a turn goes:

- **Before the agent starts** (the first attempt's launch, :func:`hook_env`): the snapshot
  (``<log dir>/ref-guard/refs.json``) is every ref's value, read from the ref files themselves
  as git reads them (loose refs over ``packed-refs``; no git process, about a third of a
  ``for-each-ref``'s time with 1,000 loose refs; ``for-each-ref`` where refs are not files:
  reftable). On Linux an inotify watch on each refs directory (and on ``packed-refs``'
  directory) is made before the read and held by the process until the check. A hooks
  directory is made for the agent's process only: ``core.hooksPath`` through
  ``GIT_CONFIG_COUNT``/``KEY``/``VALUE`` in its environment, so a person's git, corral's own
  and the post-turn check never see it. Its ``reference-transaction`` hook appends each
  committed update (``old new ref``) to ``<log dir>/ref-guard/moves.log``, then runs the
  repository's own hook; every other hook the repository has (its ``core.hooksPath`` or
  ``.git/hooks``, as git would find it) is forwarded as it is, so the person's hooks still run.
- **After the work phase** (:func:`settle`, from the supervisor; again from the reconciler
  for a turn that never wrote its receipt): the refs now. In the process that took the
  snapshot, only the paths its watch saw written are read again (a ref file, a directory made,
  removed or renamed, ``packed-refs``), whoever wrote them and however — git, or a file
  rewritten in place with its times put back; anywhere else (the reconciler), or when the
  watch lost events, every ref is read again. Each ref whose value differs from the snapshot
  is attributed:

  * **the agent's** when the hook log names it (``by: "hook"``) — and only when the ref still
    holds the value the agent gave it: someone who moved it after the agent is never undone
    (the move is reported, ``restored: false``);
  * **the agent's** when its new value carries a commit made in the task's worktree during
    the turn (``by: "worktree-commits"``): a commit reachable from the branch's tip or from a
    value the worktree's ``HEAD`` took during the turn (its reflog), and from no ref of the
    snapshot — unless the ref is checked out in another worktree whose ``HEAD`` took that value
    during the turn (a commit or merge made there: corral's sync of a subtask, the worktree
    corral makes for a subtask the agent started through MCP). This catches an agent that
    bypassed the hook (``git -c core.hooksPath=/dev/null update-ref …``);
  * **someone else's** otherwise — a person's commit on the target, corral's own accept of
    another task, sync, a read-only revert — and left alone (counted in ``others``).

  Save first, act second: the plan is written (``report.json``), then each kept ref, then
  each ref is put back with a compare-and-swap on the agent's value (a created ref is
  deleted, a deleted one re-created); the report is written again with the outcome. Calling
  :func:`settle` again after a crash finishes the plan and returns the same report.

Not guarded: the task's own branch; ``refs/remotes/`` (``git fetch`` moves them, they say
what a remote holds, and the remote is beyond corral's reach anyway); the per-worktree refs
(``refs/bisect/``, ``refs/worktree/``, ``refs/rewritten/``); symbolic refs.

Limits, honestly: an agent that runs unconfined can do anything its user can, so this is a
guard, not a wall. It can bypass the hook, then move a ref to a commit it did not make this
turn (an older commit of its branch, another task's tip) or delete a ref: the fallback test
does not see those. It can write the hook log or the snapshot itself, or write a ref file
through a hard link it made outside ``refs/`` (or a mapping it kept after closing the file),
which no watch of the refs directories sees. A person who merges a running task's fresh
commits into another branch during that turn is indistinguishable from the agent doing it and
is treated as the agent (put back, kept: nothing is lost). The bwrap sandbox takes away what
it can (docs/harnesses.md); this guard runs whatever the sandbox.
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
from typing import Any

from corral import crashpoints
from corral.adapters.files import write_atomic
from corral.adapters.git import Git
from corral.adapters.ref_files import common_dir, read_refs
from corral.adapters.ref_watch import RefWatch
from corral.domain.record import record, replace
from corral.errors import GitError

GUARD_DIR = "ref-guard"
SNAPSHOT = "refs.json"
MOVES = "moves.log"
REPORT = "report.json"
HOOKS = "hooks"
KEPT_PREFIX = "refs/corral/kept/"
#: Refs never guarded: remote-tracking refs (fetch moves them), the per-worktree namespaces, and
#: the branches' verified tips (corral's own, moved by the branch check; no sandbox reaches them).
EXEMPT = ("refs/remotes/", "refs/bisect/", "refs/worktree/", "refs/rewritten/", "refs/corral/verified/")
#: How many moves a report lists (its count of others is whole).
MOVES_KEPT = 100
_ZERO = "0" * 40
_FORMAT = "--format=%(objectname)%00%(refname)%00%(symref)"


def guard_dir(log_dir: Path | str) -> Path:
    return Path(log_dir) / GUARD_DIR


def kept_ref(task_ref: str, turn: int | str, ref: str) -> str:
    """Where the agent's version of ``ref`` is kept: ``refs/corral/kept/<task ref>/<turn>-<ref>``."""
    return f"{KEPT_PREFIX}{task_ref}/{turn}-{ref}"


@record
class RefMove:
    """One ref the agent moved during a turn, and what corral did about it."""

    ref: str
    before: str | None  # its value before the turn (None: it did not exist)
    after: str | None  # the value the agent left (None: it deleted the ref)
    by: str  # how it was attributed: "hook" (its git's hook logged it) | "worktree-commits"
    kept: str | None  # where the agent's version is kept (None for a deletion)
    restored: bool
    error: str | None = None  # why it was not put back
    #: What the branch check found (``corral.engine.runtime.branch_check``: ``branch-symref``, …).
    code: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {
            "ref": self.ref,
            "before": self.before,
            "after": self.after,
            "by": self.by,
            "kept": self.kept,
            "restored": self.restored,
            "error": self.error,
        }
        if self.code is not None:
            doc["code"] = self.code
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RefMove:
        def opt(key: str) -> str | None:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"refs.moves.{key}: expected a string")
            return value

        ref, by = data.get("ref"), data.get("by")
        if not isinstance(ref, str) or not isinstance(by, str):
            raise ValueError("refs.moves: ref and by must be strings")
        return cls(
            ref, opt("before"), opt("after"), by, opt("kept"), data.get("restored") is True, opt("error"), opt("code")
        )


@record
class RefGuard:
    """What the ref guard found after a turn: the agent's moves, and how many moves were someone else's."""

    moves: tuple[RefMove, ...] = ()
    others: int = 0  # refs that moved during the turn, not by the agent: left alone
    hook: bool = True  # whether the agent's git had the logging hook
    error: str | None = None  # why the guard could not look (git unreadable, the snapshot gone)
    #: The turn's quarantined objects (``corral.engine.runtime.quarantine.ObjectsReport.to_json``).
    objects: Mapping[str, Any] | None = None
    #: What the stray-ref sweep removed or left after the turn (``corral.engine.runtime.stray_refs``).
    strays: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "moves": [m.to_json() for m in self.moves],
            "others": self.others,
            "hook": self.hook,
            "error": self.error,
        }
        if self.objects is not None:
            doc["objects"] = dict(self.objects)
        if self.strays is not None:
            doc["strays"] = dict(self.strays)
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RefGuard:
        moves = data.get("moves") or []
        if not isinstance(moves, list) or not all(isinstance(m, dict) for m in moves):
            raise ValueError("refs.moves: expected a list of objects")
        others, error = data.get("others"), data.get("error")
        return cls(
            moves=tuple(RefMove.from_json(m) for m in moves),
            others=others if isinstance(others, int) and not isinstance(others, bool) else 0,
            hook=data.get("hook") is not False,
            error=error if isinstance(error, str) else None,
            objects=data["objects"] if isinstance(data.get("objects"), dict) else None,
            strays=data["strays"] if isinstance(data.get("strays"), dict) else None,
        )


# -- wording (derived when read, never stored) ----------------------------------------------------


def _short(ref: str) -> str:
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref.startswith(prefix):
            return ("tag " if prefix == "refs/tags/" else "") + ref.removeprefix(prefix)
    return ref


#: What the branch check found, in words (``corral.engine.runtime.branch_check``'s codes).
BRANCH_FINDINGS = {
    "branch-symref": "the agent made {name} a symbolic ref ({after})",
    "branch-not-a-commit": "the agent pointed {name} at {after}, which is not a commit",
    "branch-missing": "the agent deleted {name}",
    "branch-foreign-commits": "the agent pointed {name} at {after}, with commits it did not make in this turn",
    "branch-objects-incomplete": "the agent pointed {name} at {after}, whose objects are incomplete",
    "branch-objects-rejected": "the agent's turn wrote git objects that failed corral's check (its {name} at {after})",
}


def move_line(m: RefMove) -> str:
    """One plain line about one move: what the agent did, what corral did, where its version is."""
    name = _short(m.ref)
    finding = BRANCH_FINDINGS.get(m.code or "")
    if finding is not None:
        did = finding.format(name=name, after=(m.after or "nothing")[:60])
        done = (
            f"corral put it back at its last verified tip {(m.before or '')[:12]}"
            if m.restored
            else f"corral could NOT put it back ({m.error or 'unknown reason'})"
        )
        keep = f"; its version is kept on {m.kept}" if m.kept else ""
        return f"{did}; {done}{keep}."
    if m.after is None:
        did = f"the agent deleted {name}"
    elif m.before is None:
        did = f"the agent created {name} at {m.after[:12]}"
    else:
        did = f"the agent moved {name} from {m.before[:12]} to {m.after[:12]}"
    if m.restored:
        done = "corral removed it" if m.before is None else "corral put it back"
    else:
        done = f"corral could NOT put it back ({m.error or 'unknown reason'})"
    keep = f"; its version is kept on {m.kept}" if m.kept else ""
    return f"{did}; {done}{keep}."


def summary(guard: RefGuard | Mapping[str, Any]) -> str | None:
    """The one line ``show`` gives a turn whose agent moved refs; None when it moved none."""
    g = guard if isinstance(guard, RefGuard) else RefGuard.from_json(guard)
    if not g.moves:
        return _objects_line(g) or _strays_line(g)
    first = move_line(g.moves[0])
    more = len(g.moves) - 1
    line = first[0].upper() + first[1:]
    if more:
        line = line[:-1] + f" (and {more} more ref{'' if more == 1 else 's'}: corral show --json lists them)."
    return line


def _objects_line(g: RefGuard) -> str | None:
    objects = g.objects or {}
    rejected = objects.get("rejected")
    if not isinstance(rejected, int) or rejected <= 0:
        return None
    kept = objects.get("kept")
    where = f" (kept aside for a look: {kept})" if isinstance(kept, str) else ""
    return (
        f"The agent's turn wrote {rejected} git object{'' if rejected == 1 else 's'} that failed corral's check; "
        f"none reached the repository{where}."
    )


def _strays_line(g: RefGuard) -> str | None:
    if not g.strays:
        return None
    from corral.engine.runtime.stray_report import summary as strays_summary

    try:
        return strays_summary(g.strays)
    except (ValueError, TypeError, KeyError):
        return None


def target_moved(guard: RefGuard | Mapping[str, Any], target: str) -> RefMove | None:
    """The agent's move of the branch ``target``, if this report has one."""
    g = guard if isinstance(guard, RefGuard) else RefGuard.from_json(guard)
    name = target if target.startswith("refs/") else f"refs/heads/{target}"
    return next((m for m in g.moves if m.ref == name), None)


# -- before the agent: the snapshot and the hooks ------------------------------------------------


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


def _take_watch(where: Path, command_id: object) -> RefWatch | None:
    """The watch held for ``where``, if it is ``command_id``'s (one of another command is closed)."""
    with _watches_lock:
        held = _watches.pop(str(where), None)
    if held is None:
        return None
    if held[0] != command_id:
        held[1].close()
        return None
    return held[1]


def _values(git: Git, worktree: Path, files: bool) -> tuple[dict[str, str], bool]:
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


def _hooks(git: Git, worktree: Path, hooks: Path, log: Path) -> str:
    """Make the turn's hooks directory; returns the repository's own hooks path (as git gives it)."""
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
                made[0] = _hooks(git, worktree, hooks, log)
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


# -- after the agent: attribute, keep, put back --------------------------------------------------


def _logged(path: Path) -> dict[str, str]:
    """ref → the last value the agent's git gave it (``""`` for a deletion), from the hook log."""
    last: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return last
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].startswith("refs/"):
            last[parts[2]] = "" if parts[1] == _ZERO else parts[1]
    return last


def _worktree_tips(git: Git, worktree: Path, branch: str, since: float) -> list[str]:
    """The branch's tip and every value the worktree's HEAD took since ``since`` (its reflog)."""
    tip = git.rev_parse(f"refs/heads/{branch}", cwd=worktree)
    return list(dict.fromkeys(([tip] if tip else []) + _head_took(git, worktree, since)))


def _head_took(git: Git, worktree: Path | str, since: float) -> list[str]:
    """The values a worktree's ``HEAD`` took since ``since``, by its reflog (newest first)."""
    out = git.run("log", "-g", "--date=unix", "--format=%H %gd", "HEAD", "--", cwd=worktree, check=False).stdout
    took = []
    for line in out.splitlines():
        sha, _, selector = line.partition(" ")
        when = selector.rpartition("@{")[2].rstrip("}")
        if when.isdigit() and int(when) >= int(since):
            took.append(sha)
    return took


def _made_elsewhere(git: Git, worktree: Path, ref: str, new: str, since: float) -> bool:
    """Whether ``ref`` is checked out in another worktree whose ``HEAD`` took ``new`` during the turn:
    a commit, merge or sync made there (corral's sync of another task, a person in their checkout,
    the worktree ``start`` made for a subtask) — git logs the other worktree's ``HEAD`` only then."""
    out = git.run("worktree", "list", "--porcelain", cwd=worktree, check=False).stdout
    here = os.path.realpath(worktree)
    path: str | None = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line == f"branch {ref}" and path and os.path.realpath(path) != here and os.path.isdir(path):
            return new in _head_took(git, path, since)
    return False


def _new_commits(git: Git, worktree: Path, tips: list[str], before: Mapping[str, str]) -> set[str]:
    """Commits reachable from ``tips`` and from no ref of the snapshot."""
    if not tips:
        return set()
    stdin = "\n".join([*tips, *(f"^{sha}" for sha in set(before.values()))]) + "\n"
    done = git.run("rev-list", "--stdin", cwd=worktree, input=stdin, check=False)
    return set(done.stdout.split()) if done.returncode == 0 else set()


def _carries(git: Git, worktree: Path, old: str | None, new: str, made: set[str]) -> bool:
    """Whether moving a ref from ``old`` to ``new`` brings in a commit of ``made``."""
    if not made:
        return False
    args = ["rev-list", new] + ([f"^{old}"] if old else [])
    done = git.run(*args, cwd=worktree, check=False)
    return done.returncode == 0 and any(c in made for c in done.stdout.split())


def _read_report(path: Path) -> RefGuard | None:
    try:
        return RefGuard.from_json(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _write_report(path: Path, guard: RefGuard) -> None:
    # A plan with moves is durable (save first, act second); a report of nothing need not be.
    write_atomic(path, json.dumps(guard.to_json()).encode(), durable=bool(guard.moves))


def _plan(git: Git, where: Path, worktree: Path, branch: str, task_ref: str, turn: int | str) -> RefGuard:
    doc = json.loads((where / SNAPSHOT).read_text())
    before: dict[str, str] = doc.get("refs") or {}
    since = float(doc.get("at") or 0)
    own = f"refs/heads/{branch}"
    files = doc.get("files") is True
    now: dict[str, str] | None = None
    watch = _take_watch(where, doc.get("command_id"))
    if watch is not None:  # this process took the snapshot: what changed since is known
        try:
            if files:
                now = watch.now()
        finally:
            watch.close()
    if now is None:
        now, _ = _values(git, worktree, files)
    changed = sorted(r for r in set(before) | set(now) if r != own and before.get(r) != now.get(r))
    if not changed:
        return RefGuard(hook=bool(doc.get("hooks")))
    logged = _logged(where / MOVES)
    made: set[str] | None = None
    moves: list[RefMove] = []
    others = 0
    for ref in changed:
        old, new = before.get(ref), now.get(ref)
        if ref.startswith(KEPT_PREFIX) and old is None and new is not None and ref not in logged:
            others += 1  # corral keeping something aside meanwhile (another turn, a chat)
            continue
        if ref in logged:
            if logged[ref] != (new or ""):  # someone moved it after the agent: theirs stands
                moves.append(RefMove(ref, old, new, "hook", None, False, "moved again after the agent; left as it is"))
                continue
            by = "hook"
        else:
            if new is None:
                others += 1  # a deletion carries no commits: only the hook can tell it was the agent's
                continue
            if made is None:
                made = _new_commits(git, worktree, _worktree_tips(git, worktree, branch, since), before)
            if not _carries(git, worktree, old, new, made) or _made_elsewhere(git, worktree, ref, new, since):
                others += 1
                continue
            by = "worktree-commits"
        kept = kept_ref(task_ref, turn, ref) if new is not None else None
        moves.append(RefMove(ref, old, new, by, kept, False))
    return RefGuard(tuple(moves[:MOVES_KEPT]), others, bool(doc.get("hooks")))


def _put_back(git: Git, worktree: Path, m: RefMove, label: str) -> RefMove:
    """Keep the agent's version (save first), then put the ref back with a compare-and-swap on it."""
    try:
        if m.kept is not None and m.after is not None:
            have = git.rev_parse(m.kept, cwd=worktree) if git.ref_exists(m.kept, cwd=worktree) else None
            if have is None:  # raises when it cannot be saved: nothing is put back unsaved
                git.run("update-ref", "-m", f"corral: kept from {label}", m.kept, m.after, _ZERO, cwd=worktree)
            elif have != m.after:
                return replace(m, error=f"{m.kept} already holds {have[:12]}; nothing put back")
            crashpoints.hit("ref-guard.kept")
        current = git.rev_parse(m.ref, cwd=worktree) if git.ref_exists(m.ref, cwd=worktree) else None
        if current == m.before:
            return replace(m, restored=True, error=None)  # a crash after the put-back: done already
        if current != m.after:
            return replace(m, error="moved again since the turn; left as it is")
        message = f"corral: put back after {label}"
        if m.before is None:
            done = git.run("update-ref", "-m", message, "-d", m.ref, m.after or "", cwd=worktree, check=False)
        else:
            old = m.after or _ZERO
            done = git.run("update-ref", "-m", message, m.ref, m.before, old, cwd=worktree, check=False)
        if done.returncode != 0:
            why = "; ".join(x.strip() for x in (done.stderr or done.stdout).strip().splitlines() if x.strip())
            return replace(m, error=(why or f"git update-ref exit {done.returncode}")[-300:])
        return replace(m, restored=True, error=None)
    except (GitError, OSError) as exc:
        return replace(m, error=str(exc)[:300])


def settle(
    git: Git, log_dir: Path | str, worktree: Path | str, branch: str, task_ref: str, turn: int | str
) -> RefGuard | None:
    """After a turn: the agent's moves of other refs found, kept and put back; None when the turn had no snapshot.

    Idempotent: a report already written is finished (its moves not yet put back are tried
    again) and returned, so the reconciler may call it for a turn whose supervisor died. Never
    raises: what it could not do is in the report's ``error`` (or a move's).
    """
    where, wt = guard_dir(log_dir), Path(worktree)
    if not (where / SNAPSHOT).is_file():
        return None
    report_path = where / REPORT
    label = f"turn {turn} of {task_ref}"
    try:
        guard = _read_report(report_path)
        if guard is None:
            guard = _plan(git, where, wt, branch, task_ref, turn)
            _write_report(report_path, guard)  # the plan first: a crash from here on is finished later
        if any(not m.restored and m.error is None for m in guard.moves):
            # From the main checkout: the person's hooks run for corral's move of their refs, and none
            # of the worktree's (a relative core.hooksPath there is the agent's).
            common = common_dir(wt)
            main = common.parent if common is not None and common.name == ".git" and common.parent.is_dir() else wt
            moves = tuple(m if m.restored or m.error else _put_back(git, main, m, label) for m in guard.moves)
            guard = replace(guard, moves=moves)
            _write_report(report_path, guard)
        return guard
    except (GitError, OSError, ValueError) as exc:
        return RefGuard(error=str(exc)[:300])


def for_command(git: Git, command: Any) -> RefGuard | None:
    """Everything checked after a supervisor's command (its log dir, worktree, branch, task and turn):
    the turn's quarantined objects verified and moved into the shared store, the other refs the
    agent moved put back (:func:`settle`), and the task's own branch checked
    (:mod:`corral.engine.runtime.branch_check`). Idempotent; never raises."""
    from corral.engine.runtime import branch_check

    spec = getattr(command, "sandbox", None)
    common = getattr(spec, "git_common_dir", None) if spec is not None and spec.confined else None
    read_only = bool(getattr(getattr(command, "posture", None), "read_only", False))
    objects, branch, error = branch_check.after_confined(
        git,
        command.worktree,
        common_dir=common if not read_only else None,
        quarantine_id=command.command_id if common and not read_only else None,
        task_ref=command.task_ref,
        branch=command.branch,
        target=getattr(command, "target", None),
        turn=command.sequence,
    )
    guard = settle(git, command.log_dir, command.worktree, command.branch, command.task_ref, command.sequence)
    if objects is None and branch is None and error is None:
        return guard
    guard = guard or RefGuard()
    return replace(
        guard,
        moves=(*([branch] if branch else []), *guard.moves),
        objects=objects.to_json() if objects is not None else guard.objects,
        error=guard.error or error,
    )
