"""A task's branch through the shared remote, for turns that run on workers (docs/workers.md#branches).

The remote (the ``remote`` setting, ``origin`` by default) is where a task's work travels
between hosts: the task branch ``corral/<ref>``, and while a turn runs a work-in-progress ref
``refs/corral/wip/<ref>`` — a commit of the worktree as it is (untracked files included, made
with an index of corral's own, so what the agent staged is untouched) whose parent is the
branch tip it was taken on. Every push a worker makes is a compare-and-swap: the branch with
``--force-with-lease`` on the tip its turn started from, the WIP ref on the value this worker last
saw or pushed, so it never overwrites a push it has not seen; and each push is made only after the
worker's epoch is checked to hold the task's lease (``epoch``). A worker that takes a turn over
restores the WIP of the branch tip it starts from. Nothing here is dropped: a local tip the remote
does not hold is kept under ``refs/corral/stale/<ref>/<epoch>``, and what a worktree here held
uncommitted under ``refs/corral/stale/<ref>/<epoch>-worktree``, on this host and on the remote,
before the worktree follows the remote.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from corral.adapters import tip_files
from corral.adapters.loose_objects import loose_commit_tree
from corral.adapters.ref_files import common_dir, git_dirs
from corral.domain.records import Task
from corral.domain.status import Status
from corral.domain.team import Lease
from corral.engine.git_remote import remote_name
from corral.engine.placement import Fetched
from corral.engine.project import Project
from corral.engine.workspace import worktree_lock
from corral.errors import GitError, PrepareFailed, WorkNotPushed

WIP_PREFIX = "refs/corral/wip/"
STALE_PREFIX = "refs/corral/stale/"


def wip_ref(task: Task) -> str:
    return f"{WIP_PREFIX}{task.ref}"


def hold(project: Project, task: Task, epoch: int | None) -> None:
    """Right before a push: the worker's ``epoch`` still holds the task's lease (``LeaseLost`` when not).
    None: not a worker's push (a reviewer's host publishing a new branch)."""
    if epoch is None:
        return
    with project.store.read() as tx:
        tx.check_fence(task.id, epoch)


def swap(project: Project, cwd: Path, ref: str, new: str | None, expected: str | None) -> None:
    """Move the remote's ``ref`` from ``expected`` to ``new`` (None: absent), a compare-and-swap
    (``--force-with-lease``). A remote that holds ``new`` already took an earlier try whose answer was
    lost. A refusal or an unreachable remote is a ``GitError`` whose message is git's own line saying why.
    """
    lease = f"--force-with-lease={ref}:{expected or ''}"
    refspec = f"{new}:{ref}" if new is not None else f":{ref}"
    name = remote_name(project)
    done = project.git.run("push", "--quiet", lease, name, refspec, cwd=cwd, check=False)
    if done.returncode == 0:
        return
    try:
        if remote_tip(project, ref) == new:
            return
    except GitError:
        pass  # unreachable: git's own words below say so
    said = [line.strip().lstrip("! ").strip() for line in (done.stderr or done.stdout or "").splitlines()]
    said = [line for line in said if line]
    why = next((line for line in said if "rejected" in line or line.startswith("fatal:")), None)
    why = why or (said[-1] if said else f"exit {done.returncode}")
    raise GitError(
        f"git push to {name} failed: {why[:300]}",
        code="push-failed",
        hint=f"Check that this host may push there: git -C {project.repo} push --dry-run {name}",
    )


def remote_tip(project: Project, ref: str) -> str | None:
    """What the remote's ``ref`` points at now (None: absent); ``GitError`` when the remote cannot be read."""
    listed = project.git.run("ls-remote", remote_name(project), ref, cwd=project.repo)
    return next((line.split("\t", 1)[0] for line in listed.stdout.splitlines() if line.endswith(f"\t{ref}")), None)


def _tracking(project: Project, branch: str) -> str:
    return f"refs/remotes/{remote_name(project)}/{branch}"


def fetch(project: Project, task: Task, target: str) -> Fetched:
    """Fetch the task branch, its WIP ref and the target (each may be absent on the remote).

    One ``ls-remote`` says what the remote holds; one ``fetch`` brings what this host lacks of it. What this
    host holds already is read from the files where they are plain (``adapters/tip_files``), else asked of git.
    """
    git, repo, remote = project.git, project.repo, remote_name(project)
    wanted = {
        "branch": (f"refs/heads/{task.branch}", _tracking(project, task.branch)),
        "wip": (wip_ref(task), f"refs/corral/remote-wip/{task.ref}"),
        "target": (f"refs/heads/{target}", _tracking(project, target)),
    }
    listed = git.run("ls-remote", remote, *(src for src, _dst in wanted.values()), cwd=repo, check=False)
    if listed.returncode != 0:
        said = (listed.stderr or "").strip().splitlines()
        raise GitError(
            f"git ls-remote {remote} failed: {said[-1] if said else f'exit {listed.returncode}'}",
            hint=f"Check that this host reaches the remote: git -C {repo} fetch {remote}",
        )
    held = {ref: sha for sha, ref in (line.split("\t", 1) for line in listed.stdout.splitlines() if "\t" in line)}
    found: dict[str, str | None] = {}
    missing: list[tuple[str, str, str]] = []
    current: set[str] = set()  # the commits this host's tracking refs hold already, as the remote does
    for name, (src, dst) in wanted.items():
        sha = held.get(src)
        found[name] = sha
        if sha is None:
            if not tip_files.ref_absent(repo, dst):
                git.run("update-ref", "-d", dst, cwd=repo, check=False)  # what the remote no longer holds
        elif tip_files.ref_commit(git, repo, dst) != sha:
            missing.append((src, dst, sha))
        else:
            current.add(sha)
    # A ref at a commit another tracking ref here holds already (a branch just made at its target's tip: every
    # start's) brings nothing to fetch: its tracking ref is set to it, one process where a fetch ran four.
    if missing and all(sha in current for _src, _dst, sha in missing):
        moves = "".join(f"update {dst} {sha}\n" for _src, dst, sha in missing)
        if git.run("update-ref", "--no-deref", "--stdin", cwd=repo, check=False, input=moves).returncode == 0:
            missing = []
    if missing:
        fetching = ("fetch", "--quiet", "--no-tags", remote, *(f"+{src}:{dst}" for src, dst, _sha in missing))
        if git.run(*fetching, cwd=repo, check=False).returncode != 0:
            # Once more, and git's own error if it fails again: another turn's objects settling into this
            # host's store as the fetch looked (its quarantine moved) can make git miss an object it has
            # ("did not send all necessary objects"), and a claim is not failed for that moment.
            git.run(*fetching, cwd=repo)
    return Fetched(found["branch"], found["wip"], found["target"])


def worktree_for_turn(project: Project, task: Task, target: str, epoch: int) -> tuple[Path, Fetched]:
    """This host's worktree of the task, on the remote's tip of its branch, with the WIP restored.

    Made when absent (from the remote branch, else from the target); a worktree already here
    follows the remote: fast-forwarded, or reset to it with the local tip and what the worktree
    held uncommitted kept aside first, here and on the remote (a turn this host lost to another
    worker), while ``epoch`` holds the lease.
    """
    git, repo = project.git, project.repo
    fetched = fetch(project, task, target)
    start = fetched.branch or fetched.target
    if start is None:
        raise PrepareFailed(
            f"The remote holds neither {task.branch} nor its target {target}.",
            hint=f"Push the target first: git push {remote_name(project)} {target}",
        )
    path = project.paths.worktree(task.ref)
    branch_ref = f"refs/heads/{task.branch}"
    local = tip_files.ref_commit(git, repo, branch_ref)
    if local is not None and local != start and not git.is_ancestor(local, start, cwd=repo):
        _keep(project, task, epoch, f"{STALE_PREFIX}{task.ref}/{epoch}", local, "a tip the remote lacks")
    if path.is_dir():
        # What this host's worktree holds uncommitted (a turn it lost) is kept before it is reset.
        kept = snapshot(project, path, f"corral: {task.ref}'s worktree on this host before epoch {epoch}")
        if kept is not None:
            _keep(project, task, epoch, f"{STALE_PREFIX}{task.ref}/{epoch}-worktree", kept, "kept")
        git.run("reset", "--hard", "--quiet", start, cwd=path)
        git.run("clean", "-fdq", cwd=path)
    else:
        if path.exists() or path.is_symlink():
            raise PrepareFailed(f"Something already exists at {path}, where task {task.ref}'s worktree goes.")
        path.parent.mkdir(parents=True, exist_ok=True)
        # git's worktree bookkeeping is the repository's: one prune-and-add at a time (a worker runs
        # several turns at once, and a prune would take another's half-made worktree).
        with worktree_lock(project):
            if _prune_finds_any(repo):
                git.run("worktree", "prune", cwd=repo, check=False)
            git.run("worktree", "add", "--quiet", "-B", task.branch, str(path), start, cwd=repo)
    if fetched.wip is not None and git.rev_parse(f"{fetched.wip}^", cwd=repo) == start:
        # The last worker's uncommitted work, back as uncommitted changes on the same tip.
        git.run("checkout", fetched.wip, "--", ".", cwd=path)
        git.run("reset", "--quiet", cwd=path)
    return path, fetched


def _keep(project: Project, task: Task, epoch: int, ref: str, sha: str, why: str) -> None:
    """Keep ``sha`` under ``ref`` here, then on the remote (leased on its absence: one name per epoch),
    before anything here is reset; a host that dies afterwards loses none of it."""
    project.git.update_ref(ref, sha, cwd=project.repo, message=f"corral: {why}")
    hold(project, task, epoch)
    swap(project, project.repo, ref, sha, None)


def _prune_finds_any(repo: Path) -> bool:
    """Whether ``git worktree prune`` could find anything to prune in ``repo``, read as git 2.39 reads each
    entry of ``worktrees/``: True unless every one is a directory that is locked, or whose ``gitdir`` file names
    a ``.git`` that is there, each a path of its own (git prunes a duplicate too). Anything unusual is True:
    git prunes as before."""
    common = common_dir(repo)
    if common is None:
        return True
    admin = common / "worktrees"
    try:
        entries = list(os.scandir(admin))
    except FileNotFoundError:
        return False  # no linked worktree at all
    except OSError:
        return True
    kept = [os.path.realpath(common)]
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=True):
                return True
            if os.path.lexists(os.path.join(entry.path, "locked")):
                continue
            with open(os.path.join(entry.path, "gitdir"), "rb") as f:
                named = f.read(4097).rstrip(b"\r\n").decode()
        except (OSError, UnicodeDecodeError):
            return True
        if not named or len(named) > 4096 or not os.path.isabs(named) or not os.path.lexists(named):
            return True
        kept.append(os.path.realpath(named))
    return len(set(kept)) != len(kept)  # two the same, however named: git's own (by name) among them


def snapshot(project: Project, worktree: Path, message: str) -> str | None:
    """A commit of the worktree as it is (tracked and untracked files), parent HEAD; None when clean."""
    git = project.git
    head = tip_files.head_commit(git, worktree)
    if head is None:
        return None
    fd, index = tempfile.mkstemp(prefix="corral-wip-index-")
    os.close(fd)
    try:
        git.run("read-tree", head, cwd=worktree, index_file=index)
        git.run("add", "-A", ".", cwd=worktree, index_file=index)
        tree = git.run("write-tree", cwd=worktree, index_file=index).stdout.strip()
    finally:
        os.unlink(index)
    if tree == _tree_of(project, worktree, head):
        return None
    return git.commit_tree(tree, [head], message, cwd=worktree)


def _tree_of(project: Project, worktree: Path, commit: str) -> str:
    """The tree of ``commit``: from its loose object where it is one (a commit the agent just made), else git's."""
    dirs = git_dirs(worktree)
    tree = loose_commit_tree(dirs[1], commit) if dirs is not None else None
    return tree or project.git.tree_of(commit, cwd=worktree)


def push_wip(
    project: Project, task: Task, worktree: Path, *, epoch: int | None, seen: str | None, final: bool = False
) -> str | None:
    """Push the worktree's uncommitted work to the task's WIP ref; what the remote's WIP ref holds after.

    A compare-and-swap on ``seen`` (what this worker last saw or pushed there; None: absent), made
    only while ``epoch`` holds the lease: a worker fenced off can never overwrite its successor's WIP.
    A snapshot like the one pushed last is not pushed again. ``final`` (the turn ended): a clean
    worktree removes the WIP ref, so an older snapshot on the same tip is never restored into the
    next turn.
    """
    ref = wip_ref(task)
    sha = snapshot(project, worktree, f"corral: work in progress of {task.ref}")
    if sha is None:
        if not final or seen is None:
            return seen
        hold(project, task, epoch)
        swap(project, worktree, ref, None, seen)
        return None
    if seen is not None and _same_snapshot(project, worktree, seen, sha):
        return seen  # nothing changed since the last push
    hold(project, task, epoch)
    swap(project, worktree, ref, sha, seen)
    return sha


def _same_snapshot(project: Project, worktree: Path, one: str, other: str) -> bool:
    """Two WIP commits of one tree on one parent (their times alone differ)."""
    git = project.git
    if git.rev_parse(f"{one}^{{tree}}", cwd=worktree) != git.tree_of(other, cwd=worktree):
        return False
    return git.rev_parse(f"{one}^", cwd=worktree) == git.rev_parse(f"{other}^", cwd=worktree)


def wip_seen(project: Project, task: Task) -> str | None:
    """The remote's WIP ref of the task as it is now (a restarted worker's starting point for its swap)."""
    return remote_tip(project, wip_ref(task))


def publish_branch(project: Project, task: Task) -> bool:
    """Push this host's task branch where the remote has none yet (one push, leased on its absence);
    False when there is nothing to publish or the remote holds the branch already."""
    git, repo = project.git, project.repo
    tip = tip_files.ref_commit(git, repo, f"refs/heads/{task.branch}")
    if tip is None:
        return False
    try:
        push_branch(project, task, None)
    except GitError:
        if git.run("ls-remote", remote_name(project), f"refs/heads/{task.branch}", cwd=repo).stdout.strip():
            return False  # the remote's already: a worker pushed it
        raise
    return True


def push_branch(project: Project, task: Task, expected: str | None, *, epoch: int | None = None) -> str | None:
    """Push the task branch, leased on the remote tip this turn started from (``expected``; None: absent),
    only while ``epoch`` holds the lease (None: not a worker's push).

    Returns the tip pushed. A remote that moved meanwhile refuses it (``GitError``): another
    worker's push is never overwritten. A remote that already holds the tip took an earlier try.
    """
    git, repo = project.git, project.repo
    branch = f"refs/heads/{task.branch}"
    tip = tip_files.ref_commit(git, repo, branch)
    if tip is None:
        return None
    if tip != expected:
        hold(project, task, epoch)
        swap(project, repo, branch, tip, expected)
    # git's push sets the tracking ref itself where the remote's fetch refspec maps the branch (the usual one);
    # set here only where it did not.
    tracking = _tracking(project, task.branch)
    if tip_files.ref_commit(git, repo, tracking) != tip:
        git.update_ref(tracking, tip, cwd=repo, message="corral: pushed")
    return tip


def refuse_unpushed(task: Task, lease: Lease | None, doing: str) -> None:
    """What a review reads of a task whose turns ran on workers is the remote's tip of its branch: while the
    worker of its last turn has recorded it but not pushed it yet (its lease still claimed), that tip is
    stale, and ``doing`` (``accept``, ``diff``) is refused rather than done on it."""
    if lease is None or not lease.claimed or task.status is Status.WORKING:
        return
    why = lease.unpushed or "its worker is pushing it now"
    raise WorkNotPushed(
        f"Cannot {doing} {task.ref}: its last turn ran on {lease.host or 'a worker'}, whose work has not "
        f"reached the remote yet ({why}).",
        hint=f"Its worker keeps trying and lets the task go once the remote holds it (corral show {task.ref} "
        f"says why it waits); then {doing} again.",
    )


def follow_branch(project: Project, task: Task, target: str) -> Fetched:
    """For a review on this host: the local task branch at the remote's tip (a worker pushed it there).

    A worktree of the branch here follows with ``reset --keep`` (local edits kept, refused when
    they would be overwritten); a local tip the remote lacks is kept aside first.
    """
    git, repo = project.git, project.repo
    fetched = fetch(project, task, target)
    if fetched.branch is None:
        return fetched
    local = git.rev_parse(f"refs/heads/{task.branch}", cwd=repo)
    if local == fetched.branch:
        return fetched
    if local is not None and not git.is_ancestor(local, fetched.branch, cwd=repo):
        git.update_ref(f"{STALE_PREFIX}{task.ref}/review", local, cwd=repo, message="corral: a tip the remote lacks")
    checkout = next(
        (Path(w["worktree"]) for w in git.worktrees(cwd=repo) if w.get("branch") == f"refs/heads/{task.branch}"),
        None,
    )
    if checkout is not None and checkout.is_dir():
        git.run("reset", "--keep", "--quiet", fetched.branch, cwd=checkout)
    else:
        git.update_ref(f"refs/heads/{task.branch}", fetched.branch, cwd=repo, message="corral: the remote's tip")
    return fetched


def push_target(project: Project, target: str, commit: str, expected: str) -> bool:
    """Move the remote's ``target`` from ``expected`` to ``commit`` (a compare-and-swap); False when it moved."""
    git, repo, name = project.git, project.repo, remote_name(project)
    done = git.run(
        "push",
        "--quiet",
        f"--force-with-lease=refs/heads/{target}:{expected}",
        name,
        f"{commit}:refs/heads/{target}",
        cwd=repo,
        check=False,
    )
    if done.returncode == 0:
        git.update_ref(_tracking(project, target), commit, cwd=repo, message="corral: accepted")
        return True
    said = (done.stderr or "").lower()
    if "stale info" in said or "rejected" in said or "fetch first" in said:
        return False
    raise GitError(
        f"git push of {target} to {name} failed: {(done.stderr or '').strip()[-300:]}",
        hint=f"Check that this host may push to the remote: git -C {repo} push --dry-run {name}",
    )


def retire(project: Project, task: Task, tip: str) -> None:
    """After an accept: the remote keeps the branch's tip under the archive ref; the branch and its WIP go."""
    git, name = project.git, remote_name(project)
    git.run(
        "push", "--quiet", name, f"{tip}:refs/corral/archive/{task.ref}", f":refs/heads/{task.branch}", cwd=project.repo
    )
    if git.run("ls-remote", name, wip_ref(task), cwd=project.repo).stdout.strip():
        git.run("push", "--quiet", name, f":{wip_ref(task)}", cwd=project.repo)
