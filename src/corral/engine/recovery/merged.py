"""The merged-branch sweep: a resting task whose work is already on its target completes (zombie → complete)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from corral.adapters.files import read_bounded, write_atomic
from corral.adapters.ref_files import common_dir, read_refs
from corral.domain.actors import Role
from corral.domain.records import Session, Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.recovery.merges import complete_merged
from corral.engine.workspace import target_branch

#: The statuses whose work may have been merged by hand while corral looked away; and zombie, in
#: which a task whose completion was cut short would otherwise stay (zombie → zombie is a no-op).
SWEPT = (Status.BLOCKED, Status.CONFLICT, Status.INTERRUPTED, Status.SUBMITTED, Status.ZOMBIE)

#: A branch's moves as its reflog lists them: (new value, unix time, subject), newest first.
Moves = list[tuple[str, int, str]]


def sweep_merged_branches(project: Project) -> int:
    """A resting task whose work is already on its target → zombie → complete; returns how many.

    A task with no agent turn is never completed: it did no work (docs/lifecycle.md).

    Merged means: the branch has commits beyond its session's base and the target contains
    the tip — the target took the task's work, not the branch the target's, and no uncommitted
    work waits in the worktree — or the target carries a commit whose trailers name this task
    and its current session. (Upstream is merged into a task branch with ``--no-ff``, so a branch that
    only took in its target never looks merged: its merge commit is not on the target.)

    Only resting tasks are looked at, and only when their branch, their target or their session
    changed since the last look, so a pass stays cheap: the tips are read from the ref files, and a
    pass where none moved starts no git process. Git is asked once per target that moved, never once
    per task: one ``rev-list`` of the commits the target gained since the tip its branches were last
    found not on (or, for branches seen for the first time, one ``for-each-ref --merged``) says which
    task branches the target contains, and one ``log`` reads the target's trailers, however many tasks
    rest on it (and none where every task due had that target tip's trailers read at its last look).

    What was seen is kept for the current candidates and for the active tasks that were one: a
    crash → resume takes a task working → interrupted → working → blocked, and each time it rests
    again with nothing moved, git's answer is the one already found. Only a plain "not on the
    target" outlives the rest it was found in (it depends on the two tips and the session alone); a
    veto (uncommitted work, no agent turn, a follow of the target) may not hold after a turn, so such
    a task is looked at again when it next rests. A task that ended is forgotten, so the file never
    outgrows the live tasks.
    """
    with project.store.read() as tx:
        resting = [t for t in tx.tasks(SWEPT) if t.session_id]
        targets = {t.id: target_branch(tx, t) for t in resting}
    seen_path = project.paths.merged_sweep  # per task, the (target tip, branch tip, session) last found unmerged
    seen = _read_seen(seen_path)
    candidates = {t.id for t in resting}
    fresh: dict[str, str] = {}
    if any(k not in candidates for k in seen):  # a task it remembers is no longer resting: is it active?
        with project.store.read() as tx:
            active = {h.id for h in tx.task_heads(CARRIED)}
        # What an active task (between two rests) keeps: a plain "not on the target", never a veto.
        fresh = {k: v for k, v in seen.items() if k in active and k not in candidates and not v.endswith(HELD)}
    if not resting:
        if fresh != seen:
            _write_seen(seen_path, fresh)
        return 0
    git, repo = project.git, project.repo
    tips = _branch_tips(project)

    # Who must be looked at again: a branch, a target or a session that changed since the last look.
    # A task is in ``seen`` only once its session was found with a base, so only those due need it.
    moved: list[tuple[Task, str | None, str, str]] = []
    for task in resting:
        tip, target_tip = tips.get(task.branch), tips.get(targets[task.id])
        if target_tip is None:
            continue
        key = _key(target_tip, tip, task.session_id or "")
        if seen.get(task.id) in (key, key + HELD):
            fresh[task.id] = seen[task.id]
            continue
        moved.append((task, tip, target_tip, key))
    due: list[tuple[Task, Session, str | None, str, str]] = []
    if moved:
        with project.store.read() as tx:
            sessions = tx.sessions_by_id(t.session_id for t, *_ in moved if t.session_id)
        for task, tip, target_tip, key in moved:
            session = sessions.get(task.session_id or "")
            if session is not None and session.base_commit:
                due.append((task, session, tip, target_tip, key))

    # One question per target tip: which of the due branches does it contain? A branch last found
    # not on an earlier tip of its target is on the new one only if it is among the commits the
    # target gained since: one ``rev-list`` of those (a commit or a few, where the target moved on),
    # not a walk from the new tip for every branch.
    ahead: dict[str, list[str]] = {}
    gaining: dict[tuple[str, str], list[str]] = {}  # (earlier target tip, new one) → branches not on the earlier
    for task, session, tip, target_tip, _ in due:
        if tip is None or tip == session.base_commit:
            continue
        earlier = _unmerged_at(seen.get(task.id), tip, session.id)
        if earlier is not None:
            gaining.setdefault((earlier, target_tip), []).append(task.branch)
        else:
            ahead.setdefault(target_tip, []).append(task.branch)
    contained: dict[str, dict[str, str]] = {}
    for (earlier, target_tip), branches in gaining.items():
        gained = _gained(project, earlier, target_tip)
        if gained is None:  # too many, or the earlier tip is gone: asked as any other
            ahead.setdefault(target_tip, []).extend(branches)
            continue
        on = contained.setdefault(target_tip, {})
        on.update((b, tips[b]) for b in branches if tips[b] in gained)
    for target_tip, branches in ahead.items():
        contained.setdefault(target_tip, {}).update(_tips(project, _patterns(branches), merged=target_tip))

    trailers: dict[str, set[tuple[str, str]]] = {}
    reflogs: dict[str, Moves] = {}  # a branch's moves, read once a pass
    completed = 0
    for task, session, tip, target_tip, key in due:
        # The tip must be the one read above: a branch that moved in between is looked at next pass.
        merged = (
            tip is not None and tip != session.base_commit and contained.get(target_tip, {}).get(task.branch) == tip
        )
        if merged and tip is not None and not _own_work_landed(project, task, session, targets[task.id], tip, reflogs):
            fresh[task.id] = key + HELD
            continue
        if not merged and not _trailers_read(seen.get(task.id), target_tip, session.id):
            if target_tip not in trailers:
                found = git.trailers(target_tip, cwd=repo, limit=500)
                trailers[target_tip] = {(t["task"], t["session"]) for t in found}
            merged = (task.id, session.id) in trailers[target_tip]
        vetoed = False
        if merged and _agent_moved_target(project, task, session, targets[task.id]):
            vetoed = True  # the agent put its work there itself: never a completion (docs/lifecycle.md)
        elif merged and not _agent_answered(project, task):
            vetoed = True  # no agent turn, no agent work: what is on the target is a person's, not the task's
        if merged and not vetoed:
            complete_merged(project, task, session, "its work is on its target")
            completed += 1
        else:
            fresh[task.id] = key + HELD if vetoed else key
    if fresh != seen:  # an unchanged pass writes nothing
        _write_seen(seen_path, fresh)
    return completed


#: The active statuses a task passes through between two rests: what it was last found is kept meanwhile.
CARRIED = (Status.WORKING, Status.PAIRING, Status.MERGING)
#: Marks a memory whose merged-looking work was vetoed (see :func:`sweep_merged_branches`): kept only at rest.
HELD = ":held"


def _key(target_tip: str, tip: str | None, session_id: str) -> str:
    """What a look depends on: the target's tip, the branch's (None: no branch), the task's session."""
    return f"{target_tip}:{tip}:{session_id}"


def _unmerged(last: str | None) -> tuple[str, str, str] | None:
    """The (target tip, branch tip, session) of a plain "not on the target" remembered; None for a
    veto, for nothing remembered, or for a memory of another form."""
    parts = last.split(":") if last is not None and not last.endswith(HELD) else []
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def _trailers_read(last: str | None, target_tip: str, session_id: str) -> bool:
    """Whether the last look already found that ``target_tip``'s trailers do not name this session:
    a plain "not on the target" at the same target tip and session (only the branch moved since)."""
    found = _unmerged(last)
    return found is not None and found[0] == target_tip and found[2] == session_id


def _unmerged_at(last: str | None, tip: str, session_id: str) -> str | None:
    """The earlier target tip the last look found not to contain ``tip`` (this session's, unmoved since)."""
    found = _unmerged(last)
    return found[0] if found is not None and found[1] == tip and found[2] == session_id else None


#: More commits than this gained by a target since the last look: its branches are asked as at a first look.
GAINED_MAX = 10_000


def _gained(project: Project, earlier: str, now: str) -> set[str] | None:
    """The commits ``now`` holds that ``earlier`` does not (what the target gained since the last look);
    None when they are more than :data:`GAINED_MAX` or git cannot say (the earlier tip is gone).

    A commit ``earlier`` does not contain is contained by ``now`` exactly when it is one of these,
    whether the target moved on, was reset back, or was replaced by another history."""
    done = project.git.run(
        "rev-list", f"--max-count={GAINED_MAX}", now, f"^{earlier}", "--", cwd=project.repo, check=False
    )
    gained = set(done.stdout.split())
    return gained if done.returncode == 0 and len(gained) < GAINED_MAX else None


#: The sweep's memory holds one short line per resting task: far below this.
SEEN_MAX_BYTES = 16 * 1024 * 1024


def _read_seen(path: Path) -> dict[str, str]:
    """What the last pass found unmerged (a lost or unreadable memory only costs a fresh look)."""
    raw, _problem, _size = read_bounded(path, SEEN_MAX_BYTES)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _write_seen(path: Path, seen: dict[str, str]) -> None:
    write_atomic(path, json.dumps(seen).encode(), durable=False)  # a cache: a crash only costs a look


def _own_work_landed(
    project: Project, task: Task, session: Session, target: str, tip: str, reflogs: dict[str, Moves]
) -> bool:
    """Whether a branch the target contains got there by the target taking the task's work, not by
    the task's branch taking the target's (a fast-forward onto the moved target is no merge).

    The branch's own reflog says how it reached its tip: a fast-forward or a reset to the target is
    following it. Otherwise the target must have reached the tip no earlier than the branch did
    (when neither log says, the work counts as the task's). And uncommitted work in the task's
    worktree is never swept away: a task with any stays as it is.
    """
    git = project.git
    worktree = Path(session.worktree) if session.worktree else None
    if worktree is not None and worktree.is_dir() and git.dirty_paths(worktree):
        return False
    branch_moves = _reflog(project, task.branch, reflogs)
    reached = [(when, subject) for sha, when, subject in branch_moves if sha == tip]
    if reached:
        first_when, first_subject = reached[-1]  # the log lists newest first
        if _follows(first_subject, target):
            return False
        target_reached = [when for sha, when, _ in _reflog(project, target, reflogs) if sha == tip]
        if target_reached and target_reached[-1] < first_when:
            return False
    return True


def _agent_answered(project: Project, task: Task) -> bool:
    """Whether any agent turn of the task was recorded: a task with none has done no work to
    complete, whatever a person committed on its branch or merged into its target."""
    with project.store.read() as tx:
        return any(t.role is Role.AGENT for t in tx.turns(task.id))


def _agent_moved_target(project: Project, task: Task, session: Session, target: str) -> bool:
    """Whether a turn of this session had its agent move ``target`` and the move still stands: its
    put-back did not finish, or the target still holds what the agent left.

    Read from each turn's recorded receipt (``details.refs``) and, for a turn recorded without it
    (its supervisor died before the receipt), from the ref guard's own files in the turn's log
    directory, finishing an interrupted put-back there first (``ref_restore.settle`` is idempotent).
    """
    from corral.engine.runtime import ref_guard, ref_restore, ref_wording  # only a merged-looking task pays for it

    with project.store.read() as tx:
        turns = [t for t in tx.turns(task.id) if t.session_id == session.id]
    tip = project.git.rev_parse(f"refs/heads/{target}", cwd=project.repo)  # before a put-back finished below
    reports: list[ref_guard.RefGuard] = []
    recorded: set[str] = set()
    for t in turns:
        refs = t.details.get("refs") if t.role is Role.AGENT and t.details else None
        if isinstance(refs, dict):
            try:
                reports.append(ref_guard.RefGuard.from_json(refs))
            except ValueError:
                continue
            if t.command_id:
                recorded.add(t.command_id)
    for t in turns:
        if t.role is not Role.HUMAN or t.command_id in recorded or not session.worktree:
            continue
        log_dir = project.paths.turn_dir(task.id, t.sequence)
        branch = session.branch or task.branch
        found = ref_restore.settle(project.git, log_dir, session.worktree, branch, task.ref, t.sequence)
        if found is not None:
            reports.append(found)
    for report in reports:
        move = ref_wording.target_moved(report, target)
        if move is not None and (not move.restored or tip == move.after):
            return True
    return False


def _follows(subject: str, target: str) -> bool:
    """A reflog subject that says the branch moved to its target: ``merge main: Fast-forward``,
    ``reset: moving to main``, ``pull … Fast-forward``, ``rebase … (finish)`` onto it."""
    names = (target, f"refs/heads/{target}", f"heads/{target}")
    if subject.startswith("reset: moving to "):
        return subject.removeprefix("reset: moving to ").strip() in names
    if "Fast-forward" in subject and subject.startswith(("merge ", "pull")):
        head = subject.split(":", 1)[0]
        return any(head.endswith(f" {name}") for name in names) or subject.startswith("pull")
    return False


def _reflog(project: Project, branch: str, known: dict[str, Moves]) -> Moves:
    """(new value, unix time, subject) of each move of ``branch``, newest first; empty without a reflog.

    Read once a pass (``known``): several tasks contained by one target read the target's log once."""
    if branch in known:
        return known[branch]
    out = project.git.run(
        "log",
        "-g",
        "--date=unix",
        "--format=%H%x1f%gd%x1f%gs",
        f"refs/heads/{branch}",
        "--",
        cwd=project.repo,
        check=False,
    ).stdout
    moves = []
    for line in out.splitlines():
        sha, _, rest = line.partition("\x1f")
        selector, _, subject = rest.partition("\x1f")
        when = selector.rpartition("@{")[2].rstrip("}")
        if when.isdigit():
            moves.append((sha, int(when), subject))
    known[branch] = moves
    return moves


def _branch_tips(project: Project) -> dict[str, str]:
    """Branch name → tip for every branch, read from the repository's files (no git process: this runs
    at every read that settles), or asked of git where the files are not the whole story."""
    found = read_refs(common_dir(project.repo), (), under="refs/heads")
    if found is None:
        return _tips(project, ["refs/heads"])
    return {ref.removeprefix("refs/heads/"): sha for ref, sha in found.items()}


def _tips(project: Project, patterns: Iterable[str], *, merged: str | None = None) -> dict[str, str]:
    """Branch name → tip for the branches under ``patterns`` (only those ``merged`` contains, if given)."""
    args = ["for-each-ref", "--format=%(objectname) %(refname)"]
    if merged is not None:
        args.append(f"--merged={merged}")
    out = project.git.run(*args, *patterns, cwd=project.repo, check=False).stdout
    tips: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, name = line.partition(" ")
        tips[name.removeprefix("refs/heads/")] = sha
    return tips


def _patterns(branches: Iterable[str]) -> list[str]:
    """for-each-ref patterns covering these branches: the directory of each (``corral/x`` →
    ``refs/heads/corral/``), so a thousand branches are one pattern, not a thousand."""
    return sorted({f"refs/heads/{b.partition('/')[0]}/" if "/" in b else f"refs/heads/{b}" for b in branches})
