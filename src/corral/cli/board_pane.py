"""What the board's task pane shows of one task: its timeline, its log and its diff, as text made safe.

Each is the text the command prints — ``corral show`` (timeline, "Stopped because", "Next"),
``corral logs`` (the latest turn, as it is written) and ``corral diff`` (which records the tip it
showed, so a later accept merges that tip or names what came since) — written into a buffer by
the command's own code and escaped there (:meth:`corral.cli.app.App.safe`): the pane shows it as a
Rich ``Text``, so no markup an agent wrote is ever read.
"""

from __future__ import annotations

import io
from typing import Any

from corral.cli.app import App
from corral.cli.render import show_lines
from corral.domain.sanitize import display
from corral.engine.api import Project, queries
from corral.engine.api import logs as turn_logs
from corral.errors import CorralError

#: The most lines a pane holds: a turn's whole log or a big diff would cost the board more to lay out
#: than a person reads there; the command shows all of it.
MAX_LINES = 3000


def _tail(text: str, ref: str) -> str:
    """A log's last :data:`MAX_LINES` lines, saying where the rest is."""
    lines = text.split("\n")
    if len(lines) <= MAX_LINES:
        return text
    return "\n".join([f"… {len(lines) - MAX_LINES} earlier lines: corral logs {ref}", *lines[-MAX_LINES:]])


def _head(text: str, ref: str) -> str:
    """A diff's first :data:`MAX_LINES` lines, saying where the rest is."""
    lines = text.split("\n")
    if len(lines) <= MAX_LINES:
        return text
    return "\n".join([*lines[:MAX_LINES], f"… {len(lines) - MAX_LINES} more lines: corral diff {ref}"])


def _buffer(project: Project) -> tuple[App, io.StringIO]:
    """A CLI ``App`` on ``project`` that writes into a buffer (no colours: a buffer is no terminal)."""
    out = io.StringIO()
    app = App(str(project.paths.repo))
    app._project = project  # the board's own project: nothing opened twice
    app.stdout = app.stderr = out
    return app, out


def timeline_text(project: Project, task_id: str) -> str:
    """The task's ``show`` page, as ``corral show`` prints it (its latest turns)."""
    app, _out = _buffer(project)
    shown = queries.show_task(project, task_id, last_turns=queries.PAGE_TURNS)
    page = show_lines(app, shown.doc, merges_into=shown.merges_into, earlier_turns=shown.earlier_turns)
    return app.safe("\n".join(page))


def log_text(project: Project, task_id: str) -> str:
    """The task's latest turn's log, as ``corral logs`` prints it (the running turn's, so far)."""
    from corral.cli.commands.logs_cli import Follower

    app, out = _buffer(project)
    task = queries.find_task(project, task_id)
    try:
        seq = turn_logs.pick_turn(project, task, None)
    except CorralError as exc:
        return app.safe(_said(exc))
    Follower(app, task).show(seq, follow=False)
    return _tail(app.safe(out.getvalue().rstrip("\n")), task.ref)


def diff_text(project: Project, task_id: str, actor: Any) -> str:
    """The task's diff, as ``corral diff`` prints it; its tip is recorded as the one ``actor`` reviewed."""
    from corral.engine.api import tasks

    result = tasks.diff(project, task_id, actor=actor, surface="watch")
    said = [f"{len(result.commits)} commit(s) on {result.task.branch} beyond its target, at {result.tip[:12]}:"]
    if result.unverified:
        said.insert(0, "Not yet verified: the agent's turn is still writing this work; accept will show it again.")
    said += [f"  {line}" for line in result.commits]
    said.append("")
    if result.text:
        said.append(result.text.removesuffix("\n"))
    if result.uncommitted:
        said += [
            "",
            f"Uncommitted in the worktree, not part of what accept merges: {', '.join(result.uncommitted[:20])}",
        ]
    return _head(display("\n".join(said)), result.task.ref)


def _said(exc: CorralError) -> str:
    return f"{exc.message} {exc.hint}" if exc.hint else exc.message
