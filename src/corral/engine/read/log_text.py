"""A log line as a person reads it: stdout through the harness's parser, stderr as it came.

Text, not yet made safe for a terminal: the surface escapes it.
"""

from __future__ import annotations

from collections.abc import Iterator

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import Event, Harness, parsed
from corral.domain.records import Task
from corral.engine.config import harness_settings
from corral.engine.project import Project
from corral.engine.read.interleave import Line

#: A harness's retry line is shown as one line of at most this many characters.
RETRY_LINE_CHARS = 300


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
        case "retry":  # one line, whatever the harness put in it
            return f"↻ harness retry: {' '.join((event.text or '').split())[:RETRY_LINE_CHARS]}".rstrip()
        case "result":
            return f"= {'error: ' if event.is_error else ''}{event.text or ''}".rstrip()
    return None


def harness_of(project: Project, task: Task) -> Harness:
    return make_harness(task.harness or project.config["harness"], harness_settings(project.config))


def readable(harness: Harness, line: Line) -> Iterator[str]:
    """A line as a person reads it: stdout through the harness's parser, stderr as it came.

    Text, not yet made safe for a terminal: the surface escapes it.
    """
    if line.stream == "stderr":
        yield _decode(line.data)
        return
    events = parsed(harness, line.data)
    if line.data.strip() and all(event.kind == "unparseable" for event in events):
        yield _decode(line.data)  # text, or a line no bounded reader takes whole: shown as it came
        return
    for event in events:
        text = render_event(event)
        if text is not None:
            yield text


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape").removesuffix("\r")


def exact(line: Line) -> str:
    """The line's exact text: a byte that is not UTF-8 is kept as a lone surrogate (``surrogateescape``)."""
    return line.data.decode("utf-8", "surrogateescape")
