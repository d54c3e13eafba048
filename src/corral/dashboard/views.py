"""The dashboard's pages: each renders a document the engine returned, and decides nothing.

The board is :func:`corral.engine.operations.board.board`'s groups in their order, its finished
rows and :func:`~corral.engine.operations.board.activity`'s counts; the task page is
``show --json``'s document (:func:`corral.engine.operations.queries.show_task`). Every piece of
text goes through :func:`corral.dashboard.html.esc`. Plots are inline SVG drawn with
presentation attributes (the CSP allows no inline style).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from corral.dashboard.html import Markup, esc, join, path, tag
from corral.domain.clock import parse_time
from corral.domain.operations_table import Op, allowed_operations
from corral.domain.status import Status
from corral.domain.substate import runs_on

HTMX = "static/htmx-2.0.11.min.js"
STREAM = "static/dashboard.js"  # the page's event stream (no inline script: the CSP allows none)
CSS = "static/dashboard.css"
#: htmx without eval, without running script tags it swaps in, without its inline indicator style.
HTMX_CONFIG = '{"allowEval":false,"allowScriptTags":false,"includeIndicatorStyles":false,"selfRequestsOnly":true}'

STATUS_COLOURS = {
    "backlog": "#9aa5b1",
    "working": "#2f9e44",
    "blocked": "#e8a317",
    "conflict": "#d9480f",
    "pairing": "#1971c2",
    "interrupted": "#c92a2a",
    "merging": "#7048e8",
    "submitted": "#1098ad",
    "zombie": "#495057",
    "complete": "#2b8a3e",
    "abandoned": "#868e96",
}
ATTEMPT_COLOURS = {"working": "#2f9e44", "retrying": "#f59f00", "failed": "#e03131", "waiting": "#4dabf7"}


class Keys(Protocol):
    """What a page needs of the dashboard's keys (``security.Keys``): its CSRF token and its root."""

    csrf: str

    @property
    def prefix(self) -> str: ...


def page(title: str, keys: Keys, body: Markup) -> Markup:
    """A whole page. Its links are relative to ``<base>``, the dashboard's secret root, so no page
    names the root but through it."""
    csrf = keys.csrf
    return Markup(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<base href="{esc(keys.prefix)}/">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="htmx-config" content="{esc(HTMX_CONFIG)}">'
        f"<title>{esc(title)}</title>"
        f'<link rel="stylesheet" href="{CSS}">'
        f'<script src="{HTMX}"></script><script src="{STREAM}"></script>'
        f'</head><body hx-headers=\'{{"X-Corral-CSRF": "{esc(csrf)}"}}\'>'
        '<header class="top"><a href="./" class="brand">corral</a></header>'
        f"{body}</body></html>"
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


def task_href(row: dict[str, Any], state: str) -> str:
    return path("p", state, "t", str(row["id"]))


# -- the board ----------------------------------------------------------------------------------------


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
    if row.get("needs_action"):
        parts.append(tag("span", f"{row['needs_action']} incident(s) need action", class_="badge"))
    live = row.get("live") or {}
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


# -- the task page ------------------------------------------------------------------------------------


def task_page(keys: Keys, state: str, task_id: str, title: str, parts: dict[str, Markup]) -> Markup:
    events = path("events", "p", state, "t", task_id)
    body = Markup(
        f'<main class="task" data-stream="{esc(events)}" data-events="{" ".join(EVENTS)}">'
        f'<div id="head" data-event="head">{parts["head"]}</div>'
        f"{compose(keys.csrf, parts['actions'])}"
        '<div id="flash" aria-live="polite"></div>'
        '<section class="narration-box"><h3>Accept</h3>'
        f'<ol id="narration" data-event="narration" data-append>{parts["narration"]}</ol></section>'
        f'<div id="details" data-event="details">{parts["details"]}</div>'
        '<section class="output-box"><h3>Turn output</h3>'
        '<pre id="output" data-event="output" data-append></pre></section>'
        f'<section class="diff-box"><h3>Diff</h3><div id="diff" data-event="diff">{parts["diff"]}</div></section>'
        "</main>"
    )
    return page(title, keys, body)


#: The events a task page's stream sends.
EVENTS = ("head", "actions", "details", "narration", "output", "diff")


def task_parts(doc: dict[str, Any], state: str) -> dict[str, Markup]:
    """The task page's parts that change, each swapped on its own (so the compose box is never
    replaced under a person typing in it): ``head`` (status, why it stopped, what next, the live
    line), ``actions`` (the buttons and protected-file decisions), ``details`` (the plot, incidents,
    subtasks and the timeline)."""
    t = doc["task"]
    out: list[str] = []
    status = t["status"] + (f" · {t['substate']}" if t.get("substate") else "")
    lease = doc.get("lease")
    if lease and lease["state"] == "claimed" and (where := runs_on(lease.get("host"))):
        status += f" · {where}"
    out.append(
        tag(
            "h1",
            tag("span", t["ref"], class_="ref")
            + Markup(" ")
            + tag("span", status, class_=f"status s-{t['status']}", id="task-status", data_status=t["status"]),
        )
    )
    out.append(tag("p", t.get("goal") or "", class_="goal"))
    if t.get("prompt"):
        out.append(tag("details", tag("summary", "Prompt") + tag("pre", t["prompt"])))
    facts = f"branch {t.get('branch')} → {t.get('target')} · harness {t.get('harness')} · updated {t.get('updated_at')}"
    out.append(tag("p", facts, class_="meta"))
    if doc.get("stopped_because"):
        out.append(tag("p", Markup("<b>Stopped because:</b> ") + esc(doc["stopped_because"]), class_="stopped"))
    if doc.get("next"):
        out.append(tag("p", Markup("<b>Next:</b> ") + esc(doc["next"]), class_="next"))
    live = doc.get("live") or {}
    if live.get("last_line") or live.get("progress"):
        out.append(tag("p", live.get("progress") or live.get("last_line") or "", class_="lastline"))
    details = join([timeline_plot(doc), _incidents(doc), _children(doc, state), _turns(doc)])
    return {"head": join(out), "actions": actions(doc, path("p", state, "t", t["id"])), "details": details}


def message_box(*, oob: bool = False) -> Markup:
    """The compose box's text (``oob``: an empty one that replaces it once its text was sent)."""
    swap = ' hx-swap-oob="true"' if oob else ""
    return Markup(
        f'<textarea name="message" id="message" rows="3"{swap} '
        'placeholder="Feedback for the agent, a question, or why you reject, close or reopen"></textarea>'
    )


def compose(csrf: str, actions_html: Markup) -> Markup:
    """The compose box: one text for feedback, a question or a reason, and the buttons that send it.
    It is never swapped by an update, so nothing a person is typing is lost."""
    return Markup(
        '<form class="compose" id="compose" hx-target="#flash" hx-swap="innerHTML">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f"{message_box()}"
        f'<div id="actions" data-event="actions">{actions_html}</div></form>'
    )


def actions(doc: dict[str, Any], base: str) -> Markup:
    """The buttons of what a person may do now, and the protected files to approve or revert. Which
    buttons a status shows is the operations table's answer (``allowed_operations``), never this
    module's; an action the engine refuses all the same (the task moved meanwhile) says why in the
    flash line."""
    status = doc["task"]["status"]
    pending = [v for v in doc.get("violations") or [] if v.get("decision") == "pending"]
    files = ""
    if pending:
        rows = []
        for v in pending:
            p = v.get("path", "")
            rows.append(
                tag(
                    "li",
                    tag("code", p)
                    + Markup(" ")
                    + tag("label", Markup(f'<input type="checkbox" name="approve" value="{esc(p)}"> approve'))
                    + Markup(" ")
                    + tag("label", Markup(f'<input type="checkbox" name="revert" value="{esc(p)}"> revert')),
                )
            )
        files = tag("fieldset", tag("legend", "Protected files changed") + tag("ul", join(rows)), class_="violations")
    offered = allowed_operations(Status(status))
    buttons = [_button(op, base) for op in BUTTONS if op in offered]
    return files + tag("div", join(buttons), class_="buttons")


#: The dashboard's buttons, in the order shown: (label, class) by operation. Each posts to its own
#: route (``app.ACTIONS``); which of them a task shows, the operations table decides.
BUTTONS: dict[Op, tuple[str, str]] = {
    Op.START: ("Start", ""),
    Op.UNBLOCK: ("Unblock", "primary"),
    Op.RESUME: ("Resume", ""),
    Op.ASK: ("Ask", ""),
    Op.STOP: ("Stop", ""),
    Op.ACCEPT: ("Accept", "primary"),
    Op.REJECT: ("Reject", "danger"),
    Op.CLOSE: ("Close", "danger"),
    Op.REOPEN: ("Reopen", ""),
}


def _button(op: Op, base: str) -> Markup:
    label, cls = BUTTONS[op]
    return tag(
        "button",
        label,
        type="submit",
        name="action",
        value=op.value,
        hx_post=f"{base}/{op.value}",
        hx_target="#flash",
        hx_include=f"#{REVIEW_TIP}" if op is Op.ACCEPT else None,  # Accept merges the tip the diff shows
        class_=cls or None,
    )


#: The id of the diff's hidden field naming the tip it shows; Accept sends it (``hx-include``).
REVIEW_TIP = "review-tip"
#: Uncommitted paths named under a diff, at most.
UNCOMMITTED_SHOWN = 20


def diff_fragment(tip: str, commits: list[str], text: str, uncommitted: tuple[str, ...] = ()) -> Markup:
    """The diff box: the commits, the tip they end at (also a hidden field, the tip Accept merges), the patch,
    and the worktree's uncommitted paths, which are not part of it nor of what Accept merges."""
    from corral.dashboard.html import diff

    head = tag("p", f"At {tip[:12]}: {len(commits)} commit(s); Accept merges exactly this.", class_="meta")
    field = Markup(f'<input type="hidden" id="{REVIEW_TIP}" name="tip" value="{esc(tip)}">')
    out = head + field + tag("ul", join(tag("li", c) for c in commits), class_="commits") + diff(text)
    if uncommitted:
        named = ", ".join(uncommitted[:UNCOMMITTED_SHOWN]) + (" …" if len(uncommitted) > UNCOMMITTED_SHOWN else "")
        said = f"Uncommitted in the worktree, not shown and not part of what Accept merges: {named}"
        out += tag("p", said, class_="meta uncommitted")
    return out


def _incidents(doc: dict[str, Any]) -> Markup:
    inc = doc.get("incidents") or {}
    rows = inc.get("rows") or []
    items = join(
        tag(
            "li",
            " · ".join(str(r.get(k)) for k in ("label", "summary", "evidence") if r.get(k)) or str(r),
        )
        for r in rows[:50]
    )
    return tag("section", tag("h3", f"Incidents: {inc.get('line', '')}") + tag("ul", items), class_="incidents")


def _children(doc: dict[str, Any], state: str) -> Markup:
    kids = doc.get("children") or []
    if not kids:
        return Markup("")
    items = join(
        tag(
            "li",
            tag("a", c.get("ref", ""), href=path("p", state, "t", str(c.get("ref", ""))))
            + Markup(" ")
            + tag("span", c.get("status", ""), class_=f"status s-{c.get('status', '')}")
            + Markup(" ")
            + esc(c.get("substate") or ""),
        )
        for c in kids
    )
    return tag("section", tag("h3", "Subtasks") + tag("ul", items), class_="children")


def _turns(doc: dict[str, Any]) -> Markup:
    """The timeline: status changes and turns, in time order."""
    entries: list[tuple[str, Markup]] = []
    for c in doc.get("status_changes") or []:
        text = f"{c.get('from') or '∅'} → {c.get('to')} by {c.get('actor')}: {c.get('reason') or ''}"
        entries.append((c.get("at") or "", tag("li", esc(c.get("at")) + Markup(" ") + esc(text), class_="change")))
    for turn in doc.get("turns") or []:
        who = turn["role"] + (f" ({turn['actor']})" if turn.get("actor") else "")
        head = f"#{turn['sequence']} {who} · {turn.get('kind')}"
        if turn.get("agent_s") is not None:
            head += f" · agent {turn['agent_s']} s · waited {turn.get('waited_s') or 0} s"
        body = tag("div", head, class_="turn-head") + tag("pre", turn.get("content") or "", class_="turn-body")
        if turn.get("reason"):
            body += tag("div", turn["reason"], class_="reason")
        entries.append(
            (
                turn.get("started_at") or "",
                tag(
                    "li",
                    body,
                    class_=f"turn turn-{turn['role']}",
                    data_actor=turn.get("actor") or "",
                    data_kind=turn.get("kind") or "",
                ),
            )
        )
    entries.sort(key=lambda e: e[0])
    return tag("section", tag("h3", "Timeline") + tag("ol", join(e[1] for e in entries), id="timeline"), class_="turns")


def _t(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def timeline_plot(doc: dict[str, Any]) -> Markup:
    """A strip of the task's life: its statuses over time, and its turns' attempts (working,
    retrying between attempts, failed), each turn labelled with its agent and waited time."""
    changes: list[tuple[dict[str, Any], datetime]] = []
    for c in doc.get("status_changes") or []:
        at = _t(c.get("at"))
        if at is not None:
            changes.append((c, at))
    turns = [t for t in doc.get("turns") or [] if t["role"] == "agent"]
    if not changes:
        return Markup("")
    now: datetime = _t(doc["task"].get("updated_at")) or changes[-1][1]
    live = doc.get("live")
    if doc["task"]["status"] == "working" or live:
        from corral.domain.clock import utcnow

        now = max(now, utcnow())
    start: datetime = changes[0][1]
    span = max((now - start).total_seconds(), 1.0)
    width, left = 720, 80

    def x(at: datetime) -> float:
        return round(left + (width - left - 10) * max(0.0, (at - start).total_seconds()) / span, 1)

    svg = [f'<svg class="timeline" role="img" width="{width}" height="64" viewBox="0 0 {width} 64">']
    svg.append("<title>The task's statuses and its turns' attempts over time</title>")
    svg.append('<text x="0" y="14" font-size="11" fill="#333">status</text>')
    for i, (c, at) in enumerate(changes):
        end = changes[i + 1][1] if i + 1 < len(changes) else now
        colour = STATUS_COLOURS.get(str(c.get("to")), "#888")
        w = max(1.0, x(end) - x(at))
        svg.append(
            f'<rect x="{x(at)}" y="4" width="{w}" height="14" fill="{colour}">'
            f"<title>{esc(c.get('to'))} from {esc(c.get('at'))}</title></rect>"
        )
    svg.append('<text x="0" y="38" font-size="11" fill="#333">attempts</text>')
    agent_s = waited_s = 0.0
    for turn in turns:
        agent_s += turn.get("agent_s") or 0
        waited_s += turn.get("waited_s") or 0
        attempts = turn.get("attempts") or []
        for j, a in enumerate(attempts):
            a0, a1 = _t(a.get("started_at")), _t(a.get("ended_at")) or now
            if a0 is None:
                continue
            assert a1 is not None
            kind = "working" if a.get("outcome") in ("succeeded", None) else "failed"
            svg.append(
                f'<rect x="{x(a0)}" y="28" width="{max(1.0, x(a1) - x(a0))}" height="14" '
                f'fill="{ATTEMPT_COLOURS[kind]}" class="a-{kind}"><title>turn {turn["sequence"]} attempt '
                f"{a.get('number')}: {esc(a.get('outcome') or 'running')}</title></rect>"
            )
            nxt = attempts[j + 1] if j + 1 < len(attempts) else None
            n0 = _t(nxt.get("started_at")) if nxt else None
            if n0 is not None and n0 > a1:
                svg.append(
                    f'<rect x="{x(a1)}" y="28" width="{max(1.0, x(n0) - x(a1))}" height="14" '
                    f'fill="{ATTEMPT_COLOURS["retrying"]}" class="a-retrying"><title>retrying</title></rect>'
                )
        if turn.get("waited_s"):
            t0 = _t(turn.get("started_at"))
            t1: datetime = _t(turn.get("ended_at")) or now
            if t0 is not None:
                svg.append(
                    f'<rect x="{x(t0)}" y="44" width="{max(1.0, x(t1) - x(t0))}" height="4" '
                    f'fill="{ATTEMPT_COLOURS["waiting"]}" class="a-waiting"><title>waited on subtasks '
                    f"{turn['waited_s']} s</title></rect>"
                )
    svg.append(
        f'<text x="{left}" y="60" font-size="10" fill="#555">agent {round(agent_s, 1)} s · waited '
        f"{round(waited_s, 1)} s · {len(turns)} turn(s) over {round(span)} s</text>"
    )
    svg.append("</svg>")
    legend = " ".join(f'<span class="lg lg-{k}">{k}</span>' for k in ATTEMPT_COLOURS)
    return tag("figure", Markup("".join(svg)) + tag("figcaption", Markup(legend)), class_="plot", id="timeline-plot")


_STREAMS = {"stderr": "err", "meta": "meta"}


def output_lines(lines: list[tuple[str, str]]) -> Markup:
    """Lines of a turn's output as the log reader gives them: (stream, text), each escaped."""
    return join(
        Markup(f'<span class="o-{_STREAMS.get(stream, "out")}">{esc(text, multiline=False)}</span>\n')
        for stream, text in lines
    )


def narration_items(events: list[dict[str, Any]]) -> Markup:
    out = []
    for e in events:
        if e.get("event") == "plan":
            text = "Plan: " + " → ".join(str(p.get("label")) for p in e.get("phases") or [])
        elif e.get("event") == "phase":
            where = f"[{e['position']}/{e['of']}] " if e.get("position") else ""
            detail = f" — {e['detail']}" if e.get("detail") else ""
            text = f"{where}{e.get('label')}: {e.get('state')}{detail}"
        elif e.get("event") == "result":
            text = f"{e.get('ref')} is {e.get('status')}" + (
                f": merged as {e['commit'][:12]}" if e.get("commit") else ""
            )
        elif e.get("event") == "error":
            text = f"Refused: {e.get('message')}" + (f" — {e['hint']}" if e.get("hint") else "")
        else:
            continue
        out.append(tag("li", text, class_=f"n-{e.get('event')}"))
    return join(out)


def flash(text: str, *, error: bool = False, hint: str | None = None) -> Markup:
    body = esc(text) + (Markup(" ") + tag("span", hint, class_="hint") if hint else Markup(""))
    return tag("p", body, class_="flash error" if error else "flash ok", role="status")
