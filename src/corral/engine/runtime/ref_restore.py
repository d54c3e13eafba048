"""After the agent: each ref that moved is attributed (the agent's, or someone else's), the agent's
version kept on ``refs/corral/kept/…`` and the ref put back — save first, act second, so a second
:func:`settle` after a crash finishes the plan and returns the same report.

How a turn goes, and how a move is attributed, is ``runtime/ref_guard``'s note.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from corral import crashpoints
from corral.adapters.files import write_atomic
from corral.adapters.git import Git
from corral.adapters.ref_files import common_dir
from corral.engine.runtime.ref_guard import (
    KEPT_PREFIX,
    MOVES,
    MOVES_KEPT,
    REPORT,
    SNAPSHOT,
    ZERO,
    RefGuard,
    RefMove,
    guard_dir,
    kept_ref,
)
from corral.engine.runtime.ref_snapshot import ref_values, take_watch
from corral.errors import GitError


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
            last[parts[2]] = "" if parts[1] == ZERO else parts[1]
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


class _Elsewhere:
    """Whether a ref the agent moved was moved in another worktree instead: git's worktree list read
    once per plan, and each other worktree's ``HEAD`` reflog once, however many refs are asked about
    (an agent that leaves thousands of refs would otherwise cost two processes each)."""

    def __init__(self, git: Git, worktree: Path, since: float) -> None:
        self.git, self.worktree, self.since = git, worktree, since
        self._checked_out: dict[str, list[str]] | None = None
        self._took: dict[str, list[str]] = {}

    def checked_out(self) -> dict[str, list[str]]:
        """branch ref → the other worktrees that have it checked out."""
        if self._checked_out is None:
            out = self.git.run("worktree", "list", "--porcelain", "-z", cwd=self.worktree, check=False).stdout
            here = os.path.realpath(self.worktree)
            found: dict[str, list[str]] = {}
            path: str | None = None
            for line in out.split("\0"):  # -z: a path git would quote is given as it is
                if line.startswith("worktree "):
                    path = line.removeprefix("worktree ")
                elif line.startswith("branch ") and path and os.path.realpath(path) != here:
                    found.setdefault(line.removeprefix("branch "), []).append(path)
            self._checked_out = found
        return self._checked_out

    def made(self, ref: str, new: str) -> bool:
        """Whether ``ref`` is checked out in another worktree whose ``HEAD`` took ``new`` during the turn:
        a commit, merge or sync made there (corral's sync of another task, a person in their checkout,
        the worktree ``start`` made for a subtask) — git logs the other worktree's ``HEAD`` only then."""
        for path in self.checked_out().get(ref, ()):
            if not os.path.isdir(path):
                continue
            if path not in self._took:
                self._took[path] = _head_took(self.git, path, self.since)
            return new in self._took[path]
        return False


def _new_commits(git: Git, worktree: Path, tips: list[str], before: Mapping[str, str]) -> set[str]:
    """Commits reachable from ``tips`` and from no ref of the snapshot."""
    if not tips:
        return set()
    stdin = "\n".join([*tips, *(f"^{sha}" for sha in set(before.values()))]) + "\n"
    done = git.run("rev-list", "--stdin", cwd=worktree, input=stdin, check=False)
    return set(done.stdout.split()) if done.returncode == 0 else set()


class _Carries:
    """Whether moving a ref from ``old`` to ``new`` brings in a commit of ``made``: one ``rev-list``
    per distinct move, so the thousand refs an agent points at one commit cost one process."""

    def __init__(self, git: Git, worktree: Path, made: set[str]) -> None:
        self.git, self.worktree, self.made = git, worktree, made
        self._known: dict[tuple[str | None, str], bool] = {}

    def __call__(self, old: str | None, new: str) -> bool:
        if not self.made:
            return False
        if (old, new) not in self._known:
            args = ["rev-list", new] + ([f"^{old}"] if old else [])
            done = self.git.run(*args, cwd=self.worktree, check=False)
            self._known[old, new] = done.returncode == 0 and any(c in self.made for c in done.stdout.split())
        return self._known[old, new]


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
    watch = take_watch(where, doc.get("command_id"))
    if watch is not None:  # this process took the snapshot: what changed since is known
        try:
            if files:
                now = watch.now()
        finally:
            watch.close()
    if now is None:
        now, _ = ref_values(git, worktree, files)
    changed = sorted(r for r in set(before) | set(now) if r != own and before.get(r) != now.get(r))
    if not changed:
        return RefGuard(hook=bool(doc.get("hooks")))
    logged = _logged(where / MOVES)
    carries: _Carries | None = None
    elsewhere = _Elsewhere(git, worktree, since)
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
            if carries is None:
                made = _new_commits(git, worktree, _worktree_tips(git, worktree, branch, since), before)
                carries = _Carries(git, worktree, made)
            if not carries(old, new) or elsewhere.made(ref, new):
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
                git.run("update-ref", "-m", f"corral: kept from {label}", m.kept, m.after, ZERO, cwd=worktree)
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
            old = m.after or ZERO
            done = git.run("update-ref", "-m", message, m.ref, m.before, old, cwd=worktree, check=False)
        if done.returncode != 0:
            why = "; ".join(x.strip() for x in (done.stderr or done.stdout).strip().splitlines() if x.strip())
            return replace(m, error=(why or f"git update-ref exit {done.returncode}")[-300:])
        return replace(m, restored=True, error=None)
    except (GitError, OSError) as exc:
        return replace(m, error=str(exc)[:300])


def _put_back_all(git: Git, main: Path, moves: tuple[RefMove, ...], label: str) -> tuple[RefMove, ...]:
    """Every move not yet put back, put back as :func:`_put_back` does one, in three git processes
    however many there are: the refs read in one ``for-each-ref``, the agent's versions kept in one
    ``update-ref --stdin`` transaction, the refs put back in another, each line a compare-and-swap
    (``create`` where nothing may be, ``update``/``delete`` against the agent's value). A move the
    fast way cannot take as it is (a symbolic ref, a tag, a kept ref already there), and every move
    of a transaction git refuses, goes the one-at-a-time way, which says for each what stood in it."""
    todo = [m for m in moves if not (m.restored or m.error)]
    if not todo:
        return moves
    values = _commit_values(git, main, [name for m in todo for name in (m.ref, m.kept) if name])
    slow: list[RefMove] = []
    keep: list[RefMove] = []
    for m in todo:
        if values is None or m.ref in values.odd or (m.kept is not None and m.kept in values.all):
            slow.append(m)
        else:
            keep.append(m)
    done: dict[str, RefMove] = {}
    creates = "".join(f"create {m.kept}\0{m.after}\0" for m in keep if m.kept is not None and m.after is not None)
    if creates and not _transaction(git, main, f"corral: kept from {label}", creates):
        slow += keep  # nothing was kept: each is tried alone, and says what stopped it
        keep = []
    back: list[RefMove] = []
    for m in keep:
        if m.kept is not None and m.after is not None:
            crashpoints.hit("ref-guard.kept")
        current = values.commits.get(m.ref) if values is not None else None
        if current == m.before:
            done[m.ref] = replace(m, restored=True, error=None)  # put back already
        elif current != m.after:
            done[m.ref] = replace(m, error="moved again since the turn; left as it is")
        else:
            back.append(m)
    lines = "".join(
        f"delete {m.ref}\0{m.after or ''}\0" if m.before is None else f"update {m.ref}\0{m.before}\0{m.after or ZERO}\0"
        for m in back
    )
    if lines and _transaction(git, main, f"corral: put back after {label}", lines):
        done.update((m.ref, replace(m, restored=True, error=None)) for m in back)
    else:
        slow += back  # kept already: the one-at-a-time way finds them kept and puts each back
    done.update((m.ref, _put_back(git, main, m, label)) for m in slow)
    return tuple(done.get(m.ref, m) if not (m.restored or m.error) else m for m in moves)


class _Values(Struct, frozen=True):
    """What :func:`_commit_values` read: each listed ref's commit, and the refs read otherwise."""

    all: frozenset[str]
    commits: dict[str, str]
    odd: frozenset[str]  # a symbolic ref, or one that names no commit (a tag): read one at a time


def _commit_values(git: Git, where: Path, names: list[str]) -> _Values | None:
    """``names`` read in one ``for-each-ref``; None when git could not list them."""
    wanted = set(names)
    listed = git.run(
        "for-each-ref", "--format=%(refname)%00%(objectname)%00%(objecttype)%00%(symref)", *sorted(wanted),
        cwd=where, check=False,
    )  # fmt: skip
    if listed.returncode != 0:
        return None
    found: set[str] = set()
    commits: dict[str, str] = {}
    odd: set[str] = set()
    for line in listed.stdout.splitlines():
        fields = line.split("\0")
        if len(fields) != 4 or fields[0] not in wanted:
            continue  # a ref below a wanted name (for-each-ref matches prefixes)
        name, oid, kind, symref = fields
        found.add(name)
        if symref or kind != "commit":
            odd.add(name)
        else:
            commits[name] = oid
    return _Values(frozenset(found), commits, frozenset(odd))


def _transaction(git: Git, where: Path, message: str, lines: str) -> bool:
    """``lines`` (``update-ref --stdin -z``) as one transaction: all of it done, or none (False)."""
    return git.run("update-ref", "-m", message, "-z", "--stdin", cwd=where, input=lines, check=False).returncode == 0


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
            guard = replace(guard, moves=_put_back_all(git, main, guard.moves, label))
            _write_report(report_path, guard)
        return guard
    except (GitError, OSError, ValueError) as exc:
        return RefGuard(error=str(exc)[:300])


def for_command(
    git: Git,
    command: Any,
    seen: dict[str, str] | None = None,
    staged: Callable[[str], set[str] | None] | None = None,
) -> RefGuard | None:
    """Everything checked after a supervisor's command (its log dir, worktree, branch, task and turn):
    the turn's quarantined objects verified and moved into the shared store, the other refs the
    agent moved put back (:func:`settle`), and the task's own branch checked
    (:mod:`corral.engine.runtime.branch_check`). Idempotent; never raises. ``seen``: given, it gains
    ``tip``, the branch's commit as its check read it, when the branch was found sound. ``staged``: the
    worktree's index is checked from the turn's one scan (``GitProbe.staged_against``)."""
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
        # The turn's start, as corral recorded it in the command: its width is the repository's format.
        object_format=branch_check.object_format_of(getattr(command, "git_start_sha", None)),
        seen=seen,
        staged=staged,
    )
    guard = settle(git, command.log_dir, command.worktree, command.branch, command.task_ref, command.sequence)
    if objects is None and branch is None and error is None:
        return guard
    guard = guard or RefGuard()
    return replace(
        guard,
        moves=(*([branch] if branch else []), *guard.moves),
        objects=objects.as_summary() if objects is not None else guard.objects,
        error=guard.error or error,
    )
