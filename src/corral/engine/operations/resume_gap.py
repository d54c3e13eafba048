"""The project-wide gap between auto-resumes of different tasks.

A provider's incident crashes every task at once; resumed in one pass, they would all meet it again at
once. So the system resumes one task of a project, then waits ``auto_resume_gap`` seconds before it
resumes another: a task the gap holds back is remembered here and resumed by a later pass (``due``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec
from msgspec import Struct, field

from corral.adapters.files import entry_exists, read_bounded, write_atomic
from corral.adapters.locks import lock
from corral.engine.project import Project

#: The gap's state, beside the project's other sweeps' memories: the last auto-resume (when, which task)
#: and the tasks waiting for the gap to pass.
GAP_FILE = "auto-resume-gap.json"
#: Held while a gap is judged and a resume launched, so two processes' passes never both take the gap.
GAP_LOCK = "auto-resume-gap.lock"
#: The gap's state is a few task ids: far below this.
GAP_MAX_BYTES = 1024 * 1024


class Spacing(Struct):
    """The gap's state (:data:`GAP_FILE`)."""

    last_at: float = 0.0
    last_task: str | None = None
    waiting: list[str] = field(default_factory=list)


def _read_spacing(project: Project) -> Spacing:
    """The gap's state; a lost or unreadable file only costs one gap (nothing waiting is resumed twice:
    each resume rechecks the task)."""
    raw, _problem, _size = read_bounded(project.paths.root / GAP_FILE, GAP_MAX_BYTES)
    if not raw:
        return Spacing()
    try:
        return msgspec.json.decode(raw, type=Spacing)
    except msgspec.DecodeError:
        return Spacing()


def _write_spacing(project: Project, spacing: Spacing) -> None:
    write_atomic(project.paths.root / GAP_FILE, msgspec.json.encode(spacing), durable=False)


def gap_holds(spacing: Spacing, task_id: str, now: float, gap: float) -> bool:
    """Whether the gap holds ``task_id`` back: another task was auto-resumed less than ``gap`` seconds
    ago. Bounded whatever the clock says: a last resume stored further ahead than the gap holds nothing."""
    if gap <= 0 or spacing.last_task is None or spacing.last_task == task_id:
        return False
    return -gap < now - spacing.last_at < gap


def due(project: Project, ended: list[str]) -> list[str]:
    """The tasks a pass offers auto-resume: those whose turn ended in it, then those the gap held back."""
    if not entry_exists(str(project.paths.root / GAP_FILE)):
        return ended
    waiting = [t for t in _read_spacing(project).waiting if t not in ended]
    return [*ended, *waiting]


def spaced_resume(project: Project, task_id: str, resume: Callable[[], bool]) -> bool:
    """Run ``resume`` unless the project-wide gap holds ``task_id`` back (then it waits for a later pass)."""
    gap = float(project.config["auto_resume_gap"])
    fd = lock(project.paths.root / GAP_LOCK, timeout=GAP_LOCK_WAIT)
    if fd is None:  # another process is resuming a task of this project now: this one waits its gap
        return False
    try:
        spacing = _read_spacing(project)
        now = project.clock().timestamp()
        waiting = [t for t in spacing.waiting if t != task_id]
        if gap_holds(spacing, task_id, now, gap):
            _write_spacing(project, Spacing(spacing.last_at, spacing.last_task, [*waiting, task_id]))
            return False
        resumed = resume()
        if resumed:
            _write_spacing(project, Spacing(now, task_id, waiting))
        elif waiting != spacing.waiting:
            _write_spacing(project, Spacing(spacing.last_at, spacing.last_task, waiting))
        return resumed
    finally:
        os.close(fd)


def forget(project: Project, task_id: str) -> None:
    """A task no longer resumable (resumed by a person, closed, tripped) waits for the gap no more."""
    if not entry_exists(str(project.paths.root / GAP_FILE)):
        return
    fd = lock(project.paths.root / GAP_LOCK, timeout=GAP_LOCK_WAIT)
    if fd is None:
        return  # the next pass forgets it
    try:
        spacing = _read_spacing(project)
        if task_id in spacing.waiting:
            waiting = [t for t in spacing.waiting if t != task_id]
            _write_spacing(project, Spacing(spacing.last_at, spacing.last_task, waiting))
    finally:
        os.close(fd)


#: How long a pass waits for another process's auto-resume of this project before it leaves its task to
#: a later pass.
GAP_LOCK_WAIT = 5.0
