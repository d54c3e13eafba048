"""The dashboard's board: every project's tasks in the groups the live views share, and a day's activity.

The board is :func:`corral.engine.operations.board.board`'s groups in their order, its finished
rows and :func:`~corral.engine.operations.board.activity`'s counts, rendered as they come.
"""

from __future__ import annotations

from typing import Any

from corral.dashboard.html import Markup, esc, join, tag
from corral.dashboard.task_page import retry_line
from corral.dashboard.views import STATUS_COLOURS, Keys, page, task_href
from corral.domain.substate import runs_on


def board_page(keys: Keys, fragment: Markup) -> Markup:
    body = Markup(
        '<main data-stream="events/board" data-events="board">'
        f'<div id="board" data-event="board">{fragment}</div></main>'
    )
    return page("corral — board", keys, body)


def board_fragment(doc: dict[str, Any], states: dict[str, str], act: dict[str, Any]) -> Markup:
    """The board document (``Board.to_json``), its projects' state names by path, the activity plot."""
    out: list[str] = []
    names = ", ".join(p["name"] for p in doc["projects"]) or "none yet"
    out.append(tag("p", f"Projects: {names}", class_="meta"))  # no clock here: an unchanged board is not sent again
    for problem in doc["problems"]:
        out.append(tag("p", problem, class_="problem"))
    out.append(activity_plot(act))
    cols: list[str] = []
    for group in doc["groups"]:
        cards = join(_card(r, states) for r in group["rows"])
        head = tag("h2", Markup(f"{esc(group['title'])} <span class=n>{len(group['rows'])}</span>"))
        cols.append(tag("section", head + cards, class_=f"col col-{group['needs']}", data_needs=group["needs"]))
    out.append(tag("div", join(cols), class_="columns"))
    done = join(_finished(r, states) for r in doc["finished"])
    out.append(tag("details", tag("summary", f"Finished (latest {len(doc['finished'])})") + tag("ul", done)))
    return join(out)


def _card(row: dict[str, Any], states: dict[str, str]) -> Markup:
    state = states.get(row["project_path"], "")
    status = row["status"] + (f" · {row['substate']}" if row.get("substate") else "")
    if where := runs_on(row.get("host")):
        status += f" · {where}"
    parts = [
        tag("span", _age(row.get("age_s")), class_="age"),
        tag("a", row["ref"], href=task_href(row, state), class_="ref"),
        tag("span", status, class_=f"status s-{row['status']}", data_status=row["status"]),
        tag("span", row["project"], class_="project"),
        tag("div", row.get("goal") or "", class_="goal"),
    ]
    if row.get("reason"):
        parts.append(tag("div", row["reason"], class_="reason"))
    if n := row.get("needs_action"):  # list's and watch's badge, word for word
        parts.append(tag("span", f"[{n} need{'s' if n == 1 else ''} action]", class_="badge"))
    live = row.get("live") or {}
    if live.get("retry_class") is not None:
        parts.append(tag("div", retry_line(live), class_="retry"))
    if live.get("last_line"):
        parts.append(tag("div", live["last_line"], class_="lastline"))
    return tag("article", join(parts), class_="card", id=f"card-{row['id']}", data_ref=row["ref"])


def _finished(row: dict[str, Any], states: dict[str, str]) -> Markup:
    state = states.get(row["project_path"], "")
    return tag(
        "li",
        tag("a", row["ref"], href=task_href(row, state))
        + Markup(" ")
        + tag("span", row["status"], class_=f"status s-{row['status']}")
        + Markup(" ")
        + tag("span", f"{row['project']} · {row.get('goal') or ''}", class_="goal"),
    )


def activity_plot(act: dict[str, Any]) -> Markup:
    """Per status, how many tasks entered it in each hour of the last day: one row of bars each."""
    counts: dict[str, list[int]] = act.get("counts") or {}
    hours = len(act.get("hours") or [])
    if not counts or not hours:
        return tag("p", "No status changes in the last 24 hours.", class_="meta plot-empty")
    top = max(max(v) for v in counts.values()) or 1
    row_h, label_w, bar_w = 18, 90, 12
    width = label_w + hours * bar_w + 40
    svg = [
        f'<svg class="activity" role="img" width="{width}" height="{row_h * len(counts) + 18}" '
        f'viewBox="0 0 {width} {row_h * len(counts) + 18}"><title>Status changes per hour, last 24 hours</title>'
    ]
    for i, (status, values) in enumerate(counts.items()):
        y = i * row_h
        svg.append(f'<text x="0" y="{y + 13}" font-size="11" fill="#333">{esc(status)}</text>')
        for h, n in enumerate(values):
            if n:
                bh = max(2, round((row_h - 4) * n / top))
                colour = STATUS_COLOURS.get(status, "#888")
                svg.append(
                    f'<rect x="{label_w + h * bar_w}" y="{y + row_h - 2 - bh}" width="{bar_w - 2}" height="{bh}" '
                    f'fill="{colour}"><title>{esc(status)}: {n} at {esc(act["hours"][h])}</title></rect>'
                )
        svg.append(
            f'<text x="{label_w + hours * bar_w + 4}" y="{y + 13}" font-size="11" fill="#555">{sum(values)}</text>'
        )
    svg.append(
        f'<text x="{label_w}" y="{row_h * len(counts) + 14}" font-size="10" fill="#777">24 h ago</text>'
        f'<text x="{label_w + hours * bar_w - 30}" y="{row_h * len(counts) + 14}" font-size="10" fill="#777">now</text>'
    )
    svg.append("</svg>")
    counted = ", ".join(f"{k} {sum(v)}" for k, v in counts.items())
    return tag(
        "figure", Markup("".join(svg)) + tag("figcaption", f"Last 24 h: {counted}"), class_="plot", id="activity"
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
