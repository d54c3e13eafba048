"""A task's branch is checked after every confined turn, and put back when it is not what corral can trust.

The branch ``refs/heads/corral/<ref>`` is the one ref a confined agent can write (its file is in
a writable directory). So after the turn, before anything unconfined follows it, corral asks:

- is it a plain ref (never a symbolic ref), pointing at a commit?
- is every commit in ``verified..tip`` (``--not`` the target) new in this turn — it came
  through the turn's quarantine and passed its check (:mod:`corral.engine.runtime.quarantine`)?
  A commit already in the store that is neither in the last verified tip nor on the target
  (another task's tip, an older commit of its own) is not the agent's to take;
- are its objects complete (every tree and blob of the new commits there)?

A branch that passes becomes the new verified tip, kept on ``refs/corral/verified/<ref>``
(outside anything the sandbox can write). One that fails is put back to the verified tip with
a compare-and-swap on the agent's value (``--no-deref``: a symbolic ref is replaced, never
followed), the agent's version kept on ``refs/corral/kept/<ref>/<turn>-<branch>`` when it is a
whole commit, and the finding is a move of the ref guard's report with its ``code``, which
``show`` explains (:func:`corral.engine.runtime.ref_wording.move_line`).

A turn with no quarantine (the sandbox off: an agent that runs as the person can do anything
the person can) is checked for the shape only: a symbolic ref or a ref that holds no commit is
put back; its commits are trusted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from corral.adapters import tip_files
from corral.adapters.git import Git
from corral.engine.runtime import quarantine
from corral.engine.runtime.ref_guard import RefMove, kept_ref
from corral.errors import GitError

VERIFIED_PREFIX = "refs/corral/verified/"
BY = "branch-check"
_ZERO = "0" * 40

#: The findings, each a code a move carries (its wording: ``ref_wording.move_line``).
SYMREF = "branch-symref"
NOT_A_COMMIT = "branch-not-a-commit"
MISSING = "branch-missing"
FOREIGN = "branch-foreign-commits"
INCOMPLETE = "branch-objects-incomplete"
REJECTED = "branch-objects-rejected"


def verified_ref(task_ref: str) -> str:
    return f"{VERIFIED_PREFIX}{task_ref}"


def verified_tip(git: Git, repo: str | Path, task_ref: str) -> str | None:
    """The last tip of the task's branch that corral verified (None: none recorded yet)."""
    return git.rev_parse(verified_ref(task_ref), cwd=repo)


def mark_verified(git: Git, repo: str | Path, task_ref: str, tip: str, old: str | None = None) -> None:
    """Record ``tip`` as the branch's verified tip (corral's own move of the branch, or a check passed)."""
    git.update_ref(verified_ref(task_ref), tip, cwd=repo, old=old)


def _shape(git: Git, repo: str | Path, ref: str) -> tuple[str | None, str | None, str | None]:
    """(problem code, the ref's own value as text, the commit it holds) — never following a symbolic ref."""
    sym = git.run("symbolic-ref", "--quiet", ref, cwd=repo, check=False)
    if sym.returncode == 0:
        return SYMREF, f"ref: {sym.stdout.strip()[:200]}", None
    found = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", ref, cwd=repo, check=False)
    value = found.stdout.strip()
    if found.returncode != 0 or not value:
        return MISSING, None, None
    kind = git.run("cat-file", "-t", value, cwd=repo, check=False).stdout.strip()
    if kind != "commit":
        return NOT_A_COMMIT, value, None
    return None, value, value


def _beyond(git: Git, repo: str | Path, tip: str, verified: str, target: str | None) -> tuple[list[str], bool]:
    """The commits of ``tip`` in neither ``verified`` nor the target, and whether every object they
    reach is there (``rev-list --objects --missing=print``)."""
    nots = [verified, *([target] if target else [])]
    listed = git.run("rev-list", "--objects", "--missing=print", tip, "--not", *nots, cwd=repo, check=False)
    complete = listed.returncode == 0 and not any(line.startswith("?") for line in listed.stdout.splitlines())
    commits = git.run("rev-list", tip, "--not", *nots, cwd=repo, check=False)
    return [c for c in commits.stdout.split() if c], complete and commits.returncode == 0


_FORMAT = "--format=%(refname)%00%(objectname)%00%(objecttype)%00%(symref)"


def _read(git: Git, repo: str | Path, names: list[str]) -> dict[str, tuple[str, str, str]]:
    """name → (object, its type, the ref a symbolic ref names) of each of ``names`` that git lists,
    in one process; a broken ref (an object that is not there) is not listed."""
    done = git.run("for-each-ref", _FORMAT, *names, cwd=repo, check=False)
    if done.returncode != 0:  # one ref's object is missing ("fatal: missing object"): each is read alone
        found = {}
        for name in names:
            value = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", name, cwd=repo, check=False)
            oid = value.stdout.strip()
            if value.returncode == 0 and oid:
                kind = git.run("cat-file", "-t", oid, cwd=repo, check=False).stdout.strip()
                sym = git.run("symbolic-ref", "--quiet", name, cwd=repo, check=False).stdout.strip()
                found[name] = (oid, kind, sym)
        return found
    found = {}
    for line in done.stdout.split("\n"):
        parts = line.split("\0")
        if len(parts) == 4 and parts[0] in names:
            found[parts[0]] = (parts[1], parts[2], parts[3])
    return found


def _foreign(
    git: Git, repo: str | Path, tip: str, verified: str, target: str | None, objects: quarantine.ObjectsReport
) -> bool:
    """Whether ``tip`` reaches a commit that is neither new in this turn (its quarantine's), nor in
    the verified tip, nor on the target. Walked through the new commits' parents as the quarantine
    read them; only the few commits where the walk leaves the new ones are asked of git."""
    new = set(objects.commits)
    parents = dict(objects.parents)
    stops = {verified, *([target] if target else [])}
    boundary: set[str] = set()
    stack, seen = [tip], set()
    while stack:
        commit = stack.pop()
        if commit in seen or commit in stops:
            continue
        seen.add(commit)
        if commit in new:
            stack.extend(parents.get(commit, ()))
        else:
            boundary.add(commit)
    return any(not any(git.is_ancestor(commit, stop, cwd=repo) for stop in stops) for commit in boundary)


def check(
    git: Git,
    repo: str | Path,
    *,
    task_ref: str,
    branch: str,
    target: str | None,
    turn: int | str,
    objects: quarantine.ObjectsReport | None,
    confined: bool,
) -> tuple[RefMove | None, str | None]:
    """Check the task's branch after a turn: (None when it is sound and now verified, else what was done;
    the branch's commit when it was found sound, read after the turn, as it is now).

    ``confined``: the turn's objects came through a quarantine (``objects``: what it held, None when
    it held nothing), so its new commits are known; otherwise only the ref's shape is checked.
    Objects that failed the quarantine's check put back whatever the agent left. Idempotent.
    """
    ref = f"refs/heads/{branch}"
    target_ref = (target if target.startswith("refs/") else f"refs/heads/{target}") if target else None
    listed = _read(git, repo, [ref, verified_ref(task_ref), *([target_ref] if target_ref else [])])
    verified = listed[verified_ref(task_ref)][0] if verified_ref(task_ref) in listed else None
    target_tip = listed[target_ref][0] if target_ref and target_ref in listed else None
    own = listed.get(ref)
    code: str | None
    raw: str | None
    tip: str | None
    if own is not None and not own[2] and own[1] == "commit":
        code, raw, tip = None, own[0], own[0]
    else:
        code, raw, tip = _shape(git, repo, ref)  # the rare case: said exactly
    if verified is None:
        if code is None and tip is not None:
            mark_verified(git, repo, task_ref, tip)  # the first look: what corral itself made
            return None, tip
        return None, None
    rejected = objects is not None and not objects.ok
    if rejected and code in (None, NOT_A_COMMIT) and raw != verified:
        code = REJECTED  # the agent's commits did not reach the store: whatever it left goes back
    if code is None and tip is not None:
        if tip == verified:
            return None, tip
        if confined:
            report = objects or quarantine.ObjectsReport(complete=True)
            if report.complete is None:  # a pack came in: git walks the new commits' objects
                commits, complete = _beyond(git, repo, tip, verified, target_tip)
                new = set(report.commits)
                code = INCOMPLETE if not complete else (FOREIGN if any(c not in new for c in commits) else None)
            elif not report.complete:
                code = INCOMPLETE
            elif _foreign(git, repo, tip, verified, target_tip, report):
                code = FOREIGN
        if code is None:
            mark_verified(git, repo, task_ref, tip, old=verified)
            return None, tip
    return _put_back(git, repo, task_ref, branch, turn, code or MISSING, raw, tip, verified), None


def _put_back(
    git: Git,
    repo: str | Path,
    task_ref: str,
    branch: str,
    turn: int | str,
    code: str,
    raw: str | None,
    tip: str | None,
    verified: str,
) -> RefMove:
    ref = f"refs/heads/{branch}"
    kept = None
    try:
        _drop_own_lock(git, repo, ref)
        if tip is not None and code not in (INCOMPLETE, REJECTED):
            kept = kept_ref(task_ref, turn, ref)
            git.update_ref(kept, tip, cwd=repo, message=f"corral: {branch} as the agent left it ({code})")
        if code == SYMREF:
            git.run("update-ref", "--no-deref", "-m", f"corral: {code}", ref, verified, cwd=repo)
        else:
            old = raw if raw else _ZERO  # the agent's value exactly: someone's later move is never undone
            git.run("update-ref", "--no-deref", "-m", f"corral: {code}", ref, verified, old, cwd=repo)
    except GitError as exc:
        return RefMove(ref, verified, raw, BY, kept, False, exc.message[:300], code=code)
    return RefMove(ref, verified, raw, BY, kept, True, None, code=code)


def _drop_own_lock(git: Git, repo: str | Path, ref: str) -> None:
    """The branch's own ``<ref>.lock`` the agent left (its processes are gone, and no corral step
    runs on the branch during a turn) would make the put-back fail: removed when it is a plain file.
    Every other stray is the sweep's (``corral.engine.runtime.stray_refs``, when the turn is recorded)."""
    import os
    import stat

    common = git.out("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo)
    lock = Path(common, ref + ".lock")
    try:
        if stat.S_ISREG(os.lstat(lock).st_mode):
            os.unlink(lock)
    except FileNotFoundError:
        pass


def ensure(git: Git, repo: str | Path, branch: str) -> RefMove | None:
    """Before corral follows a task's branch (``corral/<ref>``) unconfined — saving work, a revert,
    a merge —: its shape checked, and a symbolic ref or a ref holding no commit put back to the
    verified tip."""
    task_ref = branch.removeprefix("corral/")
    code, raw, _tip = _shape(git, repo, f"refs/heads/{branch}")
    if code not in (SYMREF, NOT_A_COMMIT):
        return None
    verified = verified_tip(git, repo, task_ref)
    if verified is None:
        raise GitError(
            f"The branch {branch} is not a plain ref to a commit ({raw}), and corral has no verified tip to put back.",
            hint=f"Point it at a commit by hand: git update-ref --no-deref refs/heads/{branch} and the commit's id",
        )
    return _put_back(git, repo, task_ref, branch, "check", code or SYMREF, raw, None, verified)


def begin(git: Git, repo: str | Path, task_ref: str, branch: str, known: Start | None = None) -> None:
    """Before the agent starts (after corral's own merge of the target): the branch as corral leaves
    it is the verified tip the turn's check compares with (every earlier turn was checked already).

    ``known``: the branch and its verified tip as :func:`on_branch` read them a moment ago, when
    nothing moved the branch since (no merge was made; the agent has not started): not asked again."""
    ref = f"refs/heads/{branch}"
    if known is not None:
        if known.tip != known.verified:
            mark_verified(git, repo, task_ref, known.tip)
        return
    listed = _read(git, repo, [ref, verified_ref(task_ref)])  # one look in the common case
    own = listed.get(ref)
    if own is None or own[2] or own[1] != "commit":
        ensure(git, repo, branch)  # the rare case: a symbolic ref put back, or said
        tip = git.branch_value(ref, cwd=repo)
    else:
        tip = own[0]
    verified = listed.get(verified_ref(task_ref))
    if tip is not None and tip != (verified[0] if verified else None):
        mark_verified(git, repo, task_ref, tip)


def object_format_of(name: str | None) -> str | None:
    """The object format a full object name corral itself recorded shows by its width (None: it shows none).
    A repository's format never changes, so the name of any of its commits tells it without asking git."""
    if name and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", name):
        return "sha256" if len(name) == 64 else "sha1"
    return None


def after_confined(
    git: Git,
    repo: str | Path,
    *,
    common_dir: str | None,
    quarantine_id: str | None,
    task_ref: str,
    branch: str,
    target: str | None,
    turn: int | str,
    worktree: str | Path | None = None,
    object_format: str | None = None,
    seen: dict[str, str] | None = None,
    staged: Callable[[str], set[str] | None] | None = None,
) -> tuple[quarantine.ObjectsReport | None, RefMove | None, str | None]:
    """After an agent wrote in a task's worktree (a turn, a pair): its quarantined objects verified
    and moved (when it had a quarantine), then its branch checked. (objects, finding, error); never raises.

    ``object_format``: the repository's, when the caller knows it (:func:`object_format_of`).
    ``seen``: given, it gains ``tip``, the branch's commit as the check read it, when it was found sound.
    ``staged``: the index's check reads the turn's one scan of the worktree (:func:`mend`)."""
    objects = None
    try:
        scrub(git, worktree or repo, branch)  # links and FIFOs the agent left where corral's git writes: gone first
        if common_dir and quarantine_id:
            objects = quarantine.settle(git, repo, common_dir, quarantine_id, object_format)
    except (GitError, OSError) as exc:
        return None, None, f"the turn's objects could not be checked: {exc}"[:300]
    tip = None
    try:
        finding, tip = check(
            git,
            repo,
            task_ref=task_ref,
            branch=branch,
            target=target,
            turn=turn,
            objects=objects,
            confined=bool(common_dir and quarantine_id),
        )
    except (GitError, OSError) as exc:
        return objects, None, f"the branch could not be checked: {exc}"[:300]
    if seen is not None and tip is not None:
        seen["tip"] = tip
    try:
        if common_dir and quarantine_id:  # an agent that ran as the person could break anything: confined only
            mend(
                git,
                worktree or repo,
                branch,
                reset_index=finding is not None or (objects is not None and not objects.ok),
                tip=tip,
                staged=staged,
            )
    except (GitError, OSError) as exc:
        return objects, finding, f"the worktree's git state could not be mended: {exc}"[:300]
    return objects, finding, None


class Start(NamedTuple):
    """What :func:`on_branch` read before a turn, in the common case: ``HEAD`` names the branch, a plain ref."""

    tip: str  # the branch's commit, so ``HEAD``'s too
    verified: str | None  # its verified tip (None: none recorded yet)
    hooks: str  # the repository's own hooks path, as ``git rev-parse --git-path hooks`` gives it


def read_start(git: Git, worktree: str | Path, task_ref: str, branch: str) -> Start | None:
    """Before a turn: the branch and its verified tip (one ``for-each-ref``), and the hooks path
    and the ref ``HEAD`` names (one ``rev-parse``, as configured: the hooks path is the person's,
    and rev-parse runs no hook); None unless ``HEAD`` names the branch and the branch is a plain
    ref holding a commit, whose caller then asks each fact on its own."""
    ref = f"refs/heads/{branch}"
    names = [ref, verified_ref(task_ref)]
    # Both plain refs to loose commits (the usual turn after the first): read from their files, no process.
    plain = tip_files.commits_of(worktree, names)
    listed = {n: (c, "commit", "") for n, c in plain.items()} if plain is not None else _read(git, worktree, names)
    own = listed.get(ref)
    if own is None or own[2] or own[1] != "commit":
        return None
    asked = ("rev-parse", "--git-path", "hooks", "--symbolic-full-name", "HEAD")
    said = git.run(*asked, cwd=worktree, check=False, as_configured=True)
    lines = said.stdout.split("\n")
    if said.returncode != 0 or len(lines) != 3 or lines[1] != ref or lines[2]:  # no hooks path hides a line
        return None
    verified = listed.get(verified_ref(task_ref))
    return Start(own[0], verified[0] if verified else None, lines[0])


def on_branch(
    git: Git, repo: str | Path, worktree: str | Path, branch: str, task_ref: str | None = None
) -> Start | None:
    """Before corral commits through a task worktree's ``HEAD`` (a merge of the target): the branch
    is a plain ref to a commit (a symbolic ref put back first), and ``HEAD`` names it; else GitError.

    With ``task_ref``, the common case takes two git processes and answers what the turn's start
    asks next (:class:`Start`): one ``for-each-ref`` of the branch and its verified tip (a plain ref
    holding a commit needs nothing put back), and one ``rev-parse`` of the hooks path and of the ref
    ``HEAD`` names. Anything else is said exactly, as without it (None then)."""
    scrub(git, worktree, branch)
    if task_ref is not None:
        start = read_start(git, worktree, task_ref, branch)
        if start is not None:
            return start
    ensure(git, repo, branch)
    head = git.run("symbolic-ref", "--quiet", "HEAD", cwd=worktree, check=False).stdout.strip()
    if head != f"refs/heads/{branch}":
        raise GitError(
            f"The worktree {worktree} is not on its task's branch {branch} (its HEAD: {head[:200] or 'detached'}).",
            hint=f"Check it out again there: git -C {worktree} switch {branch}",
        )
    return None


def _own_git_dir(worktree: str | Path) -> Path | None:
    """A linked worktree's own git directory, read from its ``.git`` file (pinned read-only inside
    the sandbox, so the agent's word is not taken for where it is); None for a main checkout."""
    dot = Path(worktree) / ".git"
    try:
        line = dot.read_text(encoding="utf-8", errors="replace").strip() if dot.is_file() else ""
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    where = Path(line.removeprefix("gitdir:").strip())
    return where if where.is_absolute() else Path(worktree) / where


def scrub(git: Git, worktree: str | Path, branch: str) -> list[str]:
    """Before corral's unconfined git acts in a task's worktree: what the agent could have left in
    the git files it may write — the worktree's own git directory (``MERGE_MSG``, ``logs/HEAD``,
    ``index``…) and the directories of the task branches' refs and reflogs — that git would write
    *through* (a symbolic link: a merge or a reflog line would land anywhere the person can write)
    or block on (a FIFO, a socket, a device) is removed, never followed or opened. An index that
    went is made again from the branch's tip. The paths removed (for the report)."""
    import os
    import stat

    removed: list[str] = []
    places: list[Path] = []
    own = _own_git_dir(worktree)
    if own is not None:
        places.append(own)
    common = own.parent.parent if own is not None and own.parent.name == "worktrees" else None
    if common is not None:
        ref_dir = os.path.dirname(f"refs/heads/{branch}")
        places += [common / ref_dir, common / "logs" / ref_dir]
    index_gone = False
    for place in places:
        try:
            if stat.S_ISLNK(os.lstat(place).st_mode):
                continue  # a place that is itself a link is never walked (it is not the agent's to make)
        except OSError:
            continue
        for root, dirs, files in os.walk(place, followlinks=False):
            for name in [*files, *dirs]:
                path = Path(root, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                    continue
                try:
                    os.unlink(path)
                except OSError:
                    continue
                removed.append(str(path))
                if own is not None and path == own / "index":
                    index_gone = True
    if index_gone:
        tip = git.rev_parse(f"refs/heads/{branch}", cwd=worktree)
        if tip is not None:
            git.run("read-tree", tip, cwd=worktree, check=False)
    return removed


def _missing(git: Git, repo: str | Path, names: set[str]) -> set[str]:
    if not names:
        return set()
    ordered = sorted(names)
    out = git.run("cat-file", "--batch-check", cwd=repo, input="".join(f"{n}\n" for n in ordered), check=False)
    found = set()
    for line in out.stdout.splitlines():
        oid, _, kind = line.partition(" ")
        if kind and not kind.startswith("missing"):
            found.add(oid)
    return names - found


def mend(
    git: Git,
    worktree: str | Path,
    branch: str,
    *,
    reset_index: bool,
    tip: str | None = None,
    staged: Callable[[str], set[str] | None] | None = None,
) -> list[str]:
    """After a turn: the git state beside the objects that names what the store lacks — the branch's
    reflog, the worktree's ``HEAD`` reflog, its index — would break the person's ``git gc`` and
    ``fsck``. Reflog lines naming a missing object are dropped; the index is made again from the
    branch's tip when ``reset_index`` (the branch was put back, or objects were refused) or when an
    entry that differs from the tip names a missing object. What was mended, a line each.

    ``tip``: the branch's commit as the check after this turn just read it (not asked again). ``staged``: the
    objects of the index's entries that differ from a tip, from the turn's one scan of the worktree
    (``GitProbe.staged_against``), or None where it cannot say; without it, git is asked."""
    import os

    said: list[str] = []
    own = _own_git_dir(worktree)
    common = own.parent.parent if own is not None and own.parent.name == "worktrees" else None
    logs = [
        p
        for p in (
            (common / "logs" / "refs" / "heads" / branch) if common else None,
            (own / "logs" / "HEAD") if own else None,
        )
        if p
    ]
    sha = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64}) ([0-9a-f]{40}|[0-9a-f]{64}) ")
    texts: dict[Path, list[str]] = {}
    named: set[str] = set()
    for log in logs:
        try:
            if not log.is_file() or log.is_symlink():
                continue
            lines = log.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
        except OSError:
            continue
        texts[log] = lines
        for line in lines:
            m = sha.match(line)
            if m:
                named |= {m.group(1), m.group(2)}
    named = {n for n in named if set(n) != {"0"}}
    gone = _missing(git, worktree, named)
    for log, lines in texts.items():
        kept = [ln for ln in lines if not ((m := sha.match(ln)) and {m.group(1), m.group(2)} & gone)]
        kept = [ln for ln in kept if sha.match(ln)]  # a line git cannot read is not kept either
        if kept != lines:
            tmp = log.with_name(f".{log.name}.corral-tmp")
            tmp.write_text("".join(kept), encoding="utf-8", errors="surrogateescape")
            os.replace(tmp, log)
            said.append(f"{log}: {len(lines) - len(kept)} line(s) naming missing objects dropped")
    tip = tip or git.rev_parse(f"refs/heads/{branch}", cwd=worktree)
    if tip is None or own is None:
        return said
    if not reset_index:
        indexed = staged(tip) if staged is not None else None
        failed = False
        if indexed is None:
            out = git.run("diff-index", "--cached", "--no-renames", "-z", tip, cwd=worktree, check=False)
            fields = out.stdout.split("\0")
            indexed = {f.split(" ")[3] for f in fields if f.startswith(":") and len(f.split(" ")) >= 5}
            failed = out.returncode != 0
        reset_index = failed or bool(_missing(git, worktree, {s for s in indexed if set(s) != {"0"}}))
    if reset_index:
        git.run("read-tree", tip, cwd=worktree, check=False)
        said.append("the worktree's index was made again from the branch's tip")
    return said
