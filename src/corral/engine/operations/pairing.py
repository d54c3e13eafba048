"""pair and chat: a person works with the agent interactively in the task's worktree.

pair: blocked / conflict / interrupted → pairing; the harness runs interactively with
its session resumed; a pairing lock names the pid; on exit a summary turn is
synthesized and the task parks (blocked, or conflict while violations are pending).
A pair whose process died is recovered by the stale-pairing sweep.

chat: status-neutral and read-only; it holds the worktree's chat lock for its whole
duration, so unblock, resume, ask, an accept's pre-accept turn and sync refuse while it is
open (start never meets one: a chat needs a task that has run).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import TurnRequest
from corral.adapters.locks import is_locked, try_lock
from corral.adapters.process import run_foreground
from corral.domain.actors import Actor
from corral.domain.records import Task
from corral.domain.status import Op, Status, check_operation, check_transition
from corral.engine.config import harness_settings
from corral.engine.locks import task_lock
from corral.engine.operations.launch import posture
from corral.engine.project import Project
from corral.engine.recovery.pairs import end_pair, pairing_lock
from corral.engine.resolve import resolve_task
from corral.errors import ChatOpen, CorralError, RefusedError


def chat_lock(project: Project, task_id: str) -> Path:
    return project.paths.chat_lock(task_id)


def chat_is_open(project: Project, task_id: str) -> bool:
    return is_locked(chat_lock(project, task_id))


def refuse_while_chat(project: Project, task: Task, what: str) -> None:
    if chat_is_open(project, task.id):
        raise ChatOpen(
            f"A chat is open in {task.ref}'s worktree; {what} would start a turn underneath it.",
            hint="End the chat first, then try again.",
        )


@dataclass(frozen=True)
class Paired:
    task: Task
    exit_code: int
    commits: list[str]
    dirty: list[str]


def _interactive(project: Project, task: Task, resume_id: str | None, worktree: str, read_only: bool) -> int:
    cfg = project.config
    harness = make_harness(task.harness or cfg["harness"], harness_settings(project.config))
    launch = harness.interactive(
        TurnRequest(
            prompt="",
            cwd=worktree,
            resume_id=resume_id,
            model=task.model or cfg["model"],
            posture=posture(cfg, read_only=read_only),
        )
    )
    env = {**os.environ, **launch.env}
    try:
        return run_foreground(launch.argv, cwd=worktree, env=env)
    except FileNotFoundError as exc:
        raise CorralError(
            f"{harness.display} could not start: {exc.strerror} ({launch.argv[0]}).",
            code="harness-missing",
            hint=harness.install_hint,
        ) from exc


def pair(project: Project, given: str, *, actor: Actor) -> Paired:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    with task_lock(project, task.id, what="pair"):
        with project.store.write() as tx:
            task = tx.get_task(task.id) or task
            check_operation(Op.PAIR, task.status, task.ref)
            check_transition(task.status, Status.PAIRING, actor, what=f"pair on {task.ref}")
            session = tx.get_session(task.session_id) if task.session_id else None
            if session is None or not session.worktree or not Path(session.worktree).is_dir():
                raise RefusedError(f"Task {task.ref} has no worktree to pair in.", code="no-session")
            tx.set_status(task.id, Status.PAIRING, actor, "pair", expected_from=task.status)
            tx.register_process(task.id, "pair", os.getpid())
        lock = pairing_lock(project, task.id)
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(json.dumps({"pid": os.getpid(), "actor": actor.value, "at": time.time()}))
    git = project.git
    before = git.rev_parse("HEAD", cwd=session.worktree)
    began = time.monotonic()
    code = 1
    try:
        code = _interactive(project, task, session.harness_session_id, session.worktree, read_only=False)
    finally:
        after = git.rev_parse("HEAD", cwd=session.worktree)
        commits = (
            git.out("rev-list", "--reverse", f"{before}..{after}", cwd=session.worktree).split()
            if before and after and before != after
            else []
        )
        dirty = git.dirty_paths(session.worktree)
        task = end_pair(project, task.id, actor, summary(time.monotonic() - began, commits, dirty, code))
    return Paired(task, code, commits, dirty)


def summary(seconds: float, commits: list[str], dirty: list[str], code: int | None) -> str:
    minutes = max(1, round(seconds / 60))
    parts = [f"Paired for about {minutes} minute{'s' if minutes != 1 else ''}."]
    parts.append(
        f"{len(commits)} commit{'s' if len(commits) != 1 else ''} made"
        + (f": {', '.join(c[:10] for c in commits)}." if commits else ".")
    )
    if dirty:
        parts.append(f"Uncommitted changes: {', '.join(dirty[:10])}" + (" …" if len(dirty) > 10 else "") + ".")
    if code not in (0, None):
        parts.append(f"The session exited with code {code}.")
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


def chat(project: Project, given: str) -> int:
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        session = tx.get_session(task.session_id) if task.session_id else None
    check_operation(Op.CHAT, task.status, task.ref, hint="chat opens on a task waiting for review.")
    if session is None or not session.worktree or not Path(session.worktree).is_dir():
        raise RefusedError(f"Task {task.ref} has no worktree to chat in.", code="no-session")
    with holding_chat(project, task):
        return _interactive(project, task, session.harness_session_id, session.worktree, read_only=True)
