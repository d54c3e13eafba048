"""A turn's harness output: where it is, and how it reads (rendered through the harness's parser)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import Event
from corral.domain.actors import Role
from corral.domain.records import Task
from corral.engine.config import harness_settings
from corral.engine.paths import OUTPUT_LOG
from corral.engine.project import Project
from corral.errors import NotFoundError


def log_turns(project: Project, task: Task) -> list[int]:
    """Sequences of the turns that have an output log, oldest first."""
    base = project.paths.turns_dir(task.id)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit() and (p / OUTPUT_LOG).exists())


def log_path(project: Project, task: Task, turn: int | None) -> Path:
    available = log_turns(project, task)
    if not available:
        raise NotFoundError(
            f"Task {task.ref} has no turn output yet.", code="no-logs", hint=f"Start it: corral start {task.ref}"
        )
    if turn is None:
        return project.paths.output_log(task.id, available[-1])
    seq = turn
    if seq not in available:
        # An agent turn's output lives with the human turn that launched it.
        with project.store.read() as tx:
            found = next((t for t in tx.turns(task.id) if t.sequence == turn), None)
        if found is not None and found.role is Role.AGENT and isinstance(found.details.get("log_turn"), int):
            seq = found.details["log_turn"]
    if seq not in available:
        raise NotFoundError(
            f"Turn {turn} of {task.ref} has no output.",
            code="no-logs",
            hint=f"Turns with output: {', '.join(map(str, available))}",
        )
    return project.paths.output_log(task.id, seq)


def render_event(event: Event) -> str | None:
    match event.kind:
        case "session":
            return f"· session {event.session_id}"
        case "text":
            return f"› {event.text}"
        case "tool_start":
            return f"⚙ {event.name}"
        case "tool_end":
            mark = "✗" if event.is_error else "✓"
            detail = (event.text or "").strip().splitlines()
            return f"  {mark} {detail[0][:200] if detail else ''}".rstrip()
        case "model_error":
            return f"! {event.text}"
        case "retry":
            return f"↻ retrying: {event.text}"
        case "result":
            return f"= {'error: ' if event.is_error else ''}{event.text or ''}".rstrip()
    return None


def render_lines(project: Project, task: Task, lines: Iterator[bytes]) -> Iterator[str]:
    harness = make_harness(task.harness or project.config["harness"], harness_settings(project.config))
    for line in lines:
        events = harness.parse(line)
        if not events and line.strip():
            yield line.decode("utf-8", "replace").rstrip("\n")
        for event in events:
            text = render_event(event)
            if text is not None:
                yield text
