"""``watch``'s words, built from a board (``corral.engine.operations.board``) and nothing else: each
cell of a row (its ref, status, age, badge, goal and live detail), which the live board lays out
(:mod:`corral.cli.board_rows`), and one line of ``--plain`` per change.

Pure: no terminal, no clock, no store. The board decides every status, group and badge; this
module only words them. Every text that came from outside (a goal, a reason, the agent's last line
and progress) is escaped here as one line (:func:`corral.cli.render.clip` and
:func:`~corral.cli.render.one_line`), so what reaches the terminal cannot act on it.
"""

from __future__ import annotations

from typing import Any

from corral.cli.render import clip, goal_text, one_line
from corral.domain.status import Status
from corral.domain.substate import render_status, retry_summary, runs_on

#: The key of a task's row: its project's path and its id (a ref is unique only in one project).
Key = tuple[str, str]


def key_of(row: dict[str, Any]) -> Key:
    return (str(row.get("project_path") or ""), str(row["id"]))


def age_text(seconds: float | None) -> str:
    """How long since a task last changed, coarsely (a board redrawn every second stays still)."""
    if seconds is None:
        return "?"
    whole = int(seconds)
    if whole < 60:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if whole >= size:
            return f"{whole // size} {unit}"
    return "just now"  # pragma: no cover - the loop above always answers


def status_text(row: dict[str, Any]) -> str:
    """``working(agent running)``: the status with its substate, escaped (a substate may hold an agent's words)."""
    where = runs_on(row.get("host"))
    return one_line(render_status(Status(row["status"]), row.get("substate")) + (f" {where}" if where else ""))


def badge(row: dict[str, Any]) -> str:
    """The incident badge, as ``list`` words it: ``[2 need action] ``; nothing when none do."""
    n = row.get("needs_action") or 0
    return f"[{n} need{'s' if n == 1 else ''} action] " if n else ""


def live_detail(live: dict[str, Any] | None) -> str:
    """A working task's progress line, its live retry and its last output line: ``a · b · c``, escaped."""
    if not live:
        return ""
    parts: list[str] = []
    if live.get("progress"):
        parts.append(str(live["progress"]))
    if live.get("retry_class") is not None:
        attempt = live.get("attempt") or 0
        retry = "retrying: " + retry_summary(
            attempt - 1 if attempt > 1 else None, live["retry_class"], live.get("retry_reason")
        )
        if live.get("retry_by") == "harness":
            retry += " (the agent's own retry)"
        if live.get("schedule"):  # corral's own, as show words it
            retry += f", {live['schedule']}"
        elif live.get("next_delay_s"):
            retry += f", next in {live['next_delay_s']:g} s"
        parts.append(retry)
    if live.get("last_line"):
        parts.append(str(live["last_line"]))
    return " · ".join(clip(p, 400) for p in parts)


def ref_text(row: dict[str, Any], many: bool) -> str:
    ref = one_line(str(row["ref"]))
    return f"{one_line(str(row.get('project') or '?'))}/{ref}" if many else ref


def change_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """What must differ for a row to be a change worth a line of ``--plain`` (or ``--json``): what
    its line shows — status and substate, group, badge, goal and reason, progress and retry. The
    last output line and the age change all the time: they are the live board's, not a change."""
    return (status_text(row), row.get("needs"), badge(row), goal_text(row), _quiet_live(row))


def _quiet_live(row: dict[str, Any]) -> str:
    """The live detail of a row, its last output line aside."""
    live = row.get("live") or {}
    # corral's schedule by its moments alone: "(in 5s)" changes every second, the schedule does not
    return live_detail({**{k: v for k, v in live.items() if k != "last_line"}, "schedule": live.get("schedule_at")})


def plain_line(row: dict[str, Any], *, many: bool, clock: str, title: str | None) -> str:
    """One line of ``--plain``: ``19:07:31  fix-login  working(agent running)  Working  goal · progress``.

    ``title``: the row's group (``Waiting for review``), or None for a finished or removed task."""
    parts = [clock, ref_text(row, many), status_text(row)]
    if title:
        parts.append(title)
    text = badge(row) + goal_text(row)
    live = _quiet_live(row)
    if live:
        text += f" · {live}"
    parts.append(clip(text, 300))
    return "  ".join(parts)
