"""What the board's keys do to a task: the engine's operations, the same ones the commands call.

Each action opens the project afresh (:func:`opened`), so it can run on a thread of its own while the
board stays live, and answers with the sentence the board shows, as the command would say it. A
refusal is the engine's (a typed :class:`corral.errors.CorralError`): the board shows its message and
hint. Nothing here knows of a terminal; the editor, the confirmation and the pair's terminal are
the app's (:mod:`corral.cli.board_app`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.domain.actors import Actor
from corral.engine.api import Project
from corral.errors import CorralError


@contextmanager
def opened(repo: str | Path) -> Iterator[Project]:
    """The project at ``repo``, opened for one action and closed after it."""
    project = Project.open(repo)
    try:
        yield project
    finally:
        project.close()


def said(exc: CorralError) -> str:
    """A refusal as one line: its message, then its hint."""
    return f"{exc.message} {exc.hint}" if exc.hint else exc.message


@dataclass(frozen=True)
class NewTaskForm:
    """What the new-task dialog asks, as ``corral create`` takes it (an empty field: the command's default)."""

    goal: str
    prompt: str = ""
    harness: str | None = None
    target: str | None = None
    ref: str | None = None
    protect: tuple[str, ...] = ()


def globs(text: str) -> tuple[str, ...]:
    """Protected paths as typed: one glob a line, or several on a line with commas between them."""
    return tuple(g.strip() for line in text.splitlines() for g in line.split(",") if g.strip())


def create(project: Project, form: NewTaskForm, *, actor: Actor) -> str:
    """``corral create``'s operation with the dialog's fields; a harness not installed here is warned of
    as ``create`` warns of it (``start`` would refuse it)."""
    from corral.engine.api import doctor, tasks

    task = tasks.create(
        project,
        form.goal,
        actor=actor,
        ref=form.ref,
        harness=form.harness,
        protect=form.protect,
        prompt=form.prompt,
        target=form.target,
    )
    words = f"Created {task.ref} (backlog): s starts it."
    warning = doctor.harness_warning(project, task)
    return f"{words} warning: {warning}" if warning is not None else words


def start(project: Project, task_id: str, *, actor: Actor) -> str:
    from corral.engine.api import turns

    started = turns.start(project, task_id, actor=actor)
    return f"{started.task.ref} is working ({started.launched.where()})."


def unblock(project: Project, task_id: str, *, actor: Actor, feedback: str) -> str:
    from corral.engine.api import turns

    started = turns.unblock(project, task_id, actor=actor, message=feedback)
    return f"{started.task.ref} is working ({started.launched.where()})."


def ask(project: Project, task_id: str, *, actor: Actor, question: str) -> str:
    from corral.engine.api import turns

    started = turns.ask(project, task_id, actor=actor, question=question)
    return f"{started.task.ref} is answering (read-only); the answer lands in its timeline."


def stop(project: Project, task_id: str, *, actor: Actor) -> str:
    from corral.engine.api import control

    stopped = control.stop(project, task_id, actor=actor)
    return f"{stopped.ref} is {stopped.status.value}; the turn was stopped."


def abandon(project: Project, task_id: str, *, actor: Actor, reason: str, how: str) -> str:
    """``close`` or ``reject`` (``how``), with the person's reason."""
    from corral.engine.api import tasks, workspace

    ended = tasks.abandon(project, task_id, reason=reason, actor=actor, how=how)
    words = f"{ended.task.ref} is abandoned ({'closed' if how == 'close' else 'rejected'})."
    if ended.archived:
        words += f" Its work is kept under {workspace.archive_ref(ended.task)}."
    if ended.warning:
        words += f" {ended.warning}"
    return words


def accept(
    project: Project,
    task_id: str,
    *,
    actor: Actor,
    report: Callable[[dict[str, Any]], None],
    tip: str | None = None,
) -> str:
    """``corral accept``'s operation, each phase handed to ``report`` as it goes. A branch that moved since
    its diff was shown raises :class:`corral.errors.TipMoved`, naming the tip to confirm."""
    from corral.engine.api import accept as accepting

    result = accepting.accept(project, task_id, actor=actor, report=report, tip=tip)
    if result.already:
        words = f"{result.task.ref} was already accepted."
    else:
        words = f"{result.task.ref} is complete: merged as {result.commit[:12] if result.commit else '?'}."
    if result.conflict is not None:
        words += f" {result.conflict.message}"
    elif result.warning:
        words += f" warning: {result.warning}"
    return words


def phase_words(ref: str, event: dict[str, Any]) -> str | None:
    """An accept's progress event as the board's message line says it (None: not a phase)."""
    if event.get("event") != "phase":
        return None
    detail = f" — {event['detail']}" if event.get("detail") else ""
    return f"Accepting {ref}: {event.get('label')}: {event.get('state')}{detail}"
