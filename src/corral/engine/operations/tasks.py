"""Lifecycle operations that need no agent: create, edit, close, reject, reopen, notes.

Each takes the acting ``Actor`` from its surface (the channel), sanitizes text at
intake, and writes the status, its status change and any turn in one transaction
before it touches git (save first, act second).
"""

from __future__ import annotations

import difflib
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

from msgspec import Struct

from corral.adapters.branches import delete_task_branch
from corral.domain.actors import Actor
from corral.domain.operations_table import Op, check_operation, may
from corral.domain.records import TASK_SETTINGS, Note, Task
from corral.domain.refs import is_plain_id, is_ref, unique_ref, validate_ref
from corral.domain.sanitize import check_size, sanitize_field, sanitize_goal, sanitize_paths, sanitize_prose
from corral.domain.settings import BY_NAME, TASK_SCOPED, Setting, SettingValue, Trust
from corral.domain.status import Status, check_transition, is_terminal
from corral.engine import workspace
from corral.engine.project import Project
from corral.engine.resolve import resolve_task
from corral.errors import (
    CorralError,
    HarnessMisconfigured,
    HarnessNotFound,
    NotFoundError,
    RefusedError,
    UsageError,
)
from corral.store import UNSET, NewTask


def _cap(project: Project) -> int:
    return int(project.config["text_cap"])


def _prose(project: Project, field: str, text: str) -> str:
    clean = sanitize_prose(text)
    check_size(field, clean, _cap(project))
    return clean


def _goal(project: Project, text: str) -> str:
    clean = sanitize_goal(text)
    if not clean:
        raise UsageError(
            "The goal is empty.", hint='Say what the task is for, e.g. corral create "Fix the login timeout"'
        )
    check_size("goal", clean, _cap(project))
    return clean


#: A protected-path pattern names paths: longer than this, or more of them, is not a pattern list.
PATTERN_CHARS = 1024
MAX_PATTERNS = 500


def _protect(patterns: Sequence[str]) -> tuple[str, ...]:
    if len(patterns) > MAX_PATTERNS:
        raise UsageError(
            f"{len(patterns):,} protected-path patterns; corral takes at most {MAX_PATTERNS}. Nothing was saved.",
            code="too-many-patterns",
            hint="Protect directories with a glob (db/**) instead of listing every file.",
        )
    for pattern in patterns:
        if len(pattern) > PATTERN_CHARS:
            raise UsageError(
                f"A protected-path pattern of {len(pattern):,} characters; corral takes at most "
                f"{PATTERN_CHARS:,}. Nothing was saved.",
                code="pattern-too-long",
                hint="A pattern names paths, such as db/schema.sql or migrations/**.",
            )
    return tuple(p for p in sanitize_paths([p.strip() for p in patterns]) if p)


_NOT_BRANCH_HINT = "Name a branch (e.g. --target main); to merge into what HEAD is on now, leave --target out."


def _branch(project: Project, name: str) -> str:
    branch_target(project, name)
    return name


def branch_target(project: Project, name: str) -> None:
    """Refuse a target that is not a branch name: HEAD, a commit id, a tag, ``refs/…`` or a revision.

    accept moves ``refs/heads/<target>``, so anything else would be refused there for ever;
    a branch that does not exist yet is allowed (it may be made before the task starts).
    """
    git = project.git
    plain = git.run("check-ref-format", "--branch", name, cwd=project.repo, check=False)
    symbolic = name == "@" or (name.endswith("HEAD") and name.upper() == name)
    if (
        symbolic
        or name.startswith(("refs/", "-"))
        or plain.returncode != 0
        or plain.stdout.strip() != name
        or (
            not git.ref_exists(f"refs/heads/{name}", cwd=project.repo)
            and git.rev_parse(name, cwd=project.repo) is not None
        )
    ):
        raise UsageError(
            f"The target '{name}' is not a branch name; a task merges into a branch.",
            code="target-not-a-branch",
            hint=_NOT_BRANCH_HINT,
        )


def create(
    project: Project,
    goal: str,
    *,
    actor: Actor,
    ref: str | None = None,
    parent: str | None = None,
    harness: str | None = None,
    model: str | None = None,
    protect: Sequence[str] = (),
    prompt: str = "",
    target: str | None = None,
) -> Task:
    clean_goal = _goal(project, goal)
    clean_prompt = _prose(project, "prompt", prompt) if prompt else ""
    if ref is not None:
        validate_ref(ref)
    with project.store.write() as tx:
        parent_task = resolve_task(tx, parent) if parent else None
        if parent_task is not None and is_terminal(parent_task.status):
            raise RefusedError(
                f"The parent {parent_task.ref} is {parent_task.status.value}; a subtask merges into "
                "its parent's branch, which no longer takes work.",
                code="parent-terminal",
                hint=f"Reopen it first (corral reopen {parent_task.ref}) or create the task without --parent.",
            )
        target_branch = None
        if parent_task is None:
            target_branch = target or project.git.current_branch(project.repo)
            if not target_branch:
                raise UsageError(
                    f"The repository at {project.repo} has a detached HEAD, so corral cannot tell which "
                    "branch the task should merge into.",
                    code="no-target",
                    hint="Check out that branch, or pass --target BRANCH.",
                )
            target_branch = sanitize_field(target_branch)
            if target is not None:
                branch_target(project, target_branch)
        new = NewTask(
            ref=ref or unique_ref(clean_goal, lambda r: tx.task_by_ref(r) is not None),
            goal=clean_goal,
            prompt=clean_prompt,
            parent_id=parent_task.id if parent_task else None,
            harness=harness or project.config["harness"],
            model=model or project.config["model"],
            target_branch=target_branch,
            protected=_protect(protect),
        )
        refuse_harness_misconfigured(project, new.harness, {})
        return tx.insert_task(new, actor)


def edit(
    project: Project,
    given: str,
    *,
    goal: str | None = None,
    prompt: str | None = None,
    protect: Sequence[str] | None = None,
    harness: str | None = None,
    model: str | None = None,
    target: str | None = None,
    settings: Sequence[str] = (),
    unset: Sequence[str] = (),
    actor: Actor = Actor.HUMAN,
) -> Task:
    """Change a task that is not terminal.

    ``settings`` are ``KEY=VALUE`` items the task keeps as its own settings, ``unset`` the keys
    it stops keeping (it then follows the repository's settings again).
    """
    clean_goal = _goal(project, goal) if goal is not None else UNSET
    clean_prompt = _prose(project, "prompt", prompt) if prompt is not None else UNSET
    given_settings = parse_settings(settings, unset, actor)
    dropped = {k.strip() for k in unset}
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        if not may(Op.EDIT, task.status):
            raise RefusedError(
                f"Task {task.ref} is {task.status.value}: its goal, prompt, parent and harness are frozen.",
                code="task-frozen",
                hint=f"Reopen it first: corral reopen {task.ref}",
            )
        own = {k: v for k, v in task.settings.items() if k not in dropped}
        for key, value in given_settings.items():
            own[key] = {"value": value, "source": "task", "origin": "corral edit --set"}
        if harness is not None or given_settings:
            refuse_harness_misconfigured(project, harness or task.harness, {k: v["value"] for k, v in own.items()})
        metadata = {**task.metadata, TASK_SETTINGS: own} if settings or unset else UNSET
        return tx.update_task(
            task.id,
            goal=clean_goal,
            prompt=clean_prompt,
            protected=_protect(protect) if protect is not None else UNSET,
            harness=harness if harness is not None else UNSET,
            model=model if model is not None else UNSET,
            target_branch=_branch(project, sanitize_field(target)) if target is not None else UNSET,
            metadata=metadata,
        )


#: Settings a task has as fields of its own, and the option that sets each.
_FIELD_OPTIONS = {"harness": "--harness", "model": "--model", "protected": "--protect"}


def parse_settings(given: Sequence[str], unset: Sequence[str], actor: Actor) -> dict[str, SettingValue]:
    """``KEY=VALUE`` items as typed values, each checked against the settings schema; ``unset`` keys checked too.

    A key that is no setting names the nearest; a setting that is not the task's to keep
    says where it is set instead; a setting that widens what an agent may do, or makes corral
    execute something, is taken from a person only.
    """
    out: dict[str, SettingValue] = {}
    for item in given:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(
                f"--set takes KEY=VALUE, not {item!r}.", code="bad-setting", hint="e.g. --set watchdog_timeout=600"
            )
        schema = _task_setting(key, actor)
        out[key] = schema.coerce(raw, f"--set {key}")
    for key in unset:
        _task_setting(key.strip(), actor)
    both = sorted(set(out) & {k.strip() for k in unset})
    if both:
        raise UsageError(f"Both set and unset: {', '.join(both)}.", code="bad-setting", hint="Give each key once.")
    return out


def _task_setting(key: str, actor: Actor) -> Setting:
    schema = BY_NAME.get(key)
    if schema is None:
        nearest = difflib.get_close_matches(key.lower().replace("-", "_"), list(BY_NAME), n=1, cutoff=0.6)
        hint = f"Did you mean {nearest[0]}?" if nearest else "See them all: corral config show"
        raise UsageError(f"corral has no setting named '{key}'.", code="unknown-setting", hint=hint)
    if key in _FIELD_OPTIONS:
        raise UsageError(
            f"A task's {key} is one of its fields.",
            code="not-a-task-setting",
            hint=f"It has an option of its own: {_FIELD_OPTIONS[key]} on corral create and on corral edit.",
        )
    if key not in TASK_SCOPED:
        raise UsageError(
            f"{key} applies to the whole repository, not to one task.",
            code="not-a-task-setting",
            hint=f"Set it in your settings file or with {schema.env_var}. A task keeps its own: "
            + ", ".join(sorted(TASK_SCOPED))
            + ".",
        )
    if actor is not Actor.HUMAN and schema.trust is not Trust.ANYWHERE:
        raise RefusedError(
            f"{key} is taken from a person only: it widens what an agent may do or makes corral execute something.",
            code="setting-needs-person",
            hint=f"Run the command yourself (CORRAL_ACTOR is {actor.value}).",
        )
    return schema


def refuse_harness_misconfigured(project: Project, harness: str | None, own: dict[str, SettingValue]) -> None:
    """The preflight at create and edit: a harness corral does not know, or one that cannot run as
    configured (a ``command`` harness with no command), is refused now. A missing executable or an
    unreadable harness file is left for ``start`` to refuse: it may be installed or fixed by then."""
    from corral.engine.operations import preflight  # only a create or an edit that names a harness needs it

    try:
        preflight.check_harness(project, harness, own)
    except HarnessNotFound:
        return
    except HarnessMisconfigured as exc:
        if exc.code == "harness-config-unreadable":
            return
        raise


class Ended(Struct, frozen=True):
    task: Task
    archived: str | None
    warning: str | None = None


def abandon(project: Project, given: str, *, reason: str, actor: Actor, how: str) -> Ended:
    """``close`` and ``reject``: the task becomes abandoned, its work saved and archived."""
    why = _prose(project, "reason", reason)
    if not why.strip():
        raise UsageError(f"{how.capitalize()} needs a reason.", hint=f"corral {how} {shlex.quote(given)} -m 'why'")
    from corral.engine.recovery.chats import refuse_while_chat  # only a close or a reject needs these
    from corral.engine.recovery.merges import escape_stranded

    escape_stranded(project, given, Op(how))  # a merge its accept left behind is put back first
    from corral.engine.operations.forge_accept import withdraw  # its pull request closed, with why (docs/forge.md)

    forge_warning = withdraw(project, given, actor, why, how)
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        if task.status is Status.ABANDONED:
            raise RefusedError(
                f"Task {task.ref} is already abandoned.",
                code="already-abandoned",
                hint=f"Nothing to {how}. To bring it back: corral reopen {task.ref}",
            )
        check_operation(Op(how), task.status, task.ref)
        check_transition(task.status, Status.ABANDONED, actor, what=f"{how} {task.ref}")
        # as unblock, resume and accept do: the worktree a chat runs in is not taken away from it
        refuse_while_chat(project, task, how, effect="take away the worktree it runs in")
        tx.set_status(task.id, Status.ABANDONED, actor, why, expected_from=task.status, resting_cause=None)
        session = tx.get_session(task.session_id) if task.session_id else None
        if session is not None and session.ended_at is None:
            tx.update_session(session.id, outcome="closed" if how == "close" else "rejected", ended_at=tx.now())
        task = tx.get_task(task.id) or task
    archived = warning = None
    if session is not None:
        try:
            from corral.engine.runtime.branch_check import ensure  # a symbolic ref the agent left: put back

            ensure(project.git, project.repo, session.branch or task.branch)
            archived = workspace.save_and_remove(project, task, session, how)
        except CorralError as exc:
            warning = f"The task is abandoned, but its worktree was kept: {exc.message}"
    return Ended(task, archived, " ".join(w for w in (warning, forge_warning) if w) or None)


def reopen(project: Project, given: str, *, reason: str | None, actor: Actor) -> Task:
    why = _prose(project, "reason", reason) if reason else None
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        check_operation(Op.REOPEN, task.status, task.ref, hint=f"See it with corral show {task.ref}.")
        # An accepted task with no session has no merged work to find fault with: it goes back to backlog.
        accepted_work = task.status is Status.COMPLETE and task.session_id is not None
        if accepted_work and not (why and why.strip()):
            raise UsageError(
                f"Reopening the accepted task {task.ref} needs a reason.",
                hint=f"corral reopen {task.ref} -m 'what is wrong with the merged work'",
            )
        to_blocked = accepted_work or workspace.has_agent_work(project, tx, task)
        last = tx.get_session(task.session_id) if task.session_id else None
    if not to_blocked:
        with project.store.write() as tx:
            tx.set_status(task.id, Status.BACKLOG, actor, why or "reopened", expected_from=task.status)
            return tx.get_task(task.id) or task
    # Restore the work before the status says blocked, so a blocked task always has its worktree.
    ws = workspace.restore(project, task, last.base_commit if last else None)
    with project.store.write() as tx:
        session = tx.insert_session(task.id, worktree=str(ws.worktree), branch=ws.branch, base_commit=ws.base_commit)
        tx.update_session(session.id, git_start_sha=project.git.rev_parse(ws.branch, cwd=project.repo))
        tx.park(task.id, actor, why or "reopened", expected_from=task.status)
        return tx.get_task(task.id) or task


def comment(project: Project, given: str, body: str, *, actor: Actor) -> Note:
    text = _prose(project, "comment", body)
    if not text.strip():
        raise UsageError("The comment is empty.", hint=f"corral comment {shlex.quote(given)} -m 'your note'")
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        return tx.add_comment(task.id, actor, text)


def journal_add(project: Project, given: str, body: str, *, actor: Actor) -> Note:
    text = _prose(project, "journal entry", body)
    if not text.strip():
        raise UsageError(
            "The journal entry is empty.", hint=f"corral journal {shlex.quote(given)} -m 'decision and why'"
        )
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        return tx.add_journal_entry(task.id, actor, text)


def journal(project: Project, given: str) -> tuple[Task, list[Note]]:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        return task, tx.journal(task.id)


class Diff(Struct, frozen=True):
    task: Task
    base: str
    tip: str
    commits: list[str]
    text: str
    #: Paths the worktree holds uncommitted: not part of the diff, nor of what accept merges.
    uncommitted: tuple[str, ...] = ()
    #: The tip is not yet verified (a confined turn's work, read while it runs, before its objects and
    #: branch are checked): shown, but only the verified tip is recorded as reviewed, so accept asks
    #: about the rest afterwards.
    unverified: bool = False


def diff(
    project: Project,
    given: str,
    *,
    stat: bool = False,
    actor: Actor = Actor.HUMAN,
    caller_task_id: str | None = None,
    surface: str = "cli",
) -> Diff:
    """What the task's branch changed against its target, read from its commits (never the worktree's
    files, nor with the task's attributes: :mod:`corral.engine.operations.reviewed`), and its commits.

    The tip shown of a live branch is recorded for ``actor`` (and ``caller_task_id``, an agent's own
    task), so accept can tell whether the branch moved since. Uncommitted changes in the worktree are named apart:
    accept merges commits only (and refuses while there are any).
    """
    from corral.engine.operations import reviewed

    git, repo = project.git, project.repo
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        session = tx.get_session(task.session_id) if task.session_id else None
        target = workspace.target_branch(tx, task)
        lease = tx.lease(task.id)
    # Its turns ran on workers: the remote holds the branch as pushed (refused while it does not yet).
    project.placement.review_branch(project, task, target, lease, "diff")
    live = reviewed.branch_tip(project, task.branch)
    tip = live if live is not None else git.rev_parse(workspace.archive_ref(task), cwd=repo)
    if session is None or tip is None:
        raise NotFoundError(f"Task {task.ref} has no work yet.", code="no-work", hint=f"corral start {task.ref}")
    base = (
        git.out("merge-base", f"refs/heads/{target}", tip, cwd=repo)
        if git.rev_parse(f"refs/heads/{target}", cwd=repo)
        else (session.base_commit or tip)
    )
    base = _past_accepted_work(project, target, session.git_start_sha, base, tip)
    log = ("log", "--oneline", "--no-decorate", "--no-show-signature", f"{base}..{tip}", "--")
    commits = git.out(*log, cwd=repo).splitlines()
    text = reviewed.review_diff(project, base, tip, stat=stat)
    worktree = session.worktree if live is not None and session.worktree and Path(session.worktree).is_dir() else None
    uncommitted = tuple(git.dirty_paths(worktree)) if worktree is not None else ()
    unverified = False
    if live is not None:  # an archived tip has no branch to accept: a finished task's row is left as it is
        from corral.engine.runtime.branch_check import verified_tip

        # Only a tip corral verified is what a person reviewed: the objects of one a turn is still writing
        # are read unchecked (its quarantine), and their bytes may differ once the turn ends.
        verified = verified_tip(git, repo, task.ref)
        unverified = verified is not None and verified != tip and _objects_in_quarantine(project, task.id)
        # What the person can have reviewed is the verified tip: commits beyond it are named by accept again.
        reviewed.record_shown(
            project,
            task.id,
            verified if unverified and verified else tip,
            reviewed.viewer(actor, caller_task_id),
            surface,
        )
    return Diff(task, base, tip, commits, text, uncommitted, unverified)


def _past_accepted_work(project: Project, target: str, start: str | None, base: str, tip: str) -> str:
    """Where the diff starts for a task reopened after its work was accepted: at the tip the reopen restored.

    accept squashes, so no commit of the branch is an ancestor of the target and the merge base lies before
    all of that work: it would read as new. When the session began at a commit (``start``) that is not an
    ancestor of the target but whose work the target's tree already holds, and the tip grew from it, what is
    new is what came after it. Any other task is left with its merge base (one comparison, no git call).
    """
    if not start or start == base:
        return base
    git, repo = project.git, project.repo
    ref = f"refs/heads/{target}"

    def ancestor(older: str, newer: str) -> bool:
        return git.run("merge-base", "--is-ancestor", older, newer, cwd=repo, check=False).returncode == 0

    if ancestor(start, ref) or not ancestor(start, tip):
        return base
    merged = git.run("merge-tree", "--write-tree", ref, start, cwd=repo, check=False)
    held = merged.returncode == 0 and merged.stdout.split()[:1] == [git.out("rev-parse", f"{ref}^{{tree}}", cwd=repo)]
    return start if held else base


def _objects_in_quarantine(project: Project, task_id: str) -> bool:
    """Whether the task's branch may hold objects not yet verified: its confined turn's quarantine, or a
    pair's, is still open (its objects are read unchecked, through the store's alternates, until it settles)."""
    from corral.engine.runtime import protocol as proto
    from corral.engine.runtime import quarantine

    command = proto.read_record(project.paths.protocol_dir(task_id) / proto.COMMAND, proto.Command)
    spec = command.sandbox if command is not None else None
    if command is None or spec is None or not spec.confined or not spec.git_common_dir:
        return False
    if quarantine.path_for(spec.git_common_dir, command.command_id).is_dir():
        return True
    return any(name.startswith("pair-") for name in quarantine.leftovers(spec.git_common_dir))


def delete(project: Project, given: str, *, actor: Actor) -> Task:
    """A terminal task and everything kept for it: archive ref, branch, worktree, logs, evidence, rows."""
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        check_operation(Op.DELETE, task.status, task.ref, hint=f"Close it first: corral close {task.ref} -m 'why'")
        children = tx.children(task.id)
        if children:
            raise RefusedError(
                f"{task.ref} has subtasks: {', '.join(c.ref for c in children)}.",
                code="has-subtasks",
                hint="Delete them first.",
            )
        sessions = tx.sessions(task.id)
    git, repo = project.git, project.repo
    safe = is_plain_id(task.id) and is_ref(task.ref)  # else a row no corral wrote: nothing of ours under its names
    if safe:
        own = project.paths.worktree(task.ref).resolve()
        for session in sessions:
            # Only the task's own worktree: a shared store's row could name any directory, another task's too.
            if session.worktree and Path(session.worktree).resolve() == own and own.exists():
                git.worktree_remove(own, cwd=repo)
        delete_task_branch(git, repo, task.branch)
        git.delete_ref(workspace.archive_ref(task), cwd=repo)
        git.delete_ref(f"refs/corral/verified/{task.ref}", cwd=repo)  # the branch check's, for this task
    with project.store.write() as tx:
        tx.delete_task(task.id)
    if safe:
        shutil.rmtree(project.paths.task_dir(task.id), ignore_errors=True)
        from corral.engine.read.diagnostics import remove_for_task

        remove_for_task(project.paths, task.id)
    return task
