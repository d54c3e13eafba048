"""pair and chat: a person works with the agent interactively in the task's worktree.

pair: blocked / conflict / interrupted → pairing; the harness runs interactively with
its session resumed; a pairing lock names the pid; on exit a summary turn is
synthesized and the task parks (blocked, or conflict while violations are pending).
The summary records how the agent really ended (its exit code, or the signal that ended
it) and how long it ran, in its text and its details. A pair whose process died is
recovered by the stale-pairing sweep.

Both run the agent through :func:`corral.adapters.terminal.run_interactive` on a terminal of
its own that corral relays to the person's (:mod:`corral.adapters.ptyrelay`): nothing it types
into its terminal reaches the person's shell; Ctrl-C, Ctrl-Z and window-size changes are the
agent's, and corral never ends it for a keystroke (docs/architecture.md, "Interactive sessions").

chat: status-neutral and read-only; it holds the worktree's chat lock for its whole
duration, so unblock, resume, ask, an accept's pre-accept turn and sync refuse while it is
open (start never meets one: a chat needs a task that has run). Behind the harness's own
read-only mode, whatever a chat changed is kept aside and reverted afterwards, and a
``chat`` turn says so.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from msgspec import Struct

from corral.adapters.files import write_atomic
from corral.adapters.harness import make_harness
from corral.adapters.harness.base import TurnRequest
from corral.adapters.locks import try_lock
from corral.adapters.pid_identity import start_ticks
from corral.adapters.terminal import Ended, run_interactive
from corral.domain.actors import Actor
from corral.domain.clock import new_id
from corral.domain.operations_table import Op, check_operation
from corral.domain.records import Session, Task
from corral.domain.status import Status, check_transition, is_terminal
from corral.engine.config import harness_settings
from corral.engine.operations.launch import posture, sandbox_spec
from corral.engine.project import Project
from corral.engine.recovery.chats import (
    chat_held,
    chat_is_open,
    chat_lock,
    end_chat,
    hold_chat,
    read_hold,
    refuse_while_chat,
)
from corral.engine.recovery.pairs import end_pair, pairing_lock
from corral.engine.resolve import resolve_task, task_config
from corral.engine.task_locks import task_lock
from corral.errors import ChatOpen, CorralError, HarnessMisconfigured, RefusedError


def _finish_killed_chat(project: Project, task: Task) -> None:
    """A chat whose corral was killed left its before-state: keep aside and revert what it changed now."""
    if chat_held(project, task.id) and not chat_is_open(project, task.id):
        with project.store.read() as tx:
            session = tx.get_session(task.session_id) if task.session_id else None
        end_chat(project, task, session, read_hold(project, task.id), Actor.SYSTEM)


class Paired(Struct, frozen=True):
    task: Task
    exit_code: int  # as a shell's $? gives it: the agent's exit code, or 128 + the signal that ended it
    commits: list[str]
    dirty: list[str]
    ended: Ended | None = None  # None when the agent could not start


def _interactive(
    project: Project,
    task: Task,
    resume_id: str | None,
    worktree: str,
    read_only: bool,
    started: Callable[[int], None] | None = None,
    quarantine_id: str | None = None,
) -> Ended:
    cfg = task_config(project.config, task)  # the task's own settings hold in a pair too
    harness = make_harness(task.harness or cfg["harness"], harness_settings(cfg))
    launch = harness.interactive(
        TurnRequest(
            prompt="",
            cwd=worktree,
            resume_id=resume_id,
            model=task.model or cfg["model"],
            posture=posture(cfg, read_only=read_only),
            kind="chat" if read_only else "pair",
            task_ref=task.ref,
            task_id=task.id,
        )
    )
    env = {**os.environ, **launch.env}
    argv = _confined(project, task, harness.name, launch.argv, worktree, read_only, env, quarantine_id)
    try:
        return run_interactive(argv, cwd=worktree, env=env, started=started, own_terminal=True)
    except (FileNotFoundError, PermissionError) as exc:
        raise CorralError(
            f"{harness.display} could not start: {exc.strerror} ({launch.argv[0]}).",
            code="harness-missing",
            hint=harness.install_hint,
        ) from exc


def _confined(
    project: Project,
    task: Task,
    harness: str,
    argv: list[str],
    worktree: str,
    read_only: bool,
    env: dict[str, str],
    quarantine_id: str | None = None,
) -> list[str]:
    """The session's argv inside the task's sandbox, as a turn's would be (a chat's worktree read-only).

    ``quarantine_id``: a pair's objects arrive through a quarantine of that name, settled when it ends."""
    from corral.adapters import sandbox

    spec = sandbox_spec(project, worktree, task.branch)
    if not spec.confined:
        return argv
    if spec.error is not None:
        raise HarnessMisconfigured(spec.error, code="sandbox-unavailable", hint="See docs/harnesses.md#sandbox.")
    sandbox.prepare(spec, harness, env)
    held = None
    if quarantine_id and not read_only and spec.git_common_dir:
        from corral.engine.runtime import quarantine

        held = str(quarantine.open_(spec.git_common_dir, quarantine_id))
    prefix, inside = sandbox.bwrap_argv(
        spec, worktree=worktree, program=argv[0], harness=harness, read_only=read_only, env=env, quarantine=held
    )
    env.update(inside)
    return [*prefix, *argv]


def pair(project: Project, given: str, *, actor: Actor) -> Paired:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    with task_lock(project, task.id, what="pair"):
        _finish_killed_chat(project, task)
        with project.store.write() as tx:
            task = tx.get_task(task.id) or task
            check_operation(Op.PAIR, task.status, task.ref)
            check_transition(task.status, Status.PAIRING, actor, what=f"pair on {task.ref}")
            refuse_while_chat(project, task, "pair")
            session = tx.get_session(task.session_id) if task.session_id else None
            if session is None or not session.worktree or not Path(session.worktree).is_dir():
                raise RefusedError(f"Task {task.ref} has no worktree to pair in.", code="no-session")
            tx.set_status(task.id, Status.PAIRING, actor, "pair", expected_from=task.status)
            # Named by this host's identity on the shared store: only this host judges it by its pid.
            tx.register_process(task.id, "pair", os.getpid(), owner=project.placement.owner(project))
        lock = pairing_lock(project, task.id)
        # The pair's objects' quarantine is named in its lock: a pair whose corral died is settled by the sweep.
        pair_id = f"pair-{new_id()}"
        held = {"pid": os.getpid(), "actor": actor.value, "at": time.time(), "quarantine": pair_id}
        write_atomic(lock, json.dumps(held).encode(), durable=False)  # the sweep never reads half a lock

    def agent_started(pid: int) -> None:
        # The agent has a process group of its own: should corral die, the stale-pairing sweep
        # stops it by this pid and start time.
        write_atomic(lock, json.dumps({**held, "agent": pid, "agent_start": start_ticks(pid)}).encode(), durable=False)

    git = project.git
    branch = session.branch or task.branch
    from corral.engine.runtime import branch_check

    branch_check.begin(git, project.repo, task.ref, branch)  # the pair's check compares with this tip
    before = git.rev_parse(f"refs/heads/{branch}", cwd=project.repo)
    started = project.clock()
    began = time.monotonic()
    ended: Ended | None = None
    try:
        ended = _interactive(
            project,
            task,
            session.harness_session_id,
            session.worktree,
            read_only=False,
            started=agent_started,
            quarantine_id=pair_id,
        )
    finally:
        # What the pair wrote is checked before corral reads it, as a turn's is.
        spec = sandbox_spec(project, session.worktree, task.branch)
        _objects, finding, problem = branch_check.after_confined(
            git,
            project.repo,
            common_dir=spec.git_common_dir if spec.confined else None,
            quarantine_id=pair_id if spec.confined else None,
            task_ref=task.ref,
            branch=branch,
            target=None,
            turn="pair",
            worktree=session.worktree,
        )
        after = git.rev_parse(f"refs/heads/{branch}", cwd=project.repo)
        commits = (
            git.out("rev-list", "--reverse", f"{before}..{after}", cwd=session.worktree).split()
            if before and after and before != after
            else []
        )
        dirty = git.dirty_paths(session.worktree)
        seconds = ended.seconds if ended is not None else time.monotonic() - began
        task = end_pair(
            project,
            task.id,
            actor,
            summary(seconds, commits, dirty, ended),
            started_at=started,
            details={
                "agent": ended.as_view() if ended is not None else None,
                "commits": commits,
                **({"branch_check": finding.to_json()} if finding is not None else {}),
                **({"check_error": problem} if problem else {}),
            },
        )
    return Paired(task, ended.status if ended is not None else 1, commits, dirty, ended)


def duration_words(seconds: float) -> str:
    """E.g. "42 s", "3 min 5 s", "1 h 2 min": a pair's length as the summary says it."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def summary(seconds: float, commits: list[str], dirty: list[str], ended: Ended | None) -> str:
    ending = f"the agent {ended.describe()}" if ended is not None else "the agent could not start"
    parts = [f"Paired for {duration_words(seconds)}; {ending}."]
    parts.append(
        f"{len(commits)} commit{'s' if len(commits) != 1 else ''} made"
        + (f": {', '.join(c[:10] for c in commits)}." if commits else ".")
    )
    if dirty:
        parts.append(f"Uncommitted changes: {', '.join(dirty[:10])}" + (" …" if len(dirty) > 10 else "") + ".")
    return " ".join(parts)


@contextmanager
def holding_chat(project: Project, task: Task) -> Iterator[None]:
    fd = try_lock(chat_lock(project, task.id))
    if fd is None:
        raise ChatOpen(f"A chat is already open in {task.ref}'s worktree.")
    try:
        yield
    finally:
        os.close(fd)


#: Where chat opens, in the words of its refusal.
CHAT_TAKES = "chat opens on a task waiting for review, or on a finished one."


def chat(project: Project, given: str) -> int:
    """A read-only interactive session; the agent's exit status (as a shell's ``$?``).

    The worktree and branch are compared before and after (:mod:`corral.engine.readonly`,
    behind the harness's own read-only mode): whatever the chat changed is kept aside on
    ``refs/corral/kept/<ref>/<turn>`` and reverted, and a ``chat`` turn records it with the
    typed cause a read-only ask records (``read-only-changes-kept``, which ``show``
    explains; its details hold the whole record, ``kept``). A chat that changed nothing
    records no turn. The before-state is on disk while the chat runs, so a chat whose
    corral was killed is still put back (recovery/chats.sweep_stale_chats, and the next
    chat or pair on the task).
    """
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        session = tx.get_session(task.session_id) if task.session_id else None
    check_operation(Op.CHAT, task.status, task.ref, hint=CHAT_TAKES)
    if is_terminal(task.status):
        return _chat_finished(project, task, session)
    if session is None or not session.worktree or not Path(session.worktree).is_dir():
        raise RefusedError(f"Task {task.ref} has no worktree to chat in.", code="no-session")
    with holding_chat(project, task):
        with project.store.read() as tx:  # a pair may have begun between the check and the lock
            task = tx.get_task(task.id) or task
        check_operation(Op.CHAT, task.status, task.ref, hint=CHAT_TAKES)
        if chat_held(project, task.id):  # a chat before this one was killed before it was put back
            end_chat(project, task, session, read_hold(project, task.id), Actor.SYSTEM)
        hold = hold_chat(project, task, session)
        ended: Ended | None = None
        try:
            ended = _interactive(project, task, session.harness_session_id, session.worktree, read_only=True)
        finally:
            end_chat(project, task, session, hold, Actor.HUMAN, ended.as_view() if ended is not None else None)
    return ended.status


def _chat_finished(project: Project, task: Task, session: Session | None) -> int:
    """A finished task's captured session, resumed read-only in the project root: its worktree is gone,
    so the session's transcript is brought from where the harness kept it for that worktree to where its
    resume looks for the project root (``Harness.carried``, ``sessions.install``: the harness's own files
    only). Nothing is kept aside or reverted there, which is the person's checkout: the harness's
    read-only mode (and the sandbox's read-only mount, when confined) is what keeps it read-only."""
    from corral.adapters.harness.sessions import install

    sid = session.harness_session_id if session is not None else None
    hint = f"See what it did: corral show {task.ref}"
    if session is None or not sid:
        raise RefusedError(f"Task {task.ref} has no captured session to chat with.", code="no-session", hint=hint)
    cfg = task_config(project.config, task)
    harness = make_harness(task.harness or cfg["harness"], harness_settings(cfg))
    env = dict(os.environ)
    root = Path(project.repo)
    here = harness.session_files(env, root, sid)
    there = harness.session_files(env, Path(session.worktree), sid) if session.worktree else None
    if here is None or (not here.names and (there is None or not there.names)):
        raise RefusedError(
            f"The session of {task.ref} was not kept where {harness.display} keeps its sessions, so there is "
            "nothing to chat with.",
            code="no-session",
            hint=hint,
        )
    if not here.names and there is not None:
        carried = {}
        for name in there.names:
            fit = harness.carried(name, (there.place / name).read_bytes(), root, sid)
            if fit is not None:
                carried[name] = fit
        install(here, carried)
    with holding_chat(project, task):
        ended = _interactive(project, task, sid, str(root), read_only=True)
    return ended.status
