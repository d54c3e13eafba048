"""The board's rows as the terminal app shows them: Rich ``Text`` built from a board document and nothing else.

Pure: no terminal, no clock, no store. The board (``corral.engine.operations.board``) decides every
group, status and badge; the words of each cell are ``watch``'s (:mod:`corral.cli.watch_view`), which
escapes everything that came from outside (a goal, a reason, the agent's last line) as one line. The
result is a ``Text``, never markup: a ``[bold]`` or ``[@click=…]`` an agent wrote is shown as written,
Textual never reads it.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from corral.cli import watch_view as view
from corral.cli.render import INDENT, STATUS_COLOR, clip, goal_text, one_line
from corral.domain.needs import Need

#: The live line under a working row starts so.
LIVE_MARK = "↳ "

#: The group of finished tasks, shown after the Need groups.
FINISHED = "finished"
_GROUP_COLOR: dict[str, str] = {
    Need.REVIEW: "yellow",
    Need.FAILED: "red",
    Need.WORKING: "cyan",
    Need.BACKLOG: "dim",
    FINISHED: "green",
}
_AGE_WIDTH = 8


def groups_of(doc: dict[str, Any], *, finished: bool) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """``(need, title, rows)`` of each group that has rows, in the board's order; ``finished``: the
    board's finished rows too, last (a watch of named tasks keeps them in sight)."""
    groups = [(g["needs"], g["title"], g["rows"]) for g in doc["groups"] if g["rows"]]
    if finished and doc.get("finished"):
        groups.append((FINISHED, "Finished", doc["finished"]))
    return groups


def title_line(doc: dict[str, Any]) -> Text:
    """``corral watch · app · 3 unfinished``."""
    unfinished = sum(len(g["rows"]) for g in doc["groups"])
    names = ", ".join(one_line(str(p["name"])) for p in doc.get("projects") or []) or "no project"
    return Text(f"corral watch · {names} · {unfinished} unfinished", style="bold")


def group_line(need: str, title: str, count: int) -> Text:
    """A group's heading: ``Waiting for review (2)``."""
    return Text(f"{title} ({count})", style=f"bold {_GROUP_COLOR.get(need, '')}".strip())


class Widths:
    """The columns' widths, from every row shown (so the columns line up across groups)."""

    def __init__(self, rows: list[dict[str, Any]], many: bool) -> None:
        self.many = many
        self.refs = {view.key_of(r): INDENT * int(r.get("depth") or 0) + view.ref_text(r, many) for r in rows}
        self.ref = min(max((len(v) for v in self.refs.values()), default=3), 40)
        self.status = min(max((len(view.status_text(r)) for r in rows), default=6), 40)


def row_text(row: dict[str, Any], widths: Widths, *, width: int, aged: float = 0.0, selected: bool = False) -> Text:
    """A task's row, and under a working one its live line: ``› fix-login  working(agent)  2 min  goal``.

    ``width``: the columns there are; ``aged``: seconds since the board was read (added to its age);
    ``selected``: marked ``›`` (seen without colours too)."""
    key = view.key_of(row)
    ref = widths.refs.get(key) or view.ref_text(row, widths.many)
    status = view.status_text(row)
    age = view.age_text(None if row.get("age_s") is None else float(row["age_s"]) + aged)
    room = max(10, width - widths.ref - widths.status - _AGE_WIDTH - 10)
    text = Text("› " if selected else "  ", no_wrap=True, overflow="ellipsis")
    text.append(f"{clip(ref, widths.ref):<{widths.ref}}", style="bold")
    text.append("  ")
    text.append(f"{clip(status, widths.status):<{widths.status}}", style=STATUS_COLOR.get(row["status"], "bold"))
    text.append(f"  {age:>{_AGE_WIDTH}}  ")
    text.append(clip(view.badge(row) + goal_text(row), room))
    detail = view.live_detail(row.get("live"))
    if detail:
        indent = " " * (widths.ref + 4)
        text.append("\n")
        text.append(f"{indent}{LIVE_MARK}{clip(detail, max(10, width - len(indent) - 3))}", style="dim")
    return text


def plain_rows(
    doc: dict[str, Any], *, width: int, finished: bool = False, selected: tuple[str, str] | None = None
) -> list[str]:
    """The board as plain lines (its title, each group's heading, each row and live line): what the app
    shows, without colour — for a reader that wants the text (a test, a log)."""
    groups = groups_of(doc, finished=finished)
    many = len(doc.get("projects") or []) > 1
    widths = Widths([r for _n, _t, rows in groups for r in rows], many)
    lines = [title_line(doc).plain]
    if not groups:
        lines += ["", "Nothing unfinished."]
    for need, title, rows in groups:
        lines += ["", group_line(need, title, len(rows)).plain]
        for r in rows:
            lines += row_text(r, widths, width=width, selected=view.key_of(r) == selected).plain.split("\n")
    lines += [f"! {one_line(str(p))}" for p in doc.get("problems") or []]
    return lines
