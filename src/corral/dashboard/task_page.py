"""The dashboard's page of one task: its head, the buttons the operations table allows, the diff, the plots.

The page is ``show --json``'s document (:func:`corral.engine.operations.queries.show_task`),
rendered in parts that are each swapped on their own as they change; which buttons a status
shows is the operations table's answer, never this module's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral.dashboard.html import Markup, esc, join, path, tag
from corral.dashboard.views import STATUS_COLOURS, Keys, page
from corral.domain.clock import parse_time
from corral.domain.incidents import row_text
from corral.domain.operations_table import Op, allowed_operations
from corral.domain.status import Status
from corral.domain.substate import retry_summary, runs_on

ATTEMPT_COLOURS = {"working": "#2f9e44", "retrying": "#f59f00", "failed": "#e03131", "waiting": "#4dabf7"}


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
    if live.get("retry_class") is not None:
        out.append(tag("p", retry_line(live), class_="retry"))
    if live.get("last_line") or live.get("progress"):
        out.append(tag("p", live.get("progress") or live.get("last_line") or "", class_="lastline"))
    details = join([timeline_plot(doc), _incidents(doc), _children(doc, state), _turns(doc)])
    return {"head": join(out), "actions": actions(doc, path("p", state, "t", t["id"])), "details": details}


def retry_line(live: dict[str, Any]) -> str:
    """The running turn's retry as ``show`` words it: what failed, then corral's schedule (the next
    attempt, when the ladder stops) or a harness's own retry; the same live view, the same words."""
    attempt = live.get("attempt") or 0
    line = "retrying: " + retry_summary(
        live.get("retry_attempt") or (attempt - 1 if attempt > 1 else None),
        live["retry_class"],
        live.get("retry_reason"),
    )
    if live.get("retry_by") == "harness":
        line += " (the agent's own retry)"
    if live.get("schedule"):
        line += f", {live['schedule']}"
    elif live.get("next_delay_s"):
        line += f", next in {live['next_delay_s']:g} s"
    return line


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
#: route (``task_actions.ACTIONS``); which of them a task shows, the operations table decides.
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
    # each as show and failures word it (its count beside it), with the id a person dismisses it by
    items = join(
        tag("li", esc(row_text(r)) + Markup(" ") + tag("code", r.get("id") or "", class_="incident-id"))
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
