"""A turn's logs: which turns have output, and which one a reader is shown.

A turn's directory holds ``output.log`` (stdout, verbatim), ``stderr.log`` and, written by
the supervisor's copy, ``output.index`` (``read/interleave`` reads the three in order). A
turn that ran on another host's worker has its files brought from the store first. What a
turn's record says of it is ``read/log_facts``; how a line reads, ``read/log_text``.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from corral.domain import exchanges
from corral.domain.actors import Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG
from corral.engine.project import Project
from corral.errors import NotFoundError


def _has_output(directory: Path) -> bool:
    for name in (OUTPUT_LOG, STDERR_LOG):
        try:
            if (directory / name).stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


def log_turns(project: Project, task: Task) -> list[int]:
    """Sequences of the turns that wrote output (stdout or stderr), oldest first."""
    base = project.paths.turns_dir(task.id)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit() and _has_output(p))


class Current(Struct, frozen=True):
    """The task's latest command: the sequence of the human turn that launched it, its kind, and
    whether it still runs (the task is working on it)."""

    sequence: int | None
    kind: str | None
    running: bool


def current(project: Project, task_id: str) -> Current:
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        turn = tx.current_command(task_id)
    working = task is not None and task.status is Status.WORKING
    if turn is None:
        return Current(None, None, False)
    return Current(turn.sequence, turn.kind, working)


def exchange_numbers(project: Project, task: Task) -> dict[int, int]:
    """Each turn's exchange number (domain/exchanges.py), by its sequence: the number a person reads."""
    with project.store.read() as tx:
        return exchanges.number(tx.turns(task.id))


def pick_turn(project: Project, task: Task, turn: int | None, *, follow: bool = False) -> int:
    """The log turn (its sequence) to show: exchange ``turn`` (the number ``show`` prints), or the
    running turn, or the latest with output. A number no exchange has is refused, never taken for another."""
    project.placement.bring_files(project, task.id)  # a turn another host ran: its files, from the store
    available = log_turns(project, task)
    if turn is None:
        now = current(project, task.id)
        if now.running and now.sequence is not None and (follow or now.sequence in available):
            return now.sequence
        if not available:
            raise NotFoundError(
                f"Task {task.ref} has no turn output yet.", code="no-logs", hint=f"Start it: corral start {task.ref}"
            )
        return available[-1]
    with project.store.read() as tx:
        history = tx.turns(task.id)
    numbers = exchanges.number(history)
    last = max(numbers.values(), default=0)
    if not 1 <= turn <= last:
        have = f"its turns are 1 to {last}" if last > 1 else "it has one turn" if last else "it has no turns yet"
        raise NotFoundError(
            f"{task.ref} has no turn {turn}: {have}.",
            code="no-such-turn",
            hint=f"corral show {task.ref} numbers its turns; corral logs {task.ref} shows the latest",
        )
    # The exchange's output is in the directory of the turn that launched it; an error recorded on
    # its own names the turn whose output it ended (log_turn).
    seq = next(t.sequence for t in history if numbers[t.sequence] == turn)
    found = next(t for t in history if t.sequence == seq)
    if found.role is Role.AGENT and isinstance(found.details.get("log_turn"), int):
        seq = found.details["log_turn"]
    if seq not in available:
        listed = ", ".join(str(numbers.get(s, s)) for s in available) if available else "none yet"
        raise NotFoundError(
            f"Turn {turn} of {task.ref} has no output.", code="no-logs", hint=f"Turns with output: {listed}"
        )
    return seq


def log_path(project: Project, task: Task, turn: int | None) -> Path:
    """The verbatim stdout of the turn :func:`pick_turn` chooses."""
    return project.paths.output_log(task.id, pick_turn(project, task, turn))
