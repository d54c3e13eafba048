"""The dashboard's page of one task: its head, the buttons the operations table allows, the diff, the plots.

The page is ``show --json``'s document (:func:`corral.engine.operations.queries.show_task`),
rendered from ``templates/task*.html`` in parts that are each swapped on their own as they change;
which buttons a status shows is the operations table's answer, never this module's. Its Next is
those buttons: what the person can do now, as the action itself rather than a command to type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral.dashboard.html import Markup, diff_lines, path, render
from corral.dashboard.views import Keys, group_of, page, status_colour
from corral.domain.clock import parse_time
from corral.domain.incidents import row_text
from corral.domain.operations_table import Op, allowed_operations
from corral.domain.status import Status, status_text
from corral.domain.substate import retry_summary, runs_on

ATTEMPT_COLOURS = {"working": "#2f9e44", "retrying": "#f59f00", "failed": "#e03131", "waiting": "#4dabf7"}

#: The events a task page's stream sends.
EVENTS = ("head", "actions", "details", "narration", "output", "diff")


def task_page(keys: Keys, state: str, task_id: str, title: str, parts: dict[str, Markup]) -> Markup:
    body = render(
        "task.html",
        events_url=path("events", "p", state, "t", task_id),
        events=" ".join(EVENTS),
        parts=parts,
        compose=compose(keys.csrf, parts["actions"]),
    )
    return page(title, keys, body)


def task_parts(doc: dict[str, Any], state: str) -> dict[str, Markup]:
    """The task page's parts that change, each swapped on its own (so the compose box is never
    replaced under a person typing in it): ``head`` (status, why it stopped, the live line),
    ``actions`` (Next: the buttons, and protected-file decisions), ``details`` (the plot, incidents,
    subtasks and the timeline)."""
    t = doc["task"]
    status = status_text(t["status"]) + (f" · {t['substate']}" if t.get("substate") else "")
    lease = doc.get("lease")
    if lease and lease["state"] == "claimed" and (where := runs_on(lease.get("host"))):
        status += f" · {where}"
    live = doc.get("live") or {}
    head = render(
        "task_head.html",
        t=t,
        status_text=status,
        group=group_of(t["status"], t.get("needs")),
        stopped=doc.get("stopped_because"),
        retry=retry_line(live) if live.get("retry_class") is not None else None,
        live_line=live.get("progress") or live.get("last_line"),
    )
    details = render(
        "task_details.html",
        plot=timeline_plot(doc),
        incidents=_incidents(doc),
        children=[{**c, "href": path("p", state, "t", str(c.get("ref", "")))} for c in doc.get("children") or []],
        entries=_timeline(doc),
    )
    return {"head": head, "actions": actions(doc, path("p", state, "t", t["id"])), "details": details}


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
    return render("message_box.html", oob=oob)


def compose(csrf: str, actions_html: Markup) -> Markup:
    """The compose box: one text for feedback, a question or a reason, and the buttons that send it.
    It is never swapped by an update, so nothing a person is typing is lost."""
    return render("compose.html", csrf=csrf, message=message_box(), actions=actions_html)


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

#: The id of the diff's hidden field naming the tip it shows; Accept sends it (``hx-include``).
REVIEW_TIP = "review-tip"
#: Uncommitted paths named under a diff, at most.
UNCOMMITTED_SHOWN = 20


def actions(doc: dict[str, Any], base: str) -> Markup:
    """Next: the buttons of what a person may do now, and the protected files to approve or revert. Which
    buttons a status shows is the operations table's answer (``allowed_operations``), never this
    module's; an action the engine refuses all the same (the task moved meanwhile) says why in the
    flash line. Accept asks for a confirmation first (``task_actions.confirm_accept``)."""
    pending = [v for v in doc.get("violations") or [] if v.get("decision") == "pending"]
    offered = allowed_operations(Status(doc["task"]["status"]))
    buttons = [
        {
            "op": op.value,
            "label": BUTTONS[op][0],
            "cls": BUTTONS[op][1] or None,
            "url": f"{base}/{op.value}",
            "include": f"#{REVIEW_TIP}" if op is Op.ACCEPT else None,  # Accept merges the tip the diff shows
        }
        for op in BUTTONS
        if op in offered
    ]
    return render("task_actions.html", pending=[v.get("path", "") for v in pending], buttons=buttons)


def confirm_accept(base: str, ref: str, target: str | None, tip: str | None) -> Markup:
    """What Accept asks before it merges: the task, the branch it merges into, the tip the page's diff showed;
    its Merge posts the same tip, confirmed, and Cancel takes the question away."""
    return render("confirm_accept.html", url=f"{base}/accept", ref=ref, target=target, tip=tip)


def diff_fragment(tip: str, commits: list[str], text: str, uncommitted: tuple[str, ...] = ()) -> Markup:
    """The diff box: the commits, the tip they end at (also a hidden field, the tip Accept merges), the patch,
    and the worktree's uncommitted paths, which are not part of it nor of what Accept merges."""
    lines, cut = diff_lines(text)
    named = ", ".join(uncommitted[:UNCOMMITTED_SHOWN]) + (" …" if len(uncommitted) > UNCOMMITTED_SHOWN else "")
    return render(
        "diff.html",
        tip=tip,
        tip_id=REVIEW_TIP,
        commits=commits,
        lines=lines,
        cut=cut,
        uncommitted=named if uncommitted else None,
    )


def _incidents(doc: dict[str, Any]) -> dict[str, Any]:
    inc = doc.get("incidents") or {}
    # each as show and failures word it (its count beside it), with the id a person dismisses it by
    rows = [{"text": row_text(r), "id": r.get("id") or ""} for r in (inc.get("rows") or [])[:50]]
    return {"line": inc.get("line", ""), "rows": rows}


def _timeline(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The timeline: status changes and turns, in time order."""
    entries: list[dict[str, Any]] = []
    for c in doc.get("status_changes") or []:
        text = f"{c.get('from') or '∅'} → {c.get('to')} by {c.get('actor')}: {c.get('reason') or ''}"
        entries.append({"kind": "change", "at": c.get("at") or "", "text": text})
    for turn in doc.get("turns") or []:
        who = turn["role"] + (f" ({turn['actor']})" if turn.get("actor") else "")
        head = f"#{turn.get('exchange') or turn['sequence']} {who} · {turn.get('kind')}"  # as show numbers it
        if turn.get("agent_s") is not None:
            head += f" · agent {turn['agent_s']} s · waited {turn.get('waited_s') or 0} s"
        entries.append({"kind": "turn", "at": turn.get("started_at") or "", "head": head, "turn": turn})
    entries.sort(key=lambda e: e["at"])
    return entries


def _t(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None


def timeline_plot(doc: dict[str, Any]) -> Markup:
    """A strip of the task's life: its statuses over time (coloured as the board groups them), and its
    turns' attempts (working, retrying between attempts, failed), each turn labelled with its agent and
    waited time."""
    changes: list[tuple[dict[str, Any], datetime]] = []
    for c in doc.get("status_changes") or []:
        at = _t(c.get("at"))
        if at is not None:
            changes.append((c, at))
    turns = [t for t in doc.get("turns") or [] if t["role"] == "agent"]
    if not changes:
        return Markup("")
    now: datetime = _t(doc["task"].get("updated_at")) or changes[-1][1]
    if doc.get("live") or Status(doc["task"]["status"]) is Status.WORKING:
        from corral.domain.clock import utcnow

        now = max(now, utcnow())
    start: datetime = changes[0][1]
    span = max((now - start).total_seconds(), 1.0)
    width, left = 720, 80

    def x(at: datetime) -> float:
        return round(left + (width - left - 10) * max(0.0, (at - start).total_seconds()) / span, 1)

    statuses = []
    for i, (c, at) in enumerate(changes):
        end = changes[i + 1][1] if i + 1 < len(changes) else now
        to = str(c.get("to"))
        statuses.append(
            {"x": x(at), "w": max(1.0, x(end) - x(at)), "colour": status_colour(to), "to": to, "at": c.get("at")}
        )
    attempts: list[dict[str, Any]] = []
    waits: list[dict[str, Any]] = []
    agent_s = waited_s = 0.0
    for turn in turns:
        agent_s += turn.get("agent_s") or 0
        waited_s += turn.get("waited_s") or 0
        tries = turn.get("attempts") or []
        for j, a in enumerate(tries):
            a0, a1 = _t(a.get("started_at")), _t(a.get("ended_at")) or now
            if a0 is None:
                continue
            kind = "working" if a.get("outcome") in ("succeeded", None) else "failed"
            number = turn.get("exchange") or turn["sequence"]
            said = f"turn {number} attempt {a.get('number')}: {a.get('outcome') or 'running'}"
            attempts.append({"x": x(a0), "w": max(1.0, x(a1) - x(a0)), "kind": kind, "title": said})
            nxt = tries[j + 1] if j + 1 < len(tries) else None
            n0 = _t(nxt.get("started_at")) if nxt else None
            if n0 is not None and n0 > a1:
                attempts.append({"x": x(a1), "w": max(1.0, x(n0) - x(a1)), "kind": "retrying", "title": "retrying"})
        t0 = _t(turn.get("started_at"))
        if turn.get("waited_s") and t0 is not None:
            t1: datetime = _t(turn.get("ended_at")) or now
            waits.append({"x": x(t0), "w": max(1.0, x(t1) - x(t0)), "s": turn["waited_s"]})
    summary = f"agent {round(agent_s, 1)} s · waited {round(waited_s, 1)} s · {len(turns)} turn(s) over {round(span)} s"
    return render(
        "timeline_plot.html",
        width=width,
        left=left,
        statuses=statuses,
        attempts=attempts,
        waits=waits,
        colours=ATTEMPT_COLOURS,
        summary=summary,
    )


_STREAMS = {"stderr": "err", "meta": "meta"}


def output_lines(lines: list[tuple[str, str]]) -> Markup:
    """Lines of a turn's output as the log reader gives them: (stream, text), each one line, escaped."""
    return render("output.html", lines=[(_STREAMS.get(stream, "out"), text) for stream, text in lines], nl=Markup("\n"))


def narration_items(events: list[dict[str, Any]]) -> Markup:
    """An accept's events as it told them: its plan, each phase as it starts and ends, its result or refusal."""
    items = []
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
        items.append((e.get("event"), text))
    return render("narration.html", items=items)
