"""accept: merge a task's work into its target exactly once, narrated, verified before deleting.

The phase table below is the single source of the plan and of its narration:
pre-flight is a prelude without a position; then ``[n/m]`` phases run in order.
The squash is made with git's plumbing (``merge-tree --write-tree``,
``commit-tree``, a compare-and-swap ``update-ref``), so no working tree is touched
to merge; when the target moved under the swap, the merge is made again onto the
new tip. The merge, its conflict-marker patch and its commit are worked out beside
pre-flight's status scan (:class:`_Ahead`), and taken only for the very commits merged.
A worktree that has the target checked out is brought along with a two-tree
``read-tree -m -u`` before the ref moves (as ``merge --squash`` comes before
``commit``); where the person's local changes overlap the merge, those are stashed
first, the checkout brought along after the swap and the stash popped. What it is
about to do is saved first (the in-flight record of ``recovery.in_flight``), so a
kill anywhere leaves recovery able to finish the update or put the checkout back.
Accepts into one target serialize on the target's lock (merge, verify and
destination), so twenty at once all land. The task reads
``merging`` for the whole merge phase, and ``accept_in_flight_from`` (recorded when
the accept starts) restores the true prior status on every abort. The whole accept
holds the task's lifecycle lock, so two accepts merge once and the second reports
"already accepted".

What lands is what was reviewed: the branch's tip is read once (:func:`reviewed.branch_tip`), at
pre-flight and again after the pre-accept turn, and exactly that commit is merged. When a diff was
shown to the same viewer at another tip, or ``tip`` (``--tip``) pins one the branch is not at, the
commits that came since are named and merged only once confirmed (``confirm``); with no one to ask,
accept refuses (:class:`~corral.errors.TipMoved`). Nor does it land conflict markers: a squash whose added
lines hold a ``<<<<<<<`` … ``=======`` … ``>>>>>>>`` region is refused before the target moves
(:func:`refuse_markers`, :class:`~corral.errors.ConflictMarkers`) unless a person means them (``allow_markers``).
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeGuard

from msgspec import Struct

from corral import crashpoints
from corral.adapters.loose_objects import commit_tree, loose_commit_tree, read_loose
from corral.adapters.ref_files import common_dir
from corral.domain import gittext
from corral.domain.actors import Actor, Role
from corral.domain.clock import rfc3339
from corral.domain.operations_table import Op, may, takes
from corral.domain.records import Session, Task
from corral.domain.status import ACTIVE, SOLE_ACTOR, Status
from corral.domain.violations import shown_paths
from corral.engine import workspace
from corral.engine.operations import reviewed
from corral.engine.operations.accept_phases import (
    PHASES,
    PREFLIGHT,
    Accepted,
    Confirm,
    Narrator,
    Reporter,
    Steps,
    forge_applies,
    plan,
)
from corral.engine.operations.accept_phases import worktree_on as _worktree_on
from corral.engine.project import Project
from corral.engine.recovery import removals
from corral.engine.recovery.chats import refuse_while_chat
from corral.engine.recovery.destination import Kept, note_conflict, settle_destination, stash_overlap
from corral.engine.recovery.in_flight import (
    ACCEPT,
    InFlight,
    mark_in_flight,
    save_in_flight,
    without_flight,
    write_mark,
)
from corral.engine.recovery.merges import CONFLICT_CAUSE, recover_into, restore_prior
from corral.engine.recovery.target_locks import target_lock
from corral.engine.resolve import resolve_task
from corral.engine.task_locks import task_lock
from corral.errors import (
    STATUS_WORDS,
    AcceptRefused,
    ConflictMarkers,
    CorralError,
    DestinationRestoreConflict,  # noqa: F401 (named with the answer it is part of, as accept.DestinationRestoreConflict)
    GitError,
    MergeConflictOnAccept,
)


class _Ready(Struct, frozen=True):
    task: Task
    session: Session
    target: str
    tip: str
    prior: Status
    #: The task's turns ran on workers: its branch and its target live on the shared remote, where
    #: the merge lands first, by compare-and-swap (docs/workers.md#branches).
    shared: bool = False
    #: The target's commit and tree as pre-flight read them: the merge's first base when the target's ref
    #: still holds that commit under its lock (:func:`_target_now`).
    target_seen: tuple[str, str] | None = None
    #: The squash worked out ahead, beside pre-flight's status scan (:class:`_Ahead`); None: worked out in line.
    ahead: _Ahead | None = None


class _Early(Struct, frozen=True):
    """What :class:`_Ahead` worked out: the merge of ``tip`` onto ``old`` as :meth:`Git.merge_tree` gives it, the
    patch :func:`refuse_markers` reads (None: not read, markers allowed or nothing to merge), and the squash
    commit made of ``message`` (None: not made, a conflict, nothing to merge, or a patch opening a conflict region
    that markers were not allowed for)."""

    old: str
    tip: str
    tree: str | None
    conflicts: list[str]
    patch: str | None
    message: str
    commit: str | None


class _Ahead:
    """The squash of the reviewed tip onto the target as pre-flight read them, worked out by git beside
    pre-flight's status scan of the task's worktree and the move to ``merging``: the merge, its conflict-marker
    patch and its commit run on a second core while the scan runs on the first (three git processes off the
    path to the merge phase, which only waits for what is left of them). Nothing it does is seen:
    ``merge-tree`` and ``commit-tree`` write objects no ref names, and the diff reads. The merge phase takes its
    answer only for the very commits it merges (the target's ref, read under its lock, still at the commit
    pre-flight read; the same tip; the same message); anything else, or anything that went wrong here, is
    worked out in line as before, where a failure is said."""

    def __init__(self, project: Project, old: str, old_tree: str, tip: str, message: str, allow_markers: bool):
        self._args = (project, old, old_tree, tip, message, allow_markers)
        self._early: _Early | None = None
        self._thread = threading.Thread(target=self._work, name="corral-accept-ahead")
        self._thread.start()

    def _work(self) -> None:
        project, old, old_tree, tip, message, allow_markers = self._args
        try:
            tree, conflicts = project.git.merge_tree(old, tip, cwd=project.repo)
            patch = commit = None
            if tree is not None and tree != old_tree:
                patch = None if allow_markers else marker_patch(project, old, tree)
                if patch is None or not _opens_region(patch):
                    commit = _commit(project, tree, old, message)
            self._early = _Early(old, tip, tree, conflicts, patch, message, commit)
        except Exception:  # not swallowed: the merge phase works it out in line, and says why it fails there
            self._early = None

    def join(self) -> None:
        """Wait for git to be done (every path out of an accept: nothing of it runs after the command ends)."""
        self._thread.join()

    def take(self, old: str, tip: str) -> _Early | None:
        """The answer for merging ``tip`` onto ``old``, when that is what was worked out; else None."""
        self.join()
        early = self._early
        return early if early is not None and (early.old, early.tip) == (old, tip) else None


def _checked_out(project: Project, branch: str) -> bool:
    """Whether a worktree has ``branch`` checked out (for the plan announced before the target's lock; the lock
    holder reads it again)."""
    return _worktree_on(project, branch) is not None


def preflight(
    project: Project,
    given: str,
    actor: Actor,
    caller_task_id: str | None = None,
    *,
    ahead: bool = False,
    allow_markers: bool = False,
) -> _Ready | Accepted:
    """What an accept checks before anything moves, and what it reads for the merge: the task's branch tip and
    target. ``ahead``: the squash of that tip onto the target is worked out by git beside the worktree's status
    scan (:class:`_Ahead`), for a merge phase that follows at once (no pre-accept turn in between)."""
    message: str | None = None
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        session = tx.get_session(task.session_id) if task.session_id else None
        if task.status is Status.COMPLETE and session is not None and session.outcome == "accepted":
            return Accepted(task, None, already=True)
        pending = tx.pending_paths(task.id)
        if pending:
            from corral.domain.explain import decide_files

            raise AcceptRefused(
                f"Cannot accept {task.ref}: protected files await a decision: {', '.join(pending)}",
                hint=f"Decide them: {decide_files(task.ref, pending)}",
            )
        if not may(Op.ACCEPT, task.status):
            raise AcceptRefused(
                f"Cannot accept {task.ref}: it is {STATUS_WORDS.get(task.status.value, task.status.value)}; "
                f"accept takes a task that is {takes(Op.ACCEPT)}.",
                hint=f"See what it needs: corral show {task.ref}",
            )
        if session is None or not session.worktree:
            raise AcceptRefused(f"Task {task.ref} has no work to accept.", hint=f"corral start {task.ref}")
        if task.parent_id:
            parent = tx.get_task(task.parent_id)
            if parent is not None and parent.status in ACTIVE and not _exempt(parent, caller_task_id):
                raise AcceptRefused(
                    f"Cannot accept {task.ref} into {parent.ref} while {parent.ref} is {parent.status.value}: "
                    "merging into a live worktree would corrupt what runs in it.",
                    hint=f"Wait for {parent.ref} to rest (corral wait {parent.ref}), then accept again.",
                )
        target = workspace.target_branch(tx, task)
        lease = tx.lease(task.id)
        if ahead:
            message = _message(tx, task, session)
    # Its turns ran on workers: the remote holds its work. A turn run on a host of its own (a local lease)
    # left its work in that host's worktree, accepted there as on one host.
    # The placement refuses it while that work has not reached the remote (its tip would be stale).
    fetched = project.placement.review_branch(project, task, target, lease, "accept")
    refuse_while_chat(project, task, "accept")  # it would merge what a live chat is changing
    git = project.git
    if fetched is not None:
        if fetched.target is None:
            from corral.engine.git_remote import remote_name

            raise AcceptRefused(
                f"The remote holds no {target}, the target of {task.ref}.",
                hint=f"Push it first: git push {remote_name(project)} {target}",
            )
        if not Path(session.worktree).is_dir():  # the worktree is a worker's: the remote holds the work
            tip = fetched.branch
            if tip is None:
                raise AcceptRefused(f"The remote holds no branch {task.branch}.", hint=f"corral show {task.ref}")
            return _Ready(task, session, target, tip, task.status, shared=True)
    if not Path(session.worktree).is_dir():
        raise AcceptRefused(
            f"Cannot accept {task.ref}: its worktree {session.worktree} is gone (removed by hand?).",
            hint=f"Its branch {session.branch or task.branch} still holds every commit: run `git worktree prune`, "
            f"then restore it (git worktree add '{session.worktree}' {session.branch or task.branch}) and accept.",
        )
    shared = fetched is not None
    branch = session.branch or task.branch
    early, listed = None, None
    if message is not None and not shared:  # the tips, read first (from their files, else one listing)
        early = _tips_from_files(project, branch, target)
        if early is None:
            listed = _listing(project, _ref_names(branch, target))
            early = _plain_tips(listed, _ref_names(branch, target))
    working = None
    if early is not None and early[1] is not None:  # both plain: merged beside the scan
        working = _Ahead(project, early[1][0], early[1][1], early[0], message or "", allow_markers)
    try:
        dirty = git.dirty_paths(session.worktree)
        if dirty:
            raise AcceptRefused(
                f"Cannot accept {task.ref}: its worktree has uncommitted changes: {', '.join(dirty[:10])}"
                + (" …" if len(dirty) > 10 else ""),
                hint=f"Have the agent commit them (corral unblock {task.ref} -m 'commit your changes'), or commit "
                f"them yourself in {session.worktree}.",
            )
        tip, target_there, seen = _read_tips(project, branch, None if shared else target, listed)
        if tip is None:
            raise AcceptRefused(f"The branch of {task.ref} is gone.", hint="See `git branch --list 'corral/*'`.")
        if not target_there:
            raise AcceptRefused(
                f"The target branch {target} of {task.ref} does not exist.",
                hint=f"Create it, or: corral edit {task.ref} --target BRANCH",
            )
    except BaseException:
        if working is not None:
            working.join()
        raise
    return _Ready(task, session, target, tip, task.status, shared=shared, target_seen=seen, ahead=working)


#: What opens a conflict region (``corral.domain.conflict_markers.OPENING``, held equal by a test): the reader of
#: regions loads only for a patch that adds such a line.
OPENING = "<<<<<<< "

_REF_FORMAT = "--format=%(refname)%00%(objectname)%00%(objecttype)%00%(symref)%00%(tree)"
_FULL_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def _tips(project: Project, branch: str, target: str | None) -> tuple[str | None, bool]:
    """The task branch's tip (:func:`reviewed.branch_tip`'s answer) and whether ``target`` names a commit
    (True when None: not asked), both from one ``for-each-ref`` in the common case: a plain branch holding a
    commit. Anything else (a symbolic ref, an object that is not a commit or not there, a listing git refuses)
    is asked as before, one ref at a time, so that a symbolic ref is put back or refused as it always was."""
    tip, there, _seen = _read_tips(project, branch, target)
    return tip, there


def _read_tips(
    project: Project, branch: str, target: str | None, listed: dict[str, list[str]] | None = None
) -> tuple[str | None, bool, tuple[str, str] | None]:
    """:func:`_tips`, and the target's commit and tree when the same listing gave them (a plain branch holding a
    commit), else None. ``listed``: the listing of the two refs, already made (:func:`_listing`)."""
    from_files = _tips_from_files(project, branch, target)
    if from_files is not None:
        return from_files[0], True, from_files[1]
    names = _ref_names(branch, target)
    if listed is None:
        listed = _listing(project, names)
    own = listed.get(names[0])
    tip = own[0] if _plain(own) else reviewed.branch_tip(project, branch)
    if target is None:
        return tip, True, None
    found = listed.get(names[1])
    if found is not None and found[1] == "commit":
        return tip, True, (found[0], found[3]) if _plain(found, tree=True) else None
    return tip, project.git.rev_parse(names[1], cwd=project.repo) is not None, None


def _plain(entry: list[str] | None, *, tree: bool = False) -> TypeGuard[list[str]]:
    """Whether a :func:`_listing` entry is a plain branch holding a commit (not a symbolic ref), its name a full
    object id (and, with ``tree``, its commit's tree one too): what is taken as listed, without asking again."""
    if entry is None or entry[1] != "commit" or entry[2] or not _FULL_SHA.fullmatch(entry[0]):
        return False
    return not tree or bool(_FULL_SHA.fullmatch(entry[3]))


def _ref_names(branch: str, target: str | None) -> list[str]:
    return [f"refs/heads/{branch}", *([f"refs/heads/{target}"] if target is not None else [])]


def _listing(project: Project, names: list[str]) -> dict[str, list[str]]:
    """Each of ``names`` that ``for-each-ref`` lists: its object, the object's type, the ref it points to (a
    symbolic one) and the commit's tree. It only reads; what :func:`_read_tips` does with a ref that is not plain
    comes after."""
    listed: dict[str, list[str]] = {}
    done = project.git.run("for-each-ref", _REF_FORMAT, *names, cwd=project.repo, check=False)
    if done.returncode == 0:
        for line in done.stdout.split("\n"):
            parts = line.split("\0")
            if len(parts) == 5 and parts[0] in names:  # a pattern matches the refs below it too
                listed[parts[0]] = parts[1:]
    return listed


def _plain_tips(listed: dict[str, list[str]], names: list[str]) -> tuple[str, tuple[str, str]] | None:
    """The branch's tip and the target's commit and tree, where ``listed`` gives both as plain branches holding
    commits (what :func:`_read_tips` then takes as they are); None otherwise."""
    own, found = listed.get(names[0]), listed.get(names[-1])
    if len(names) == 2 and _plain(own) and _plain(found, tree=True):
        return own[0], (found[0], found[3])
    return None


def _tips_from_files(project: Project, branch: str, target: str | None) -> tuple[str, tuple[str, str] | None] | None:
    """What :func:`_read_tips` asks ``for-each-ref``, read from the repository's files as git reads them (no
    process): the branch's tip, and the target's commit and tree — each ref a plain one (its loose file or its
    line in ``packed-refs``, never a symbolic ref) naming a commit git keeps loose. None where the files are
    not the whole answer (a symbolic ref, a ref that is not there, an object packed or not a commit): git is
    asked then, as before."""
    common = common_dir(Path(project.repo))
    tip = removals.ref_in_files(project, f"refs/heads/{branch}") if common is not None else None
    if common is None or not isinstance(tip, str):
        return None
    own = read_loose(common, tip)
    if own is None or own[0] != "commit":
        return None
    if target is None:
        return tip, None
    at = removals.ref_in_files(project, f"refs/heads/{target}")
    tree = loose_commit_tree(common, at) if isinstance(at, str) else None
    if not isinstance(at, str) or tree is None:
        return None
    return tip, (at, tree)


#: A target read once: its commit, and the commit's type and tree. (Not its trailers: ``for-each-ref`` of some
#: git versions gives every trailer for ``%(trailers:key=…)``; ``Git.trailers`` reads them through ``log``.)
_TARGET_FORMAT = "--format=%(refname)%00%(objectname)%00%(objecttype)%00%(tree)"


def _tip_and_tree(project: Project, target: str) -> tuple[str | None, str | None]:
    """The commit ``refs/heads/<target>`` names and its tree, from one ``for-each-ref`` (one look at the ref, so
    the two agree); a ref that does not plainly hold a commit is asked as before (the tree then None: read from
    the commit when needed)."""
    ref = f"refs/heads/{target}"
    done = project.git.run("for-each-ref", _TARGET_FORMAT, ref, cwd=project.repo, check=False)
    if done.returncode == 0:
        for line in done.stdout.split("\n"):
            parts = line.split("\0")
            if len(parts) == 4 and parts[0] == ref and parts[2] == "commit" and _FULL_SHA.fullmatch(parts[3]):
                return parts[1], parts[3]
    return project.git.rev_parse(ref, cwd=project.repo), None


def _target_now(project: Project, target: str, seen: tuple[str, str] | None) -> tuple[str | None, str | None]:
    """The target's commit and tree, read under its lock: what pre-flight read (``seen``) when the ref's file
    still holds that commit (read as git reads it, no git process), else asked of git (:func:`_tip_and_tree`).
    A commit's tree never changes, so a ref still at the commit pre-flight saw still has the tree it saw."""
    if seen is not None and removals.ref_in_files(project, f"refs/heads/{target}") == seen[0]:
        return seen
    return _tip_and_tree(project, target)


def _commit(project: Project, tree: str, parent: str, message: str) -> str:
    """The squash commit, made as :meth:`Git.commit_tree` makes it, in one git process when the repository has
    an identity of its own (``user.useConfigOnly``: git refuses rather than guess one); when it refused, made
    exactly as before (corral's identity given where the repository has none)."""
    made = project.git.run("-c", "user.useConfigOnly=true", "commit-tree", tree, "-p", parent, cwd=project.repo,
                           input=gittext.message(message), check=False)  # fmt: skip
    commit = made.stdout.strip()
    if made.returncode == 0 and _FULL_SHA.fullmatch(commit):
        return commit
    return project.git.commit_tree(tree, [parent], message, cwd=project.repo)


def _exempt(parent: Task, caller_task_id: str | None) -> bool:
    """The one exemption from "the parent must not be active" (docs/mcp.md#accept): the caller is the parent's
    own agent, blocked inside this very call, so it is the only actor in the destination worktree.

    ``caller_task_id`` comes from the caller's token only (``engine/operations/gates.py``); a person's
    command never carries one. Merging and interrupted parents refuse everyone.
    """
    return caller_task_id is not None and caller_task_id == parent.id and parent.status in SOLE_ACTOR


def _message(tx: Any, task: Task, session: Session) -> str:
    """The squash commit's message: the goal, the agent's last answer, the trailers.

    The agent's words are untrusted: escaped and capped here (:mod:`corral.domain.gittext`),
    so a NUL, an escape sequence or a flood never blocks the commit or reaches a terminal
    through ``git log``; the trailers come last and are never cut.
    """
    answers = [t for t in tx.turns(task.id) if t.role is Role.AGENT and t.kind not in ("error", "stopped", "ask")]
    summary = gittext.message(answers[-1].content.strip(), cap=gittext.MESSAGE_CAP) if answers else ""
    body = f"{gittext.message(task.goal, cap=gittext.MESSAGE_CAP)}\n"
    if summary:
        body += f"\n{summary}\n"
    return f"{body}\nCorral-Task: {task.id}\nCorral-Session: {session.id}\n"


def accept(
    project: Project,
    given: str,
    *,
    actor: Actor,
    report: Reporter | None = None,
    caller_task_id: str | None = None,
    tip: str | None = None,
    confirm: Confirm | None = None,
    allow_markers: bool = False,
) -> Accepted:
    """Merge a task into its target and complete it. ``caller_task_id``: the task whose agent calls
    (from its token), which may accept a subtask into its own live worktree (:func:`_exempt`).

    A squash that would add conflict markers is refused (:func:`refuse_markers`) unless ``allow_markers``:
    a person who means them.

    ``tip`` pins the commit to merge: the branch must be at it (before and after a pre-accept turn).
    Otherwise a tip other than the one the caller's last diff showed is merged only when ``confirm``
    (given the commits that came since) says yes; without ``confirm`` it is refused (TipMoved).
    """
    narrator = Narrator(report)
    with project.store.read() as tx:
        first = resolve_task(tx, given)
    pinned = reviewed.given_tip(project, tip) if tip is not None else None
    with task_lock(project, first.id, what=f"accept by {actor.value}", timeout=600):
        if forge_applies(project, first):  # through a pull request (docs/forge.md)
            from corral.engine.operations import forge_accept  # loaded only by a project with a forge

            return forge_accept.accept(project, first.id, actor=actor, narrator=narrator, pinned=pinned,
                                       confirm=confirm, caller_task_id=caller_task_id, steps=STEPS)  # fmt: skip
        narrator.phase(PREFLIGHT, "start")
        pre_prompt = project.config["pre_accept_prompt"]
        ready = preflight(project, first.id, actor, caller_task_id, ahead=not pre_prompt, allow_markers=allow_markers)
        if isinstance(ready, Accepted):
            narrator.phase(PREFLIGHT, "done", "already accepted")
            return ready
        try:
            agreed = _agreed_tip(project, ready, pinned, reviewed.viewer(actor, caller_task_id), confirm, narrator)
            narrator.phase(PREFLIGHT, "done")
            task, _session, target = ready.task, ready.session, ready.target
            destination = None  # read under the target's lock (_merge), where it can be relied on
            narrator.announce(plan(pre_accept=bool(pre_prompt), destination=_checked_out(project, target)))
            if not pre_prompt:  # the accept's mark goes with the status it moves to: one transaction (_merge)
                return _merge(project, ready, actor, narrator, destination, allow_markers, mark=True)
        finally:
            if ready.ahead is not None:  # taken by the merge phase, or not: git is done before the accept ends
                ready.ahead.join()
        mark_in_flight(project, task.id, ready.prior)
        crashpoints.hit("accept.marked")
        ready = _pre_accept(project, ready, actor, narrator, str(pre_prompt))
        _after_pre_accept(project, ready, agreed, pinned is not None, confirm, actor, narrator)
        return _merge(project, ready, actor, narrator, destination, allow_markers)


def _agreed_tip(
    project: Project, ready: _Ready, pinned: str | None, who: str, confirm: Confirm | None, narrator: Narrator
) -> str | None:
    """The tip the person has agreed to merge, checked against the tip read at pre-flight: the one pinned,
    else the one their diff showed (confirmed when the branch moved since), else None (no diff was shown)."""
    seen = pinned or reviewed.shown_tip(ready.task, who)
    if seen is None or seen == ready.tip:
        return seen
    branch = ready.session.branch or ready.task.branch
    moved = reviewed.moved(project, branch, seen, ready.tip, None if ready.shared else ready.target)
    if pinned is not None or confirm is None:
        raise reviewed.refusal(ready.task, moved, pinned=pinned is not None)
    _confirmed(ready.task, moved, confirm, narrator)
    return ready.tip


def _after_pre_accept(
    project: Project,
    ready: _Ready,
    agreed: str | None,
    pinned: bool,
    confirm: Confirm | None,
    actor: Actor,
    narrator: Narrator,
) -> None:
    """The pre-accept turn may have moved the branch: its new commits need the same agreement, and a refusal
    puts the task back as the accept found it."""
    if agreed is None or agreed == ready.tip:
        return
    branch = ready.session.branch or ready.task.branch
    moved = reviewed.moved(project, branch, agreed, ready.tip, None if ready.shared else ready.target)
    try:
        if pinned or confirm is None:
            raise reviewed.refusal(ready.task, moved, pinned=pinned)
        _confirmed(ready.task, moved, confirm, narrator)
    except BaseException as exc:  # a refusal, a "no", or Ctrl-C at the question: nothing is merged
        why = exc.message if isinstance(exc, CorralError) else "interrupted"
        restore_prior(project, ready.task.id, actor, f"accept aborted: {why}"[:300])
        raise


def _confirmed(task: Task, moved: reviewed.Moved, confirm: Confirm, narrator: Narrator) -> None:
    """Ask; a "no" is refused as not confirmed. A yes is narrated with the commits it took."""
    if not confirm(moved):
        raise AcceptRefused(
            f"{task.ref} was not accepted: the {moved.count} new commit(s) on its branch were not confirmed.",
            code="not-confirmed",
            hint=f"Look at them (corral diff {task.ref}), then: corral accept {task.ref}",
        )
    narrator.emit({"event": "tip-moved", "confirmed": True, **moved.to_json()})


def _pre_accept(project: Project, ready: _Ready, actor: Actor, narrator: Narrator, prompt: str) -> _Ready:
    """The optional pre-accept turn; its receipt restores the prior status, then the merge goes on."""
    from corral.engine.operations import control, turns

    phase = next(p for p in PHASES if p.id == "pre-accept")
    narrator.phase(phase, "start")
    started = turns.pre_accept(project, ready.task.id, actor=actor, prompt=prompt)
    result = control.wait(project, ready.task.id)
    answer = turns.answer_of(project, result.task, started.launched.command_id)
    if answer is None or answer.kind != "pre-accept" or result.task.status is not ready.prior:
        narrator.phase(phase, "failed", answer.content[:200] if answer else "no answer")
        restore_prior(project, ready.task.id, actor, "accept aborted: the pre-accept turn did not complete")
        raise AcceptRefused(
            f"The pre-accept turn of {ready.task.ref} did not complete; nothing was merged.",
            hint=f"See why: corral show {ready.task.ref}",
        )
    narrator.phase(phase, "done")
    again = preflight(project, ready.task.id, actor)
    if isinstance(again, Accepted):
        raise AcceptRefused(f"{ready.task.ref} was accepted meanwhile.")
    return again


#: What the forge's accept runs of this one (handed over, so it imports nothing from here).
STEPS = Steps(preflight, _agreed_tip, _pre_accept, _after_pre_accept, _message, PHASES)

#: How long an accept waits for another accept into the same target to finish.
TARGET_WAIT = 600.0
#: How many times an accept merges again onto a target that moved under its compare-and-swap.
RETRIES = 5
#: Seconds before trying the swap again when the target did not move (doubled each time).
RETRY_PAUSE = 0.1


class _Landed(Struct, frozen=True):
    old: str
    commit: str
    tree: str
    flight: InFlight | None
    local_behind: bool = False  # shared: the remote's target holds it, this host's did not follow
    stashed: bool = True  # False: the checkout had no local changes the merge touches (no stash to pop)
    #: The checkout was brought along before the swap (:func:`_moved_along`): nothing is left to do to it.
    clear: bool = False


def _merge(
    project: Project,
    ready: _Ready,
    actor: Actor,
    narrator: Narrator,
    destination: Path | None,
    allow_markers: bool = False,
    *,
    mark: bool = False,
) -> Accepted:
    """The merge phase on: ``merging``, the squash landed, verified, the checkout brought along, the task
    completed, its worktree and branch removed. ``mark``: the accept's in-flight mark (the status to restore,
    :func:`~corral.engine.recovery.in_flight.mark_in_flight`) is written with the move to ``merging``, in the
    same transaction: an accept with no pre-accept turn has nothing between the two."""
    task, session, target = ready.task, ready.session, ready.target
    merge_phase = next(p for p in PHASES if p.id == "merge")
    narrator.phase(merge_phase, "start")
    with project.store.write() as tx:
        if mark:
            write_mark(project, tx, task.id, ready.prior)
        tx.set_status(
            task.id, Status.MERGING, actor, f"accept into {target}", expected_from=ready.prior, resting_cause=None
        )
        message = _message(tx, task, session)
    if mark:
        crashpoints.hit("accept.marked")
    crashpoints.hit("accept.merging")
    kept: Kept | None = None
    with ExitStack() as held:
        flight: list[InFlight] = []  # the record saved so far, for an abort to put the checkout back
        try:
            held.enter_context(target_lock(project, target, timeout=TARGET_WAIT))
            recover_into(project, target, besides=task.id)
            destination = _worktree_on(project, target)  # read again: only the lock holder may rely on it
            landed = _land(project, ready, message, destination, flight, allow_markers)
        except CorralError as exc:
            narrator.phase(merge_phase, "failed", exc.message)
            _abort(project, task, actor, flight, exc)
            raise
        except Exception as exc:
            narrator.phase(merge_phase, "failed", str(exc))
            _abort(project, task, actor, flight, None)
            raise
        commit = landed.commit
        narrator.phase(merge_phase, "done", commit[:12])

        verify_phase = next(p for p in PHASES if p.id == "verify")
        narrator.phase(verify_phase, "start")
        problem = verify(project, target, commit, landed.tree, task, session, shared=ready.shared)
        if problem:
            narrator.phase(verify_phase, "failed", problem)
            # The ref may have moved; nothing is deleted. The stranded-merge sweep settles it if it landed.
            raise CorralError(
                f"The merge of {task.ref} could not be verified: {problem}. Nothing was deleted.",
                code="merge-unverified",
                hint=f"Look at {target} (git log -1 {target}) and corral doctor.",
            )
        narrator.phase(verify_phase, "done")

        if landed.flight is not None and landed.flight.destination is not None:
            dest_phase = next(p for p in PHASES if p.id == "destination")
            narrator.phase(dest_phase, "start")
            kept = None
            if not landed.clear:  # brought along before the swap when nothing of the person's was in the way
                kept = settle_destination(project, landed.flight, landed=True, recovering=False, stashed=landed.stashed)
            crashpoints.hit("accept.destination-updated")
            if kept is None:
                narrator.phase(dest_phase, "done", landed.flight.destination)
            else:
                narrator.phase(dest_phase, "failed", kept.message)

    warning = None
    if landed.local_behind:
        warning = (
            f"The remote's {target} holds the merge; {target} here was left as it was "
            f"(it holds commits the remote lacks, or moved meanwhile): git pull to bring it along."
        )
    if not ready.shared:  # what the cleanup removes is written down first: a removal that dies is finished
        removals.record(project, task, session.worktree, session.branch or task.branch, ready.tip)
    with project.store.write() as tx:
        meta = without_flight(task.metadata)
        tx.unregister_process(task.id, ACCEPT)
        if kept is not None:
            meta = note_conflict(meta, kept, rfc3339(tx.now()))
        tx.update_task(task.id, metadata=meta, touch=False)
        tx.update_session(session.id, outcome="accepted", ended_at=tx.now())
        tx.set_status(
            task.id, Status.COMPLETE, actor, f"accepted into {target} as {commit[:12]}", expected_from=Status.MERGING
        )
        done = tx.get_task(task.id) or task
    crashpoints.hit("accept.completed")
    conflict = None
    if kept is not None:
        conflict = kept.error()
        warning = f"{conflict.message} {conflict.hint or ''}".strip()
        narrator.emit({"event": "destination-restore-conflict", "code": conflict.code, **kept.to_json()})
    cleanup_phase = next(p for p in PHASES if p.id == "cleanup")
    narrator.phase(cleanup_phase, "start")
    try:
        if ready.shared:
            workspace.save_and_remove(project, done, session, "accept")
            project.placement.retire_branch(project, done, ready.tip)
        else:  # the worktree renamed away and forgotten, the branch archived and deleted; its files deleted after
            removals.finish(project, task.id)
        narrator.phase(cleanup_phase, "done")
    except CorralError as exc:
        warning = (warning + " " if warning else "") + f"The worktree was kept: {exc.message}"
        narrator.phase(cleanup_phase, "failed", exc.message)
    return Accepted(done, commit, warning=warning, conflict=conflict)


def _land(
    project: Project,
    ready: _Ready,
    message: str,
    destination: Path | None,
    flight: list[InFlight],
    allow_markers: bool = False,
) -> _Landed:
    """Squash onto the target's tip and move it by compare-and-swap, merging again when it moved meanwhile.

    Each squash is read for conflict markers before anything moves (:func:`refuse_markers`).

    With a checked-out target, the in-flight record is saved before the stash is made, so a
    kill anywhere after it leaves recovery knowing old, new and the stash.
    """
    task, target = ready.task, ready.target
    git, repo = project.git, project.repo
    refusal, moved = "", False
    for attempt in range(RETRIES):
        old_tree: str | None = None
        if ready.shared:
            old = project.placement.remote_target(project, task, target)
        else:
            old, old_tree = _target_now(project, target, ready.target_seen if attempt == 0 else None)
        if old is None:
            raise AcceptRefused(f"The target branch {target} of {task.ref} is gone.")
        early = ready.ahead.take(old, ready.tip) if ready.ahead is not None and attempt == 0 else None
        if early is not None:
            tree, conflicts = early.tree, early.conflicts
        else:
            tree, conflicts = git.merge_tree(old, ready.tip, cwd=repo)
        if tree is None:
            raise MergeConflictOnAccept(
                f"{task.branch} conflicts with {target} in: {shown_paths(conflicts, most=20)}. Nothing was merged.",
                hint=conflict_hint(ready),
            )
        if tree == (old_tree or git.tree_of(old, cwd=repo)):
            raise AcceptRefused(
                f"{task.branch} changes nothing on {target}; there is nothing to merge.",
                hint=f"Close it instead: corral close {task.ref} -m 'nothing to do'",
            )
        if not allow_markers:
            refuse_markers(project, ready, old, tree, early.patch if early is not None else None)
        made = early.commit if early is not None and early.message == message else None
        commit = made or _commit(project, tree, old, message)
        if ready.shared:
            if not project.placement.push_target(project, target, commit, old):
                moved = True  # another host's accept landed first: merged again onto it, re-verified
                continue
            crashpoints.hit("accept.after-remote-push")
            return _follow_target(project, ready, commit, tree, destination, flight)
        record_, stashed, clear = None, True, False
        if destination is not None:
            stash_message = f"corral accept {task.ref} {commit[:12]}: local changes"
            record_ = InFlight(target, old, commit, str(destination), stash_message)
            save_in_flight(project, task.id, record_)
            flight[:] = [record_]
            clear = _moved_along(project, destination, old, commit)
            stashed = not clear and stash_overlap(project, destination, old, commit, stash_message) is not None
        crashpoints.hit("accept.before-update-ref")
        logged = gittext.reflog(f"corral accept {task.ref}: {task.goal}")
        swapped = git.run("update-ref", "-m", logged, f"refs/heads/{target}", commit, old, cwd=repo, check=False)
        if swapped.returncode == 0:
            crashpoints.hit("accept.after-update-ref")
            return _Landed(old, commit, tree, record_, stashed=stashed, clear=clear)
        if record_ is not None:  # the target moved under us: the checkout goes back, then merge again
            kept = settle_destination(project, record_, landed=False, recovering=False)
            if kept is not None:
                raise kept.error()
            save_in_flight(project, task.id, None)
            flight.clear()
        said = (swapped.stderr or swapped.stdout).strip().splitlines()
        refusal = said[-1][:300] if said else f"exit {swapped.returncode}"
        if git.rev_parse(f"refs/heads/{target}", cwd=repo) != old:
            moved = True  # another commit landed first: merge again onto it at once
        else:
            # Not moved, yet not swapped: a git command holds the ref's lock (a commit or a push
            # landing now) or a hook refused; give it a moment before the next try.
            time.sleep(RETRY_PAUSE * 2**attempt)
    if moved:
        raise GitError(
            f"{target} kept moving while {task.ref} was merged into it; nothing was merged.",
            code="target-moving",
            hint=f"Try again: corral accept {task.ref}",
        )
    raise GitError(
        f"git would not move {target} to the merge of {task.ref} ({refusal}); nothing was merged.",
        code="target-refused",
        hint="A git command still running in the repository, or a reference-transaction hook, holds or guards "
        f"{target}; once it is done: corral accept {task.ref}",
    )


def _moved_along(project: Project, destination: Path, old: str, new: str) -> bool:
    """The checkout of the target brought from ``old`` to ``new`` before the target's ref moves, as ``git merge
    --squash`` updates the checkout before ``git commit``: a two-tree ``read-tree -m -u``, which checks every
    path before it writes any and refuses exactly where a local change (staged, unstaged, or an untracked file
    in the way) touches a path the merge changes. True when it went through; False when it refused, having
    written nothing: the overlap is then stashed (:func:`stash_overlap`) and the checkout brought along after
    the swap, as before.

    The in-flight record is saved first: should the swap then fail (the target moved) or the accept die before
    it, the checkout is put back (``settle_destination`` with the merge not landed reads its index at the new
    tree and takes it back to the old one)."""
    moved = project.git.run("read-tree", "-m", "-u", old, new, cwd=destination, check=False)
    return moved.returncode == 0


def _follow_target(
    project: Project, ready: _Ready, commit: str, tree: str, destination: Path | None, flight: list[InFlight]
) -> _Landed:
    """The merge stands on the remote: this host's target follows it when it is behind (its checkout
    brought along as in a local accept); a local target with commits the remote lacks is left as it is."""
    git, repo, task, target = project.git, project.repo, ready.task, ready.target
    old = git.rev_parse(f"refs/heads/{target}", cwd=repo)
    if old is not None and not git.is_ancestor(old, commit, cwd=repo):
        return _Landed(old, commit, tree, None, local_behind=True)
    record_ = None
    if destination is not None and old is not None:
        stash_message = f"corral accept {task.ref} {commit[:12]}: local changes"
        record_ = InFlight(target, old, commit, str(destination), stash_message)
        save_in_flight(project, task.id, record_)
        flight[:] = [record_]
        stash_overlap(project, destination, old, commit, stash_message)
    logged = gittext.reflog(f"corral accept {task.ref}: {task.goal}")
    cas = [old] if old is not None else ["0" * 40]
    swapped = git.run("update-ref", "-m", logged, f"refs/heads/{target}", commit, *cas, cwd=repo, check=False)
    if swapped.returncode != 0:
        if record_ is not None:
            settle_destination(project, record_, landed=False, recovering=False)
            save_in_flight(project, task.id, None)
            flight.clear()
        return _Landed(old or commit, commit, tree, None, local_behind=True)
    return _Landed(old or commit, commit, tree, record_)


def _abort(project: Project, task: Task, actor: Actor, flight: list[InFlight], exc: CorralError | None) -> None:
    """Put the checkout and the task back after a failed merge phase; a conflict names its cause."""
    for record_ in flight:
        landed = project.git.rev_parse(f"refs/heads/{record_.target}", cwd=project.repo) == record_.new
        if landed:
            return  # the merge stands: the stranded-merge sweep finishes it
        kept = settle_destination(project, record_, landed=False, recovering=False)
        if kept is not None:
            with project.store.write() as tx:
                current = tx.get_task(task.id) or task
                tx.update_task(task.id, metadata=note_conflict(current.metadata, kept, rfc3339(tx.now())), touch=False)
    if isinstance(exc, MergeConflictOnAccept):
        restore_prior(
            project,
            task.id,
            actor,
            f"accept aborted: {exc.message}"[:300],
            cause=CONFLICT_CAUSE,
            details={"summary": exc.message, "hint": exc.hint},
        )
    elif exc is not None:
        restore_prior(project, task.id, actor, f"accept aborted: {exc.message}"[:300])
    else:
        restore_prior(project, task.id, actor, "accept aborted by an internal fault")


def _worktree_words(ready: _Ready) -> str | None:
    """The task's worktree as a shell word, when it is on this host (a worker's is not)."""
    import shlex  # for a refusal's hint only

    worktree = ready.session.worktree
    return shlex.quote(worktree) if worktree and Path(worktree).is_dir() else None


def conflict_hint(ready: _Ready) -> str:
    """How to finish an accept whose branch conflicts with its target: by hand in the worktree, or the agent's turn
    (whose prompt names the conflicted files and asks it to remove every marker; accept refuses any left)."""
    ref, target, wt = ready.task.ref, ready.target, _worktree_words(ready)
    by_hand = (
        f"Resolve it by hand: git -C {wt} merge {target}, fix the conflicted files, git -C {wt} commit -a --no-edit; "
        f"then corral accept {ref} merges that. "
        if wt
        else ""
    )
    return f"{by_hand}Or hand it to the agent: corral unblock {ref} -m 'merge {target} and resolve the conflicts'"


def refuse_markers(project: Project, ready: _Ready, old: str, tree: str, patch: str | None = None) -> None:
    """Refuse a squash whose added lines hold conflict markers (:mod:`corral.domain.conflict_markers`), read in
    the squash's patch (:func:`marker_patch`; ``patch``: that patch, already read for these very trees)."""
    if patch is None:
        patch = marker_patch(project, old, tree)
    if not _opens_region(patch):
        return
    from corral.domain import conflict_markers

    regions = conflict_markers.find(patch)
    if not regions:
        return
    ref, wt = ready.task.ref, _worktree_words(ready)
    by_hand = (
        f"Resolve them by hand: edit the files in {wt}, then git -C {wt} commit -am 'resolve conflict markers'; "
        f"corral accept {ref} then merges that commit. "
        if wt
        else ""
    )
    raise ConflictMarkers(
        f"Cannot accept {ref}: its squash would add conflict markers to {ready.target} at "
        f"{conflict_markers.named(regions)}. Nothing was merged.",
        hint=f"{by_hand}Or hand it back: corral unblock {ref} -m 'resolve the conflict markers'. "
        f"Markers you mean: corral accept {ref} --allow-markers",
    )


def _opens_region(patch: str) -> bool:
    """Whether ``patch`` adds a line that opens a conflict region: a patch with none holds no region (read no
    further, and load no reader of markers)."""
    return f"\n+{OPENING}" in f"\n{patch}"


def marker_patch(project: Project, old: str, tree: str) -> str:
    """The squash's patch (``old`` to ``tree``) as :func:`refuse_markers` reads it: from objects in the main
    checkout, as the review diff is, with no driver, textconv or attribute of the task's, and with git's own
    prefixes whatever the person's ``diff.noprefix``."""
    return project.git.run(
        "-c",
        "core.fsmonitor=false",
        "diff",
        *reviewed.REVIEW_FLAGS,
        "-U0",
        "--no-color",
        "--no-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        old,
        tree,
        "--",
        cwd=project.repo,
    ).stdout


def verify(
    project: Project, target: str, commit: str, tree: str, task: Task, session: Session, *, shared: bool = False
) -> str | None:
    """The target's new commit exists, carries the trailers, and its tree is the merge result
    (``shared``: the remote's target, as fetched again): the commit, its tree and its trailers read from the
    objects by one ``log`` of the target."""
    git, repo = project.git, project.repo
    if shared:
        if project.placement.remote_target(project, task, target) != commit:
            return f"the remote's {target} does not point at the merge commit"
        facts = git.commit_facts(commit, cwd=repo)
    else:
        facts = _facts_from_files(project, target, commit) or git.commit_facts(f"refs/heads/{target}", cwd=repo)
        if facts is None or facts[0] != commit:
            return f"{target} does not point at the merge commit"
    if facts is None or facts[1] != tree:
        return "the merge commit's tree is not the merge result"
    if (facts[2], facts[3]) != (task.id, session.id):
        return "the merge commit does not carry the Corral-Task trailer"
    return None


#: The trailers verification reads, as :meth:`Git.commit_facts` gives them.
_TRAILER_KEYS = ("Corral-Task", "Corral-Session")
_TRAILER_LINE = re.compile(r"([A-Za-z0-9-]+): (.*)")


def _facts_from_files(project: Project, target: str, commit: str) -> tuple[str, str, str, str] | None:
    """What :meth:`Git.commit_facts` answers for the target, read from the repository's files (no process) when
    the target's ref (its loose file or its line in ``packed-refs``) names ``commit`` and git keeps that commit
    loose, as it keeps one ``commit-tree`` just wrote: the commit, its tree and its Corral-Task and
    Corral-Session trailers, from a last paragraph made of trailer lines only (the message accept writes).
    None otherwise: git is asked."""
    common = common_dir(Path(project.repo))
    if common is None or removals.ref_in_files(project, f"refs/heads/{target}") != commit:
        return None
    found = read_loose(common, commit, whole=True)
    if found is None or found[0] != "commit":
        return None
    tree = commit_tree(found[1])
    message = found[1].partition(b"\n\n")[2].decode("utf-8", "replace")
    lines = message.rstrip("\n").rsplit("\n\n", 1)[-1].split("\n")
    parsed = [_TRAILER_LINE.fullmatch(line) for line in lines]
    if tree is None or not all(parsed):
        return None
    task, session = (
        "\x1e".join(m.group(2).strip() for m in parsed if m and m.group(1).lower() == key.lower())
        for key in _TRAILER_KEYS
    )
    return commit, tree, task, session
