"""Lifecycle operations that launch an agent turn: start, unblock, resume, ask and an accept's pre-accept turn.

Save first, act second: each writes the human turn (feedback ``pending`` where it
carries feedback) and the move to ``working`` in one transaction, then launches the
supervisor through one skeleton (:func:`_launch`). They return once the supervisor runs;
the turn goes on without the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from corral import crashpoints
from corral.domain import prompts
from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id
from corral.domain.records import (
    FailureEvidence,
    FeedbackDelivery,
    PossibleEffects,
    RestingCause,
    Session,
    Task,
    Turn,
)
from corral.domain.sanitize import check_size, sanitize_paths, sanitize_prose
from corral.domain.status import TERMINAL, Op, Status, check_operation, check_transition
from corral.domain.violations import Decision, plan_decisions
from corral.engine import workspace
from corral.engine.operations import launch
from corral.engine.operations.pairing import refuse_while_chat
from corral.engine.project import Project
from corral.engine.read.diagnostics import Translator
from corral.engine.recovery.faults import internal_fault
from corral.engine.resolve import resolve_task
from corral.errors import (
    CorralError,
    LaunchFailed,
    PrepareFailed,
    RefusedError,
    UsageError,
)
from corral.store import Tx


@dataclass(frozen=True)
class Started:
    task: Task
    launched: launch.Launched


@contextmanager
def owned(project: Project, task: Task) -> Iterator[None]:
    """After an operation moved the task to working: any exception rests it instead of leaving it working.

    An execution fault (docs/architecture.md#how-a-turns-end-is-read): the task goes interrupted
    with the cause "internal fault", never auto-resumed, and the error reaches the caller
    as a ``CorralError``. A fault inside ``launch.launch`` was rested there already; the
    second look finds the task no longer working and does nothing.
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


@dataclass(frozen=True)
class TurnSpec:
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
) -> Started:
    """The one launch skeleton every turn kind uses, once its human turn and ``working`` are committed.

    Inside :func:`owned`: any fault rests the task. ``prepare`` does the work that must follow the
    commit (reverting files, reading the worktree); ``spec`` may be computed from its result.
    """
    with owned(project, task):
        crashpoints.hit(committed)
        if prepare is not None:
            session = prepare(session)
        plan = spec(session) if callable(spec) else spec
        command = launch.build_command(
            project,
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
        return Started(task, launch.launch(project, task, command))


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
        task = resolve_task(tx, given)
        check_operation(
            Op.START,
            task.status,
            task.ref,
            hint=f"To give feedback on a started task: corral unblock {task.ref} -m '…'",
        )
        check_transition(task.status, Status.WORKING, actor, what=f"start {task.ref}")
        if task.parent_id:
            parent = tx.get_task(task.parent_id)
            if parent is None or parent.session_id is None or parent.status in TERMINAL:
                raise RefusedError(
                    f"The parent of {task.ref} has no branch yet.",
                    code="parent-not-started",
                    hint=f"Start the parent first: corral start {parent.ref if parent else '…'}",
                )
        target = workspace.target_branch(tx, task)
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
        task = tx.get_task(task.id) or task
    spec = TurnSpec("start", content, delivered=(turn.id,))
    return _launch(project, task, session, turn, target, spec, committed="start.committed")


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
            hint=f"corral unblock {task.ref} --approve-file PATH / --revert-file PATH (or --no-approve-files)",
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
    for path, check_from in reverts:
        source = check_from or session.base_commit or "HEAD"
        exists = git.run("cat-file", "-e", f"{source}:{path}", cwd=worktree, check=False).returncode == 0
        if exists:
            git.run("checkout", source, "--", path, cwd=worktree)
        else:
            git.run("rm", "-q", "-f", "--ignore-unmatch", "--", path, cwd=worktree)
            target = Path(worktree) / path
            if target.exists() or target.is_symlink():
                target.unlink()
    git.commit_all(worktree, "corral: revert protected files\n\n" + "\n".join(p for p, _ in reverts))
    return git.rev_parse("HEAD", cwd=worktree)


def unblock(
    project: Project,
    given: str,
    *,
    actor: Actor,
    message: str,
    approve: Sequence[str] = (),
    revert: Sequence[str] = (),
    revert_rest: bool = False,
) -> Started:
    feedback = _feedback(project, message)
    command_id = new_id()
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        check_operation(Op.UNBLOCK, task.status, task.ref)
        check_transition(task.status, Status.WORKING, actor, what=f"unblock {task.ref}")
        session = _session(tx, task)
        _check_worktree(task, session)
        refuse_while_chat(project, task, "unblock")
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
        pending = tx.pending_feedback(session.id)
        session = tx.update_session(session.id, consecutive_interruptions=0)
        tx.set_status(task.id, Status.WORKING, actor, "unblock", expected_from=task.status, resting_cause=None)
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
    return _launch(project, task, session, turn, target, spec, committed="unblock.committed", prepare=apply_reverts)


def resume(project: Project, given: str, *, actor: Actor, kind: str = "resume") -> Started:
    command_id = new_id()
    with project.store.write() as tx:
        task = resolve_task(tx, given)
        check_operation(
            Op.RESUME, task.status, task.ref, hint=f"To give feedback instead: corral unblock {task.ref} -m '…'"
        )
        pending_files = tx.pending_paths(task.id)
        if pending_files:
            raise RefusedError(
                f"Task {task.ref} has protected files to decide first: {', '.join(pending_files)}",
                code="undecided-files",
                hint=f"Decide them as you continue: corral unblock {task.ref} -m '…' --approve-file PATH "
                "(or --no-approve-files)",
            )
        session = _session(tx, task)
        _check_worktree(task, session)
        refuse_while_chat(project, task, "resume")
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
        session = (
            tx.update_session(session.id, consecutive_interruptions=0)
            if actor is not Actor.SYSTEM
            else tx.update_session(session.id, auto_resumed=True)
        )
        tx.set_status(task.id, Status.WORKING, actor, kind, expected_from=Status.INTERRUPTED, resting_cause=None)
        target = workspace.target_branch(tx, task)
        task = tx.get_task(task.id) or task

    def after_crash(session: Session) -> TurnSpec:
        dirty = bool(project.git.dirty_paths(session.worktree or "."))
        return TurnSpec(
            kind,
            prompts.resume_after_crash(dirty, [t.content for t in pending]),
            delivered=tuple(t.id for t in pending),
            sync_before_work=not dirty,
            announce_merge=False,
        )

    return _launch(project, task, session, turn, target, after_crash, committed="resume.committed")


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
        _check_worktree(task, session)
        refuse_while_chat(project, task, kind)
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
