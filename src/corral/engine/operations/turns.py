"""Lifecycle operations that launch an agent turn: start, unblock, resume, ask and an accept's pre-accept turn.

Save first, act second: each writes the human turn (feedback ``pending`` where it
carries feedback) and the move to ``working`` in one transaction, then launches the
supervisor through one skeleton (:func:`_launch`). They return once the supervisor runs;
the turn goes on without the CLI. On the shared store the same transaction takes the task's
lease for this host when the turn runs here (:func:`_hold_here`), so no other host ever takes
the turn for its own from the moment it is recorded.

A person's launch checks the harness first (:func:`check_harness`), before anything is
recorded, and keeps on the task the settings its environment gives the turn
(:func:`record_launch_settings`); every turn runs with the task's own settings over the
process's (``engine.resolve.task_config``, docs/architecture.md#a-tasks-own-settings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace
from msgspec.structs import replace as struct_replace

from corral import crashpoints
from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.breaker import Breaker, Counters
from corral.domain.clock import new_id
from corral.domain.explain import decide_files
from corral.domain.operations_table import Op, check_operation
from corral.domain.records import (
    PERMISSION_RELEASED,
    TASK_SETTINGS,
    FailureEvidence,
    FeedbackDelivery,
    PossibleEffects,
    RestingCause,
    Session,
    Task,
    Turn,
)
from corral.domain.sanitize import check_size, sanitize_paths, sanitize_prose
from corral.domain.settings import TASK_RECORDED
from corral.domain.status import TERMINAL, Status, check_transition
from corral.domain.team import TurnPlan
from corral.domain.violations import Decision, plan_decisions
from corral.engine import workspace
from corral.engine.config import Config
from corral.engine.operations import launch, preflight
from corral.engine.project import Project
from corral.engine.read.incident_views import permission_hold
from corral.engine.read.translator import Translator
from corral.engine.recovery.chats import refuse_while_chat
from corral.engine.recovery.faults import internal_fault
from corral.engine.recovery.merges import escape_stranded
from corral.engine.resolve import resolve_task, task_config
from corral.engine.runtime import branch_check
from corral.engine.runtime import protocol as proto
from corral.engine.task_locks import task_lock
from corral.errors import (
    CorralError,
    HarnessMisconfigured,
    LaunchFailed,
    PrepareFailed,
    RefusedError,
    UnsafeName,
    UsageError,
)
from corral.store import Tx


class Started(Struct, frozen=True):
    task: Task
    launched: launch.Launched


@contextmanager
def owned(project: Project, task: Task) -> Iterator[None]:
    """After an operation moved the task to working: any exception rests it instead of leaving it working.

    An execution fault (docs/architecture.md#how-a-turns-end-is-read): the task goes interrupted
    with the cause "internal fault", never auto-resumed, and the error reaches the caller
    as a ``CorralError``. This is the one fault handler of a local launch: ``launch.launch``
    has none of its own, so a fault is recorded once.
    """
    try:
        yield
    except Exception as exc:
        internal_fault(project, task, exc)
        if isinstance(exc, CorralError):
            raise
        raise LaunchFailed(
            f"corral could not run the turn of {task.ref}: {type(exc).__name__}: {exc}",
            hint=f"The task rests interrupted with the cause; see corral show {task.ref}.",
        ) from exc


class TurnSpec(Struct, frozen=True):
    """What one launched turn is: its kind, its prompt's body, the feedback it delivers, its merge."""

    kind: str
    body: str
    delivered: tuple[str, ...] = ()
    sync_before_work: bool = False
    announce_merge: bool = True
    read_only: bool = False


def _launch(
    project: Project,
    task: Task,
    session: Session,
    turn: Turn,
    target: str,
    spec: TurnSpec | Callable[[Session], TurnSpec],
    *,
    committed: str,
    prepare: Callable[[Session], Session] | None = None,
    reverts: Sequence[tuple[str, str | None]] = (),
    pending: Sequence[Turn] = (),
) -> Started:
    """The one launch skeleton every turn kind uses, once its human turn and ``working`` are committed.

    Inside :func:`owned`: any fault rests the task. ``prepare`` does the work that must follow the
    commit (reverting files, reading the worktree); ``spec`` may be computed from its result.
    For the workers (``dispatch = "workers"``) the same work is queued as data instead: the files
    to revert (``reverts``) and, for a resume whose prompt depends on the worktree, the pending
    feedback (``pending``); the worker that claims the turn does it in its own worktree.
    """
    with owned(project, task):
        crashpoints.hit(committed)
        if turn.actor is not Actor.SYSTEM:
            task = record_launch_settings(project, task)
        if project.placement.hand_over(project, task, turn, partial(_plan, turn.kind, spec, target, reverts, pending)):
            return Started(task, _queued(project, task, turn))
        if prepare is not None:
            session = prepare(session)
        plan = spec(session) if callable(spec) else spec
        _command, launched = start_turn(project, task, session, turn, plan, target, task_config(project.config, task))
        return Started(task, launched)


def start_turn(
    project: Project,
    task: Task,
    session: Session,
    turn: Turn,
    plan: TurnSpec,
    target: str,
    config: Config,
    *,
    fence: proto.Fence | None = None,
    confirm: Callable[[], None] | None = None,
) -> tuple[proto.Command, launch.Launched]:
    """The end of the one launch skeleton, for every turn wherever it runs (a local launch, a worker's claim):
    its command built from ``plan`` with the settings it runs with (``config``), kept beside its logs, and its
    supervisor started. A worker's turn carries the ``fence`` of its claim (every write of its results checks
    the epoch) and is confirmed still held (``confirm``) just before its supervisor starts; a local turn is
    held by the transaction that recorded it."""
    command = launch.build_command(
        replace(project, config=config),
        task,
        session,
        turn,
        kind=plan.kind,
        body=plan.body,
        delivered=list(plan.delivered),
        target=target,
        sync_before_work=plan.sync_before_work,
        announce_merge=plan.announce_merge,
        read_only=plan.read_only,
    )
    if fence is not None:
        command = struct_replace(command, fence=fence)
    # The turn's settings stay on record beside its logs: the protocol's copy goes with the next turn.
    proto.write_command(Path(command.log_dir), command)
    if confirm is not None:
        confirm()
    return command, launch.launch(project, task, command)


def _queued(project: Project, task: Task, turn: Turn) -> launch.Launched:
    """A turn handed to the workers: no supervisor here; its protocol and logs are where a worker's are shipped."""
    assert turn.command_id is not None
    log_dir = project.paths.turn_dir(task.id, turn.sequence)
    return launch.Launched(turn.command_id, None, project.paths.protocol_dir(task.id), log_dir)


def _plan(
    kind: str,
    spec: TurnSpec | Callable[[Session], TurnSpec],
    target: str,
    reverts: Sequence[tuple[str, str | None]],
    pending: Sequence[Turn],
) -> TurnPlan:
    """The turn as a worker will launch it (docs/workers.md): a computed spec is a resume after a crash."""
    if callable(spec):
        return TurnPlan(
            kind,
            "",
            target,
            delivered=tuple(t.id for t in pending),
            announce_merge=False,
            resume_after_crash=True,
            pending=tuple(t.content for t in pending),
        )
    return TurnPlan(
        spec.kind,
        spec.body,
        target,
        delivered=spec.delivered,
        sync_before_work=spec.sync_before_work,
        announce_merge=spec.announce_merge,
        read_only=spec.read_only,
        reverts=tuple(reverts),
    )


def _hold_here(project: Project, tx: Tx, task_id: str, command_id: str, actor: Actor) -> None:
    """On the shared store, a turn this host will run itself is held by this host's identity, in the transaction
    that records it (docs/workers.md#turns-run-on-your-own-host): from that moment every other host reads
    it as this host's and leaves it alone, before its supervisor is even started. A turn for the workers
    takes its lease when it is queued (``placement.hand_over``); on SQLite one host keeps everything."""
    project.placement.hold_here(project, tx, task_id, command_id, actor)


def check_harness(project: Project, task: Task) -> None:
    """Before a person's launch records anything: a harness that cannot run is refused now, not in the background.

    With the settings the turn would run with (:func:`launch_settings`); see ``operations/preflight.py``.
    A turn for the workers is checked on the worker that claims it, against its own settings: here,
    only that it can be queued.
    """
    if project.placement.check_hand_over(project):
        return
    settings = {k: v["value"] for k, v in launch_settings(project, task).items()}
    preflight.check_harness(project, task.harness, settings)
    wanted = str(settings.get("sandbox") or task_config(project.config, task)["sandbox"])
    if wanted == "bwrap":  # required and unable to run: refused now, never a turn run unconfined
        from corral.adapters.sandbox import resolve

        error = resolve(wanted).error
        if error is not None:
            raise HarnessMisconfigured(error, code="sandbox-unavailable", hint="See docs/harnesses.md#sandbox.")


def launch_settings(project: Project, task: Task) -> dict[str, dict[str, Any]]:
    """The settings ``task`` keeps as its own once a person launches its turn from this process.

    What this process's environment sets of ``TASK_RECORDED`` is taken (the environment applies only to the
    process that reads it; recorded, it applies to every later turn of the task, an
    auto-resume by another process included), except over a value the task was given with
    ``corral edit --set``: that is the person's word for this one task.
    """
    own = task.settings
    for name in sorted(TASK_RECORDED):
        found = project.config.values.get(name)
        if found is not None and found.source == "env" and own.get(name, {}).get("source") != "task":
            own[name] = {"value": found.value, "source": "env", "origin": found.origin}
    return own


def record_launch_settings(project: Project, task: Task) -> Task:
    """Keep :func:`launch_settings` on the task (written only when they changed)."""
    own = launch_settings(project, task)
    if own == task.settings:
        return task
    with project.store.write() as tx:
        current = tx.get_task(task.id) or task
        merged = {**current.settings, **{k: v for k, v in own.items() if v.get("source") == "env"}}
        return tx.update_task(task.id, metadata={**current.metadata, TASK_SETTINGS: merged}, touch=False)


def _feedback(project: Project, text: str, field: str = "feedback") -> str:
    clean = sanitize_prose(text)
    check_size(field, clean, int(project.config["text_cap"]))
    if not clean.strip():
        raise UsageError(f"The {field} is empty.", code="no-text", hint="Pass -m 'TEXT', pipe it, or use $EDITOR.")
    return clean


def _session(tx: Tx, task: Task) -> Session:
    session = tx.get_session(task.session_id) if task.session_id else None
    if session is None or not session.worktree:
        raise RefusedError(
            f"Task {task.ref} has no session to continue.", code="no-session", hint=f"Start it: corral start {task.ref}"
        )
    return session


def _check_turn_worktree(project: Project, task: Task, session: Session, actor: Actor) -> None:
    """A turn for the workers runs in the worktree of the worker that claims it; any other, in this one."""
    if not project.placement.goes_to_workers(project, task.id, actor):
        _check_worktree(task, session)


def _check_worktree(task: Task, session: Session) -> None:
    if session.worktree and not Path(session.worktree).is_dir():
        raise RefusedError(
            f"The worktree of {task.ref} is missing ({session.worktree}).",
            code="worktree-missing",
            hint=f"Restore it with `git worktree add {session.worktree} {task.branch}`, or close the task.",
        )


def start(project: Project, given: str, *, actor: Actor, message: str | None = None) -> Started:
    msg = _feedback(project, message, "message") if message else None
    with project.store.read() as tx:
        first = resolve_task(tx, given)
    # Two starts at once serialize on the task's lock: the second reads the task only after the
    # first recorded its session, and is told it already started (never to rename a branch).
    with task_lock(project, first.id, what=f"start by {actor.value}", timeout=60):
        task, session, turn, target, content = _start(project, first.id, actor, msg)
    spec = TurnSpec("start", content, delivered=(turn.id,))
    return _launch(project, task, session, turn, target, spec, committed="start.committed")


def _start(project: Project, task_id: str, actor: Actor, msg: str | None) -> tuple[Task, Session, Turn, str, str]:
    """The part of a start that holds the task's lock: check, make the workspace, record the session."""
    with project.store.read() as tx:
        task = resolve_task(tx, task_id)
        if task.status is not Status.BACKLOG and task.session_id is not None:
            raise workspace.started_error(task)
        check_operation(
            Op.START,
            task.status,
            task.ref,
            hint=f"To give feedback on a started task: corral unblock {task.ref} -m 'your feedback'",
        )
        check_transition(task.status, Status.WORKING, actor, what=f"start {task.ref}")
        if task.parent_id:
            parent = tx.get_task(task.parent_id)
            if parent is None or parent.session_id is None or parent.status in TERMINAL:
                raise RefusedError(
                    f"The parent of {task.ref} has no branch yet.",
                    code="parent-not-started",
                    hint=(
                        f"Start the parent first: corral start {parent.ref}"
                        if parent is not None and parent.status not in TERMINAL
                        else f"Its parent cannot start again; close the subtask: corral close {task.ref} -m 'no parent'"
                    ),
                )
        target = workspace.target_branch(tx, task)
    check_harness(project, task)
    try:
        ws = workspace.prepare(project, task, target)
    except PrepareFailed as exc:
        evidence = FailureEvidence(
            source="corral",
            code="prepare-failed",
            phase="prepare",
            category="prepare",
            possible_effects=PossibleEffects.NONE,
            details=Translator().details({"reason": exc.message}),
        )
        cause = RestingCause(
            "prepare-failed", project.clock(), actor, evidence=evidence, details={"summary": exc.message}
        )
        with project.store.write() as tx:
            tx.set_resting_cause(task.id, cause)
        raise
    crashpoints.hit("start.prepared")
    content = prompts.first_turn(task.goal, task.prompt, msg)
    command_id = new_id()
    with project.store.write() as tx:
        session = tx.insert_session(task.id, worktree=str(ws.worktree), branch=ws.branch, base_commit=ws.base_commit)
        session = tx.update_session(session.id, git_start_sha=ws.base_commit)
        turn = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=actor,
            kind="start",
            content=content,
            session_id=session.id,
            feedback_delivery=FeedbackDelivery.PENDING,
            delivered=(),
            command_id=command_id,
        )
        tx.set_status(task.id, Status.WORKING, actor, "start", expected_from=Status.BACKLOG, resting_cause=None)
        _hold_here(project, tx, task.id, command_id, actor)
        task = tx.get_task(task.id) or task
    return task, session, turn, target, content


def _decide_files(
    project: Project,
    tx: Tx,
    task: Task,
    approve: Sequence[str],
    revert: Sequence[str],
    revert_rest: bool,
    actor: Actor,
) -> list[tuple[str, str | None]]:
    """Record file decisions; returns the paths to revert. Refuses while any pending file is undecided."""
    records = {v.path: v.decision for v in tx.violations(task.id)}
    named = [*approve, *revert]
    if named and not records:
        raise UsageError(
            f"Task {task.ref} has no protected-file violations to decide.",
            code="no-violations",
            hint="Drop --approve-file / --revert-file.",
        )
    plan = plan_decisions(records, sanitize_paths(list(approve)), sanitize_paths(list(revert)), revert_rest=revert_rest)
    if plan.unknown:
        raise UsageError(
            f"Not a violation of {task.ref}: {', '.join(plan.unknown)}",
            code="unknown-file",
            hint="See the files with corral show " + task.ref,
        )
    if plan.conflicting:
        raise UsageError(f"Both approved and reverted: {', '.join(plan.conflicting)}", code="conflicting-decision")
    if plan.undecided:
        raise RefusedError(
            f"Task {task.ref} has protected files to decide first: {', '.join(plan.undecided)}",
            code="undecided-files",
            hint=f"Decide them: {decide_files(task.ref, plan.undecided)}",
        )
    if plan.decide:
        tx.decide_violations(task.id, plan.decide, actor)
    sources = {v.path: v.check_from for v in tx.violations(task.id)}
    return [(p, sources.get(p)) for p, d in sorted(plan.decide.items()) if d is Decision.REVERTED]


def revert_files(project: Project, session: Session, reverts: Sequence[tuple[str, str | None]]) -> str | None:
    """Restore reverted files from the commit the check started from (docs/architecture.md#protected-paths).

    A file that did not exist there is removed. The revert is committed, so the next
    turn starts from it.
    """
    if not reverts or not session.worktree:
        return None
    git, worktree = project.git, session.worktree
    branch = session.branch or ""
    # The branch is followed by name, never through the worktree's HEAD, and only as a plain ref.
    branch_check.ensure(git, project.repo, branch)
    for path, check_from in reverts:
        # Both come from the store (on a shared one, from another host): a path must stay inside the
        # worktree (no parent a symlink the branch brought) and a source must be a commit, not an option.
        _inside(Path(worktree), path)
        wanted = check_from or session.base_commit or f"refs/heads/{branch}"
        commit = f"{wanted}^{{commit}}"
        found = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", commit, cwd=worktree, check=False)
        if found.returncode != 0:
            raise UnsafeName(
                f"A revert of {path} names a source that is not a commit: '{wanted[:80]}'.",
                hint="Nothing was reverted. Revert the file by hand in the task's worktree, or approve it.",
            )
        source = found.stdout.strip()
        literal = f":(literal){path}"  # never a pathspec's magic
        exists = git.run("cat-file", "-e", f"{source}:{path}", cwd=worktree, check=False).returncode == 0
        if exists:
            git.run("checkout", source, "--", literal, cwd=worktree)
        else:
            git.run("rm", "-q", "-f", "--ignore-unmatch", "--", literal, cwd=worktree)
            target = Path(worktree) / path
            if target.exists() or target.is_symlink():
                target.unlink()
    git.save_work(
        worktree, f"refs/heads/{branch}", "corral: revert protected files\n\n" + "\n".join(p for p, _ in reverts)
    )
    return git.branch_value(f"refs/heads/{branch}", cwd=worktree)


def _inside(worktree: Path, path: str) -> None:
    """Refuse a path that would lead a revert out of ``worktree``: absolute, ``..``, or beneath a symlink."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise UnsafeName(f"A revert names a path outside the worktree: '{path[:80]}'.", hint="Nothing was reverted.")
    here = worktree
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise UnsafeName(
                f"A revert of {path[:80]} goes through the symlink {part}: it would leave the worktree.",
                hint="Nothing was reverted. Remove or approve the file by hand in the task's worktree.",
            )


def unblock(
    project: Project,
    given: str,
    *,
    actor: Actor,
    message: str,
    approve: Sequence[str] = (),
    revert: Sequence[str] = (),
    revert_rest: bool = False,
    retry_blocked: bool = False,
) -> Started:
    """Feedback, and the agent runs again. A task held by a permission blocker its agent reported
    runs again only with ``retry_blocked``: a person (or a builder) confirming one retry of that
    operation, in the same scope — it grants nothing more (docs/incidents.md#permission-blockers)."""
    escape_stranded(project, given, Op.UNBLOCK)  # a merge its accept left behind is put back first
    with project.store.read() as tx:
        held = permission_hold(project, resolve_task(tx, given))
    if held is None and retry_blocked:
        raise UsageError(
            f"{given} is not held by a permission blocker: there is no blocked retry to confirm.",
            code="no-permission-hold",
            hint=f"Give feedback instead: corral unblock {given} -m 'your feedback'",
        )
    if held is not None and not retry_blocked:
        raise RefusedError(
            f"{given} is {held.line()}.",
            code="permission-hold",
            hint=f"Confirm one retry of it (that grants nothing more): corral unblock {given} --retry-blocked",
        )
    if held is not None and actor is Actor.AGENT:
        raise RefusedError(
            "An agent cannot confirm a permission blocker's retry: a person (or the builder) does.",
            code="agent-out-of-scope",
            hint="Wait for the person who runs you.",
        )
    if held is not None:
        message = (message + "\n\n" if message.strip() else "") + prompts.retry_confirmed(held.summary, held.resource)
    from corral.engine.operations import forge_accept  # the forge's review comments and failed checks, once

    feedback = _feedback(project, forge_accept.with_feedback(project, given, message))
    command_id = new_id()
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        if held is not None:  # released before the turn: one retry is what this unblock grants
            released = [*task.metadata.get(PERMISSION_RELEASED, []), held.incident]
            task = tx.update_task(task.id, metadata={**task.metadata, PERMISSION_RELEASED: released}, touch=False)
        check_operation(Op.UNBLOCK, task.status, task.ref)
        check_transition(task.status, Status.WORKING, actor, what=f"unblock {task.ref}")
        session = _session(tx, task)
        _check_turn_worktree(project, task, session, actor)
        refuse_while_chat(project, task, "unblock")
        check_harness(project, task)
        reverted = _decide_files(project, tx, task, approve, revert, revert_rest, actor)
        turn = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=actor,
            kind="unblock",
            content=feedback,
            session_id=session.id,
            feedback_delivery=FeedbackDelivery.PENDING,
            command_id=command_id,
        )
        forge_accept.clear_feedback(tx, task.id)
        pending = tx.pending_feedback(session.id)
        breaker, counters = Breaker(), Counters.of(session)  # the system's unblock: forge feedback auto-delivered
        launched = breaker.on_auto_deliver(counters) if actor is Actor.SYSTEM else breaker.on_person_launch(counters)
        session = tx.update_session(session.id, **launched.fields())
        tx.set_status(task.id, Status.WORKING, actor, "unblock", expected_from=task.status, resting_cause=None)
        _hold_here(project, tx, task.id, command_id, actor)
        target = workspace.target_branch(tx, task)
        task = tx.get_task(task.id) or task

    def apply_reverts(session: Session) -> Session:
        head = revert_files(project, session, reverted)
        if head is None:
            return session
        # corral's own revert commit is not the agent's change: the next check starts after it.
        with project.store.write() as tx:
            return tx.update_session(session.id, git_start_sha=head)

    spec = TurnSpec(
        "unblock",
        prompts.feedback_block([t.content for t in pending]),
        delivered=tuple(t.id for t in pending),
        sync_before_work=True,
    )
    return _launch(
        project,
        task,
        session,
        turn,
        target,
        spec,
        committed="unblock.committed",
        prepare=apply_reverts,
        reverts=reverted,
    )


def resume(
    project: Project, given: str, *, actor: Actor, kind: str = "resume", command_id: str | None = None
) -> Started:
    command_id = command_id or new_id()  # given: the id a spare supervisor carries (operations/spares.py)
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        check_operation(
            Op.RESUME, task.status, task.ref, hint=f"Or give feedback: corral unblock {task.ref} -m 'your feedback'"
        )
        pending_files = tx.pending_paths(task.id)
        if pending_files:
            raise RefusedError(
                f"Task {task.ref} has protected files to decide first: {', '.join(pending_files)}",
                code="undecided-files",
                hint=f"Decide them as you continue: {decide_files(task.ref, pending_files)}",
            )
        session = _session(tx, task)
        _check_turn_worktree(project, task, session, actor)
        refuse_while_chat(project, task, "resume")
        if actor is not Actor.SYSTEM:  # an auto-resume that cannot run rests the task with its cause
            check_harness(project, task)
        crashed = next((t for t in reversed(tx.turns(task.id, last=3)) if t.role is Role.AGENT), None)
        turn = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=actor,
            kind=kind,
            content="[system] Session interrupted and auto-resumed"
            if actor is Actor.SYSTEM
            else "Resume after the interruption.",
            session_id=session.id,
            command_id=command_id,
        )
        pending = tx.pending_feedback(session.id)
        breaker, counters = Breaker(), Counters.of(session)
        launched = breaker.on_auto_resume(counters) if actor is Actor.SYSTEM else breaker.on_person_launch(counters)
        session = tx.update_session(session.id, **launched.fields())
        tx.set_status(task.id, Status.WORKING, actor, kind, expected_from=Status.INTERRUPTED, resting_cause=None)
        _hold_here(project, tx, task.id, command_id, actor)
        target = workspace.target_branch(tx, task)
        task = tx.get_task(task.id) or task

    def after_crash(session: Session) -> TurnSpec:
        # Clean or dirty as the crashed turn's receipt recorded it (the supervisor's one scan at the
        # turn's end) while the worktree's HEAD is still the one it recorded (read from its files where
        # they are plain: no git process on the way to the resume); else a scan of its own.
        from corral.adapters.tip_files import head_commit

        recorded = crashed.details if crashed is not None else {}
        worktree = session.worktree or "."
        dirty = recorded.get("dirty")
        if not isinstance(dirty, bool) or recorded.get("head") != head_commit(project.git, worktree):
            dirty = bool(project.git.dirty_paths(worktree))
        feedback = [t.content for t in pending]
        if session.harness_session_id is None:  # no session to resume: the agent is told everything again
            body = prompts.resume_without_session(task.goal, task.prompt, dirty, feedback)
        else:
            body = prompts.resume_after_crash(dirty, feedback)
        return TurnSpec(
            kind,
            body,
            delivered=tuple(t.id for t in pending),
            sync_before_work=not dirty,
            announce_merge=False,
        )

    return _launch(
        project,
        task,
        session,
        turn,
        target,
        after_crash,
        committed="resume.committed",
        pending=pending,
    )


def _status_neutral_turn(
    project: Project,
    given: str,
    *,
    actor: Actor,
    kind: str,
    content: str,
    body: str,
    op: Op,
    read_only: bool,
) -> Started:
    """A turn that carries no feedback and whose receipt restores the status it started from
    (an ask, an accept's pre-accept turn)."""
    command_id = new_id()
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        check_operation(op, task.status, task.ref)
        session = _session(tx, task)
        _check_turn_worktree(project, task, session, actor)
        refuse_while_chat(project, task, kind)
        if kind == "ask":
            check_harness(project, task)
        turn = tx.add_turn(
            task.id,
            role=Role.HUMAN,
            actor=actor,
            kind=kind,
            content=content,
            session_id=session.id,
            command_id=command_id,
        )
        tx.set_status(task.id, Status.WORKING, actor, kind, expected_from=task.status)
        _hold_here(project, tx, task.id, command_id, actor)
        target = workspace.target_branch(tx, task)
        task = tx.get_task(task.id) or task
    spec = TurnSpec(kind, body, read_only=read_only)
    return _launch(project, task, session, turn, target, spec, committed=f"{kind}.committed")


def ask(project: Project, given: str, *, actor: Actor, question: str) -> Started:
    """A read-only question; the status is restored on every ending."""
    text = _feedback(project, question, "question")
    return _status_neutral_turn(
        project,
        given,
        actor=actor,
        kind="ask",
        content=text,
        body=prompts.ask(text),
        op=Op.ASK,
        read_only=True,
    )


def answer_of(project: Project, task: Task, command_id: str) -> Turn | None:
    with project.store.read() as tx:
        return tx.turn_by_command(command_id, Role.AGENT)


def pre_accept(project: Project, given: str, *, actor: Actor, prompt: str) -> Started:
    """An accept's last turn: blocked or submitted → working; its receipt restores the status."""
    return _status_neutral_turn(
        project,
        given,
        actor=actor,
        kind="pre-accept",
        content=prompt,
        body=prompt,
        op=Op.PRE_ACCEPT,
        read_only=False,
    )
