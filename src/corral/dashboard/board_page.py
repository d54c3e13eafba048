"""The dashboard's board: every project's tasks in the groups the live views share, a day's activity, and the
form that creates a task.

The board is :func:`corral.engine.operations.board.board`'s groups in their order, its finished
rows and :func:`~corral.engine.operations.board.activity`'s counts, rendered as they come
(``templates/board*.html``). Colours are the groups' (:data:`corral.dashboard.views.NEED_COLOURS`),
named by the legend above the columns.
"""

from __future__ import annotations

from typing import Any

from corral.adapters.harness import NAMES as HARNESSES
from corral.dashboard.html import Markup, environment, render
from corral.dashboard.task_page import retry_line
from corral.dashboard.views import LEGEND, NEED_COLOURS, Keys, group_of, page, status_colour, task_href
from corral.domain.status import status_text
from corral.domain.substate import runs_on


def board_page(keys: Keys, fragment: Markup, projects: list[tuple[str, str]] | None = None) -> Markup:
    """The whole board page: ``fragment`` (the part its stream replaces) and the create form, which no update
    replaces (nothing a person is typing is lost); ``projects``: (state name, project name) to create in."""
    body = render("board.html", fragment=fragment, form=create_form(projects or []))
    return page("corral — board", keys, body)


def create_form(projects: list[tuple[str, str]], *, oob: bool = False) -> Markup:
    """The form that creates a task in one of ``projects`` ((state name, name)) as ``corral create`` does;
    ``oob``: an empty one that replaces it once a task was created."""
    return render("create_form.html", projects=projects, harnesses=HARNESSES, oob=oob)


def board_fragment(doc: dict[str, Any], states: dict[str, str], act: dict[str, Any]) -> Markup:
    """The board document (``Board.to_json``), its projects' state names by path, the activity chart."""
    groups = [
        {**g, "colour": NEED_COLOURS[g["needs"]], "cards": [_card_context(r, states) for r in g["rows"]]}
        for g in doc["groups"]
    ]
    finished = [_card_context(r, states) for r in doc["finished"]]
    return render(
        "board_fragment.html",
        projects=", ".join(p["name"] for p in doc["projects"]) or "none yet",
        problems=doc["problems"],
        legend=[(key, title, NEED_COLOURS[key]) for key, title in LEGEND],
        chart=activity_plot(act),
        groups=groups,
        finished=finished,
    )


def _card_context(row: dict[str, Any], states: dict[str, str]) -> dict[str, Any]:
    status = status_text(row["status"]) + (f" · {row['substate']}" if row.get("substate") else "")
    if where := runs_on(row.get("host")):
        status += f" · {where}"
    live = row.get("live") or {}
    n = row.get("needs_action") or 0
    return {
        "row": row,
        "href": task_href(row, states.get(row["project_path"], "")),
        "status_text": status,
        "group": group_of(row["status"], row.get("needs")),
        "age": _age(row.get("age_s")),
        "badge": f"[{n} need{'s' if n == 1 else ''} action]" if n else None,  # list's and watch's, word for word
        "retry": retry_line(live) if live.get("retry_class") is not None else None,
        "last_line": live.get("last_line"),
    }


def _card(row: dict[str, Any], states: dict[str, str]) -> Markup:
    """One task's card on the board."""
    return Markup(environment().get_template("card.html").module.card(_card_context(row, states)))


#: The chart's geometry: a row per status, a bar per hour.
ROW_H, LABEL_W, BAR_W = 18, 90, 12


def activity_plot(act: dict[str, Any]) -> Markup:
    """Per status, how many tasks were in it in each hour of the last day (``activity``): one row of bars each,
    coloured by the board's group of the status, its tasks over the day at the row's end."""
    counts: dict[str, list[int]] = act.get("counts") or {}
    hours: list[str] = act.get("hours") or []
    if not counts or not hours:
        return render("activity.html", rows=[], hours=0)
    top = max(max(v) for v in counts.values()) or 1
    totals: dict[str, int] = act.get("tasks") or {k: max(v) for k, v in counts.items()}
    rows: list[dict[str, Any]] = []
    for i, (status, values) in enumerate(counts.items()):
        y = i * ROW_H
        bars = []
        for h, n in enumerate(values):
            if n:
                bh = max(2, round((ROW_H - 4) * n / top))
                bars.append({"x": LABEL_W + h * BAR_W, "y": y + ROW_H - 2 - bh, "h": bh, "n": n, "at": hours[h]})
        rows.append({"status": status, "y": y, "bars": bars, "total": totals.get(status, 0)})
    rows_h = ROW_H * len(counts)
    return render(
        "activity.html",
        rows=rows,
        hours=len(hours),
        colour={status: status_colour(status) for status in counts},
        width=LABEL_W + len(hours) * BAR_W + 40,
        height=rows_h + 18,
        rows_h=rows_h,
        label_w=LABEL_W,
        bar_w=BAR_W,
        since=act.get("since"),
        caption=", ".join(f"{r['status']} {r['total']}" for r in rows),
    )


def _age(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return ""
    s = int(seconds)
    if s < 60:
        return "now"  # seconds would change the board every second
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
