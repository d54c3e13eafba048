"""The progress line: the line an agent says it is at, as only its tool call can tell.

``progress.json`` (the protocol's :class:`~corral.engine.runtime.protocol.Progress`): the agent's
latest line, whitespace collapsed and capped at :data:`~corral.domain.agent_tools.PROGRESS_CAP`
characters at write (:func:`post_progress`) and again at read, with the writer's pid and start time
(``runtime/mark_writer``). Ephemeral, latest wins, never in the database; ``launch.clear_protocol``
removes it when a new command is written. A line that cannot be written is only lost.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from corral.domain.agent_tools import PROGRESS_CAP
from corral.domain.clock import rfc3339
from corral.domain.sanitize import one_line
from corral.engine.project import Project
from corral.engine.runtime import marked
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.mark_writer import read_marker, safely, writer, writer_alive


class Posted(Struct, frozen=True):
    """What :func:`post_progress` kept: the line as shown, and whether it was cut to the cap."""

    message: str
    truncated: bool


def post_progress(project: Project, task_id: str, text: str) -> Posted:
    """Replace the task's progress line; returns what was kept and whether it was cut to the cap.

    Never raises: a line that cannot be written is lost, and the call goes on.
    """
    whole = one_line(str(text))
    line = one_line(whole, PROGRESS_CAP)
    posted = Posted(line, truncated=len(whole) > PROGRESS_CAP)

    def write() -> None:
        protocol_dir = project.paths.protocol_dir(task_id)
        if not protocol_dir.is_dir():
            return
        if not line:
            proto.remove(protocol_dir, proto.PROGRESS)
            return
        pid, start = writer()
        at = rfc3339(project.clock()) or ""
        doc = {**proto.Progress(message=line, pid=pid, at=at).to_json(), "pid_start": start}
        marked.note(protocol_dir)
        proto.write_json(protocol_dir / proto.PROGRESS, doc, durable=False)

    safely("write the progress line", write)
    return posted


def progress(protocol_dir: Path) -> str | None:
    """The agent's progress line as a surface shows it, or None (none, unusable, or its writer gone)."""
    data = read_marker(protocol_dir / proto.PROGRESS)
    if data is None:
        return None
    try:
        found = proto.Progress.from_json(data)
    except (proto.ShapeError, ValueError, TypeError):
        return None
    if not writer_alive(found.pid, data.get("pid_start")):
        return None
    return one_line(found.message, PROGRESS_CAP) or None
