"""``watch``'s text, built from a board (``corral.engine.operations.board``) and nothing else: the
live board's frame and one line of ``--plain`` per change (each fitted to the terminal by
:mod:`corral.cli.line_fit`).

Pure: no terminal, no clock, no store. The board decides every status, group and badge, and the
operations table which keys act on a task; this module only lays them out. Every text that came
from outside (a goal, a reason, the agent's last line and progress) is escaped here as one line
(:func:`corral.cli.render.clip` and :func:`~corral.cli.render.one_line`), so what reaches the
terminal cannot act on it; the colours are the app's marks (``App.paint``), which only
``App.safe`` turns into escape codes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.cli.render import INDENT, STATUS_COLOR, clip, one_line
from corral.domain.operations_table import Op, allowed_operations
from corral.domain.status import Status
from corral.domain.substate import render_status, retry_summary, runs_on

#: ``paint(text, colour)``: the app's colour marks, or the text as it is.
Paint = Callable[[str, str], str]

#: The key of a task's row: its project's path and its id (a ref is unique only in one project).
Key = tuple[str, str]

_GROUP_COLOR = {"review": "yellow", "failed": "red", "working": "cyan", "backlog": "dim"}

#: The live line under a working row starts so.
LIVE_MARK = "↳ "
#: The keys that act on a task, and the operation each asks for (``d`` and ``l`` only read).
ACTION_KEYS: dict[str, Op] = {"u": Op.UNBLOCK, "a": Op.ACCEPT}


def keys_line(status: Status | None, *, detail: bool = False) -> str:
    """What the terminal's last line says: the keys, those that act only where the operations table lets
    the selected task's ``status`` take their operation (None: no task selected, no key acts)."""
    allowed = allowed_operations(status) if status is not None else ()
    acts = [f"{key} {op.value}" for key, op in ACTION_KEYS.items() if op in allowed]
    if detail:
        return " · ".join(["↑/↓ PgUp/PgDn scroll", "d diff", "l log", *acts, "Esc/q back"])
    return " · ".join(["↑/↓ select", "Enter open", "d diff", "l log", *acts, "q quit"])


def plain(text: str, _color: str) -> str:
    """A :data:`Paint` that paints nothing."""
    return text


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


def goal_text(row: dict[str, Any]) -> str:
    goal = str(row.get("goal") or "")
    if row.get("reason"):
        goal = f"{goal} — {row['reason']}"
    return goal


def ref_text(row: dict[str, Any], many: bool) -> str:
    ref = one_line(str(row["ref"]))
    return f"{one_line(str(row.get('project') or '?'))}/{ref}" if many else ref


def board_frame(
    doc: dict[str, Any],
    *,
    width: int,
    selected: Key | None = None,
    paint: Paint = plain,
    aged: float = 0.0,
    finished: bool = False,
) -> tuple[list[str], list[tuple[int, Key]]]:
    """The board as lines, and where each task's row is (its line's index, its key).

    ``doc`` is ``Board.to_json()``; ``aged``: seconds since it was read (added to each age);
    ``finished``: the board's finished rows too (a watch of named tasks keeps them in sight).
    The selected row is marked ``›`` and painted bold.
    """
    many = len(doc.get("projects") or []) > 1
    groups = [(g["needs"], g["title"], g["rows"]) for g in doc["groups"] if g["rows"]]
    if finished and doc.get("finished"):
        groups.append(("finished", "Finished", doc["finished"]))
    every = [r for _n, _t, rows in groups for r in rows]
    refs = {key_of(r): INDENT * int(r.get("depth") or 0) + ref_text(r, many) for r in every}
    ref_w = min(max((len(v) for v in refs.values()), default=3), 40)
    st_w = min(max((len(status_text(r)) for r in every), default=6), 40)
    age_w = 8
    lines: list[str] = []
    where: list[tuple[int, Key]] = []
    unfinished = sum(len(g["rows"]) for g in doc["groups"])
    names = ", ".join(one_line(str(p["name"])) for p in doc.get("projects") or []) or "no project"
    lines.append(paint(f"corral watch · {names} · {unfinished} unfinished", "bold"))
    if not every:
        lines += ["", "  Nothing unfinished."]
    for need, title, rows in groups:
        lines.append("")
        lines.append(paint(f"{title} ({len(rows)})", _GROUP_COLOR.get(need, "bold")))
        for r in rows:
            key = key_of(r)
            here = key == selected
            status = status_text(r)
            pad = " " * max(0, st_w - len(status))
            age = age_text(None if r.get("age_s") is None else float(r["age_s"]) + aged)
            room = max(10, width - ref_w - st_w - age_w - 9)
            ref = refs[key]
            ref_cell = f"{clip(ref, ref_w):<{ref_w}}"
            word = paint(clip(status, st_w), STATUS_COLOR.get(r["status"], "bold"))
            mark = "›" if here else " "
            line = f"{mark} {paint(ref_cell, 'bold') if here else ref_cell}  {word}{pad}  {age:>{age_w}}  "
            line += clip(badge(r) + goal_text(r), room)
            where.append((len(lines), key))
            lines.append(line)
            detail = live_detail(r.get("live"))
            if detail:
                indent = " " * (ref_w + 4)
                lines.append(paint(f"{indent}{LIVE_MARK}{clip(detail, max(10, width - len(indent) - 3))}", "dim"))
    for problem in doc.get("problems") or []:
        lines.append(paint(f"! {clip(str(problem), max(10, width - 3))}", "yellow"))
    return lines, where


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
