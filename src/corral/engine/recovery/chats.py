"""A chat held read-only by a before/after comparison, its end, and the sweep of chats whose corral died.

Before a chat, the worktree's state is written down (:func:`hold_chat`, ``chat-hold.json``);
after it, whatever it changed is kept aside on ``refs/corral/kept/<ref>/<turn>`` and reverted,
and a ``chat`` turn records the typed cause ``read-only-changes-kept`` (:func:`end_chat`). A chat
whose corral died (SIGKILL) leaves its hold behind with its lock free; :func:`sweep_stale_chats`
finishes it.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from corral.adapters.files import write_atomic
from corral.adapters.locks import is_locked
from corral.domain.actors import Actor, Role
from corral.domain.clock import parse_time, rfc3339
from corral.domain.records import Session, Task
from corral.engine.private_state import make_private_dir
from corral.engine.project import Project
from corral.errors import ChatOpen

if TYPE_CHECKING:
    # The keep-aside and the receipts' evidence load only when a chat begins or ends: the
    # reconciler runs this module's sweeps on every read, and there is rarely a chat.
    from corral.engine import readonly


#: Bytes of a chat hold read back (a hold is a few hundred; anything larger is not one).
HOLD_BYTES = 64 * 1024


class ChatHold(Struct, frozen=True):
    """An open chat's before-state: what its end compares with, and the turn label its kept ref gets."""

    before: readonly.Before
    label: str
    started_at: datetime | None
    pid: int

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before.to_json(),
            "label": self.label,
            "started_at": rfc3339(self.started_at),
            "pid": self.pid,
        }


def hold_chat(project: Project, task: Task, session: Session) -> ChatHold:
    """Before a chat (its lock held): the worktree's state, written down before the agent runs.

    The label is the sequence the chat's turn will get (no turn starts while the chat lock
    is held), moved on past any kept ref already there so nothing kept is ever reused.
    """
    from corral.engine import readonly

    before = readonly.snapshot(project, session)
    with project.store.read() as tx:
        turns = tx.turns(task.id)
    sequence = (turns[-1].sequence if turns else 0) + 1
    label, n = str(sequence), 1
    worktree = Path(session.worktree or ".")
    while project.git.ref_exists(readonly.kept_ref(task.ref, label), cwd=worktree):
        n += 1
        label = f"{sequence}.{n}"
    hold = ChatHold(before, label, project.clock(), os.getpid())
    make_private_dir(project.paths.chat_holds)
    write_atomic(project.paths.chat_hold(task.id), json.dumps(hold.to_json()).encode())
    return hold


def read_hold(project: Project, task_id: str) -> ChatHold | None:
    """The hold a chat left, or None (none, or not one corral wrote)."""
    from corral.engine import readonly

    try:
        with open(project.paths.chat_hold(task_id), "rb") as fh:
            data = json.loads(fh.read(HOLD_BYTES))
        before = readonly.Before.from_json(data["before"])
        label = data["label"]
        pid = data.get("pid", 0)
        if not isinstance(label, str) or not label or "/" in label or not isinstance(pid, int):
            return None
        started = data.get("started_at")
        return ChatHold(before, label, parse_time(started) if isinstance(started, str) else None, pid)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def chat_held(project: Project, task_id: str) -> bool:
    """Whether a chat's changes may still wait to be kept aside (its hold is there)."""
    return project.paths.chat_hold(task_id).exists()


def end_chat(
    project: Project,
    task: Task,
    session: Session | None,
    hold: ChatHold | None,
    actor: Actor,
    agent: dict[str, Any] | None = None,
) -> readonly.Kept | None:
    """After a chat: what it changed kept aside and reverted, a ``chat`` turn saying so, the hold removed.

    None when it changed nothing (then no turn is recorded: a chat is status-neutral).
    ``agent`` is how the agent ended, when corral saw it end.
    """
    from corral.engine import readonly
    from corral.engine.read.translator import Translator
    from corral.engine.recovery.receipts import kept_evidence

    kept = None
    if hold is not None and session is not None and session.worktree and Path(session.worktree).is_dir():
        kept = readonly.restore(project, task, session, hold.before, hold.label)
    if kept is not None:
        with project.store.write() as tx:
            tx.add_turn(
                task.id,
                role=Role.HUMAN,
                actor=actor,
                kind="chat",
                content=chat_kept_text(kept, crashed=agent is None and actor is Actor.SYSTEM),
                session_id=session.id if session else task.session_id,
                started_at=hold.started_at if hold else None,
                ended_at=tx.now(),
                failure=kept_evidence(kept, Translator()),
                details={"kept": kept.to_json(), "agent": agent},
            )
    try:
        project.paths.chat_hold(task.id).unlink()
    except FileNotFoundError:
        pass
    return kept


def chat_kept_text(kept: readonly.Kept, *, crashed: bool = False) -> str:
    """What the chat turn says: what a read-only chat changed, where it is kept, how to take it back.

    The first line (what ``show``'s timeline shows) names the kept ref; the rest says how.
    """
    made = []
    if kept.commits:
        made.append(f"{kept.commits} commit{'s' if kept.commits != 1 else ''}")
    if kept.path_count:
        made.append(f"{kept.path_count} path{'s' if kept.path_count != 1 else ''}")
    what = ", ".join(made) if made else "the branch moved"
    listed = ", ".join(kept.paths[:10]) + (" …" if kept.path_count > 10 else "")
    changed = f"\nChanged: {listed}." if listed else ""
    late = "\nThe chat's corral process had died; this was found and put back afterwards." if crashed else ""
    if not kept.reverted:
        return (
            f"The read-only chat changed the work ({what}); kept on {kept.ref}, NOT reverted.{changed}{late}\n"
            f"Putting the worktree back failed: {kept.error}. Fix it by hand; everything stays on {kept.ref}."
        )
    return (
        f"The read-only chat changed the work ({what}); kept aside on {kept.ref} and reverted.{changed}{late}\n"
        f"To take them: git merge --ff-only {kept.ref}^1 (the commits), then git stash apply {kept.ref} (the rest)."
    )


def sweep_stale_chats(project: Project) -> int:
    """Every chat whose corral died (hold left, lock free): its changes kept aside and reverted, told.

    Found by the hold files on disk (no store read when there are none: this runs on every
    reconcile).
    """
    try:
        held = [entry.name.removesuffix(".json") for entry in os.scandir(project.paths.chat_holds)]
    except FileNotFoundError:
        return 0
    stale = [task_id for task_id in held if not is_locked(project.paths.chat_lock(task_id))]
    if not stale:
        return 0
    found = []
    with project.store.read() as tx:
        for task_id in stale:
            task = tx.get_task(task_id)
            if task is not None:
                found.append((task, tx.get_session(task.session_id) if task.session_id else None))
            else:  # the task was deleted while its chat's hold was left: nothing is left to put back
                project.paths.chat_hold(task_id).unlink(missing_ok=True)
    for task, session in found:
        end_chat(project, task, session, read_hold(project, task.id), Actor.SYSTEM)
    return len(found)


def chat_lock(project: Project, task_id: str) -> Path:
    return project.paths.chat_lock(task_id)


def chat_is_open(project: Project, task_id: str) -> bool:
    return is_locked(chat_lock(project, task_id))


def refuse_while_chat(project: Project, task: Task, what: str, *, effect: str = "start a turn underneath it") -> None:
    """Refuse ``what`` while a chat is open, or while a killed chat's changes still wait to be put aside."""
    if chat_is_open(project, task.id):
        raise ChatOpen(
            f"A chat is open in {task.ref}'s worktree; {what} would {effect}.",
            hint="End the chat first, then try again.",
        )
    if chat_held(project, task.id):
        raise ChatOpen(
            f"The last chat in {task.ref}'s worktree ended without corral (its process was killed), and what it "
            f"changed is not put aside yet; {what} would build on it.",
            hint=f"corral chat {task.ref} puts it aside first (exit the agent at once), then try again.",
        )
