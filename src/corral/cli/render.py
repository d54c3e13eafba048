"""Human text for the shared projection: the ``show`` page and ``list`` lines, and times as a person reads them.

Times are shown in the local zone (``TZ`` decides) with the zone named, ``list`` says how long
ago a task last changed. Text from outside (an agent's words, paths, branches, reasons) is
escaped on its way out by the app (:meth:`corral.cli.app.App.safe`); a field that is one line
here is escaped as one line (:func:`one_line`), so a line feed in it cannot forge a line of the page.
"""

from __future__ import annotations

import errno
import os
import sys
from datetime import UTC, datetime
from typing import Any

from corral.cli.app import App
from corral.domain.clock import parse_time
from corral.domain.operations_table import Op, may
from corral.domain.sanitize import display
from corral.domain.status import PAUSED, Status, meaning
from corral.domain.substate import NOT_PUSHED, render_status, retry_summary, runs_on
from corral.domain.violations import shown_path

#: The colour of each status word, on every surface that paints one (``show``, ``list``, ``watch``).
STATUS_COLOR = {
    "working": "cyan",
    "pairing": "cyan",
    "blocked": "yellow",
    "conflict": "red",
    "interrupted": "red",
    "zombie": "red",
    "complete": "green",
    "abandoned": "dim",
    "merging": "magenta",
    "submitted": "blue",
}


def width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        pass
    try:  # what shutil.get_terminal_size asks, without importing shutil for it
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 100  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 100


def clip(text: str, room: int) -> str:
    # White space folded to single spaces, then escaped for display. Printable text holds nothing
    # display escapes and no white space but the space, so most goals and refs (a list clips two
    # per row) skip both when no space is doubled or at an end.
    if not (text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " "):
        text = display(" ".join(text.split()), multiline=False)
    return text if len(text) <= room else text[: max(0, room - 1)] + "…"


def one_line(text: str | None) -> str:
    """A field shown on one line: every control (a line feed too) as a visible escape."""
    return display(text or "", multiline=False)


def _as_time(at: datetime | str | None) -> datetime | None:
    if at is None or isinstance(at, datetime):
        return at
    try:
        return parse_time(at)
    except ValueError:
        return None


def local_time(at: datetime | str | None) -> str:
    """``2026-12-01 11:42:31 CET``: the local zone (``TZ``), named; ``?`` when there is no time."""
    when = _as_time(at)
    if when is None:
        return "?"
    local = when.astimezone()
    zone = local.strftime("%Z") or local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} {zone}"


def ago(at: datetime | str | None, now: datetime | None = None) -> str:
    """How long ago, coarsely: ``just now``, ``5 min ago``, ``3 h ago``, ``2 d ago``; ``?`` without a time."""
    when = _as_time(at)
    if when is None:
        return "?"
    seconds = int(((now or datetime.now(UTC)) - when).total_seconds())
    if seconds < 60:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def event_text(doc: dict[str, Any], subject: str) -> str:
    """One event of a long-running command (``daemon run``, ``worker``) as a line: its local time, its
    kind, what it is about (the document's ``subject`` field) and its message."""
    text = f"{local_time(doc['at'])} {doc['event']}"
    if doc.get(subject):
        text += f" {doc[subject]}"
    if doc.get("message"):
        text += f": {doc['message']}"
    return text


def status_word(app: App, status: str, substate: str | None) -> str:
    word = one_line(render_status(Status(status), substate))  # a substate may carry an agent's words
    return app.style(word, STATUS_COLOR.get(status, "bold"))


def list_lines(app: App, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    # A subtask sits under its parent, indented (``projection.as_tree`` gives each row its depth).
    refs = [INDENT * int(r.get("depth") or 0) + r["ref"] for r in rows]
    ref_w = min(max(len(ref) for ref in refs), 32)
    plain: dict[tuple[str, str | None, str | None], str] = {}  # a few distinct words over thousands of rows
    words = []
    for r in rows:
        key = (r["status"], r["substate"], r.get("host"))
        word = plain.get(key)
        if word is None:
            word = plain[key] = render_status_plain(r) + on_host(r.get("host"))
        words.append(word)
    st_w = min(max(len(w) for w in words), 40)
    now = datetime.now(UTC)
    ages = [ago(r.get("updated_at"), now) for r in rows]
    age_w = max(len(a) for a in ages)
    total = width()
    colored = app.colors()  # asked once: a list of thousands of rows styles each status word
    lines = []
    for r, ref, word, age in zip(rows, refs, words, ages, strict=True):
        word = clip(word, st_w)  # a long status is cut to its column: the columns after it stay aligned
        pad = " " * (st_w - len(word))
        room = total - ref_w - st_w - age_w - 6
        goal = goal_text(r)
        status = app.paint(word, STATUS_COLOR.get(r["status"], "bold")) if colored else word
        if r.get("needs_action"):
            n = r["needs_action"]
            goal = f"[{n} need{'s' if n == 1 else ''} action] {goal}"
        lines.append(f"{clip_ref(ref, ref_w):<{ref_w}}  {status}{pad}  {age:<{age_w}}  {clip(goal, room)}")
    return lines


def goal_text(row: dict[str, Any]) -> str:
    """A row's goal as list, watch and the board show it: with why it rests, else the status's plain meaning
    where the person reads it, and a merge that waits on the forge with what it waits for."""
    goal = str(row.get("goal") or "")
    if row.get("reason"):
        goal = f"{goal} — {row['reason']}"
    elif row.get("status") in PAUSED:
        goal = f"{goal} — {meaning(row['status'])}"
    if (pull := row.get("pull_request")) and pull["pending"]:
        goal = f"{goal} — {pull['line']}"
    return goal


def on_host(host: str | None) -> str:
    """Where a turn runs, after its status word: `` on build-2`` for a worker's (docs/workers.md)."""
    where = runs_on(host)
    return f" {one_line(where)}" if where else ""


#: One level of the task tree in ``list``.
INDENT = "  "


def clip_ref(ref: str, room: int) -> str:
    """A ref, maybe indented, clipped to ``room`` (its indentation kept)."""
    body = ref.lstrip(" ")
    return ref[: len(ref) - len(body)] + clip(body, max(1, room - (len(ref) - len(body))))


def render_status_plain(row: dict[str, Any]) -> str:
    return one_line(render_status(Status(row["status"]), row["substate"]))


def _when(at: str | None) -> str:
    return local_time(at) if at else "?"


def exchange(turn: dict[str, Any]) -> int:
    """The number a person reads for a turn: its exchange (a message and its answer are one),
    or the store's sequence in a document from before exchanges were numbered."""
    number = turn.get("exchange")
    return number if isinstance(number, int) else int(turn.get("sequence", turn.get("turn", 0)))


def timeline(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(time, line) entries of status changes, turns and comments, in time order.

    A person's turn is dated when it was given, an agent's when it ended.

    A failed turn carries its reason; the failed attempts of a turn that had several
    follow it as indented lines ("Attempt 1 of 3 failed: … · retrying").
    """
    entries: list[tuple[str, int, str]] = []
    for i, c in enumerate(doc["status_changes"]):
        src = c["from"] or "·"
        reason = f" — {clip(c['reason'], 100)}" if c["reason"] and c["reason"] != "created" else ""
        entries.append((c["at"], i, f"{src} → {c['to']} by {c['actor']}{reason}"))
    for t in doc["turns"]:
        who = t["actor"] or "agent"
        line = f"turn {exchange(t)} · {t['kind']} · {who}"
        if t["feedback_delivery"] == "pending":
            line += " · feedback pending"
        if t.get("reason"):
            line += f" — {one_line(t['reason'])}"
        else:
            content = t["content"].strip()
            # An agent's turn reads as its conclusion, its last line; a person's as its first, the request.
            lines = [s for s in content.split("\n") if s.strip()]  # a bare \r an agent printed is no line end
            said = (lines[-1] if t["role"] == "agent" else lines[0]) if lines else ""
            if said:
                line += f": {clip(said, 100)}"
        for a in t["attempts"]:
            if a.get("summary"):
                line += f"\n    {one_line(a['summary'])}"
        if t["role"] == "agent" and t.get("ended_at"):
            # An agent's turn is what it came to, when it came to it (a failure after minutes of
            # retries is dated when it failed), just before the status change it caused.
            entries.append((t["ended_at"], -100_000 + t["sequence"], line))
        else:
            entries.append((t["started_at"], 10_000 + t["sequence"], line))
    for n in doc["comments"]:
        entries.append((n["at"], 20_000, f"comment by {n['actor']}: {clip(n['body'], 100)}"))
    entries.sort(key=lambda e: (e[0], e[1]))
    return [(_when(at), line) for at, _i, line in entries]


def _native(native: dict[str, Any]) -> str:
    parts = []
    if native.get("exit_code") is not None:
        parts.append(f"exit code {native['exit_code']}")
    if native.get("signal") is not None:
        from corral.domain.exits import signal_name  # only the details view needs it

        parts.append(f"signal {native['signal']} ({signal_name(native['signal'])})")
    if native.get("errno") is not None:
        parts.append(f"errno {native['errno']} ({errno.errorcode.get(native['errno'], '?')})")
    return ", ".join(parts) or "-"


def failure_section(title: str, failure: dict[str, Any] | None, code: str | None = None) -> list[str]:
    """The details view's Failure section: code, phase, category, possible effects, native code, diagnostic."""
    out = [f"{title}:"]
    if failure is None:
        out.append(f"  code              {code or '-'}")
        return out
    if failure.get("diagnostic"):
        diagnostic = failure.get("diagnostic_note") or failure.get("diagnostic_path") or failure["diagnostic"]
    else:
        diagnostic = "-"
    diagnostic = one_line(str(diagnostic))
    also = f" (evidence: {failure['code']})" if code and code != failure["code"] else ""
    out += [
        f"  code              {code or failure['code']}{also}",
        f"  phase             {failure.get('phase') or '-'}",
        f"  category          {failure.get('category') or '-'}",
        f"  possible effects  {failure.get('possible_effects') or '-'}",
        f"  native code       {_native(failure.get('native') or {})}",
        f"  diagnostic        {diagnostic}",
    ]
    return out


def failure_details(doc: dict[str, Any]) -> list[str]:
    """Every failure of the task, newest stop first: the resting cause, then each failed turn."""
    out: list[str] = []
    cause = doc.get("resting_cause")
    evidence = cause.get("evidence") if cause else None
    same_turn = next(
        (
            exchange(t)
            for t in doc["turns"]
            if evidence
            and evidence.get("diagnostic")
            and (t.get("failure") or {}).get("diagnostic") == evidence["diagnostic"]
        ),
        None,
    )
    if cause:
        where = f"turn {same_turn}, why it rests" if same_turn is not None else "why it rests"
        out.append("")
        out += failure_section(f"Failure ({where})", evidence, cause["code"])
    for t in doc["turns"]:
        if t.get("failure") and exchange(t) != same_turn:
            out.append("")
            out += failure_section(f"Failure (turn {exchange(t)})", t["failure"])
        failed = [a for a in t["attempts"] if a.get("failure") and a["outcome"] != "succeeded"]
        if len(t["attempts"]) > 1 and failed:
            out.append("")
            out.append(f"Failed attempts (turn {exchange(t)}):")
            for a in failed:
                f = a["failure"]
                out.append(
                    f"  {a['number']}. {f['code']} · {f.get('category') or '-'} · {_native(f.get('native') or {})}"
                )
    return out


def running_time(seconds: float) -> str:
    """``4:05``, ``1:02:09``: how long a turn has run."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def live_text(live: dict[str, Any], waited: float | None = None) -> str:
    """One line of a running turn (``LiveTurn.as_view``): status and phase, attempt n of m, elapsed,
    the retry and its delay, the last output line; ``waited`` stands in for an unknown elapsed time."""
    phase = live.get("phase")
    head = live["status"] if phase in (None, "work") else f"{live['status']} ({phase})"
    parts = [head]
    if live.get("attempt"):
        most = "at most " if live.get("attempts_at_most") else ""
        parts.append(f"attempt {live['attempt']}" + (f" of {most}{live['attempts']}" if live.get("attempts") else ""))
    elapsed = live.get("elapsed_s")
    if elapsed is not None or waited is not None:
        parts.append(running_time(elapsed if elapsed is not None else waited or 0.0))
    if live.get("retry_class") is not None:
        retry = "retrying: " + retry_summary(live.get("retry_attempt"), live["retry_class"], live.get("retry_reason"))
        if live.get("schedule"):  # corral's own: the next attempt, the ladder's end
            retry += f", {live['schedule']}"
        elif live.get("next_delay_s"):
            retry += f", next in {live['next_delay_s']:g} s"
        parts.append(retry)
    if live.get("substate") and (live.get("waits") or live.get("progress")):
        parts.append(str(live["substate"]))  # what the agent waits on, what it says it is at
    if live.get("last_line"):
        parts.append(" ".join(str(live["last_line"]).split()))
    return display(" · ".join(parts), multiline=False)


def lease_text(lease: dict[str, Any]) -> str:
    """The ``Worker:`` line of ``show`` (``Host:`` for a turn launched on its own host): where the task's turn
    runs (or ran), under which epoch."""
    if lease["state"] == "queued":
        return f"queued for a worker since {local_time(lease['queued_at'])} (epoch {lease['epoch']})"
    where = one_line(lease.get("host") or "?")
    if lease["state"] == "local":  # launched on its own host (a person's dispatch = local), not queued
        line = f"runs on {where} since {local_time(lease['claimed_at'])} (epoch {lease['epoch']})"
        if lease.get("stop_by"):
            line += f" · stop asked by {one_line(lease['stop_by'])}"
        return line
    if lease["state"] == "claimed":
        line = f"runs on {where} since {local_time(lease['claimed_at'])} (epoch {lease['epoch']})"
        if lease.get("unpushed"):
            line += f" · {NOT_PUSHED}: {one_line(lease['unpushed'])}"
        elif lease.get("stop_by"):
            line += f" · stop asked by {one_line(lease['stop_by'])}"
        return line
    line = f"last ran on {where}" if lease.get("host") else f"its worker was lost (epoch {lease['epoch']})"
    if lease.get("unpushed"):  # fenced off before its push landed: that turn's work stayed on its host
        line += f" · its work never reached the remote: {one_line(lease['unpushed'])}"
    return line


def carry_text(carry: dict[str, Any]) -> str:
    """The ``Session:`` line of ``show``: a harness session made on another host, carried to this turn's or not."""
    made_on, host = one_line(carry.get("made_on") or "another host"), one_line(carry["host"])
    if carry["carried"]:
        return f"carried from {made_on} to {host} (its transcript came through the store)"
    why = one_line(carry.get("why") or "no reason recorded")
    return f"fresh on {host}: the session made on {made_on} could not be carried ({why})"


def show_lines(
    app: App,
    doc: dict[str, Any],
    *,
    details: bool = False,
    merges_into: str | None = None,
    earlier_turns: int = 0,
) -> list[str]:
    """The ``show`` page; ``earlier_turns`` is how many older turns the read paged out."""
    t = doc["task"]
    out = [
        f"{app.style(t['ref'], 'bold')}  ({t['id']})  {status_word(app, t['status'], t['substate'])}"
        + (f" — {said}" if (said := meaning(t["status"])) else ""),
        f"Goal:     {one_line(t['goal'])}",
    ]
    if t["parent"]:
        out.append(f"Parent:   {t['parent']}")
    out.append(f"Branch:   {one_line(t['branch'] or '(not started)')} → {one_line(merges_into or '?')}")
    if t["worktree"]:
        out.append(f"Worktree: {one_line(t['worktree'])}")
    harness = t["harness"] or "?"
    model = f" ({t['model']})" if t["model"] else ""
    out.append(f"Harness:  {harness}{model}")
    if t["protected"]:
        out.append(f"Protects: {', '.join(t['protected'])}")
    if doc.get("live"):
        out.append(f"Running:  {live_text(doc['live'])}")
    if lease := doc.get("lease"):
        out.append(f"{'Host:  ' if lease.get('local') else 'Worker:'}   {lease_text(lease)}")
    if carry := doc.get("session_carry"):
        out.append(f"Session:  {carry_text(carry)}")
    if forge := doc.get("forge"):
        out.append(f"Forge:    {one_line(forge['text'])}")
    tools = doc.get("agent_tools")
    if tools and not tools["mcp"]:
        out.append(f"Tools:    the agent had no corral tools ({one_line(tools['absent'] or 'not given')})")
    if sandbox := doc.get("sandbox"):
        out.append(f"Sandbox:  {sandbox['mode']} ({one_line(sandbox['reason'] or 'no reason recorded')})")
    if (check := doc.get("post_turn_check")) and check.get("command"):
        if check["timed_out"]:
            outcome = "ran past its time limit"
        else:
            outcome = f"exit {check['exit_code']}" if check["exit_code"] is not None else "no exit status"
        where = {
            "bwrap": "in the sandbox",
            "unconfined": "UNCONFINED (post_turn_check_unconfined, or no sandbox)",
        }.get(check["confinement"] or "", "where is not recorded")
        out.append(f"Check:    {one_line(check['command'])}: {outcome}, {where}")
    if rule := doc.get("failure_rule"):
        if rule["rule"] == "intents":
            out.append(
                "Rule:     tool failures judged with the agent's intents and dispositions (confined, corral's shell)"
            )
        else:
            out.append(
                f"Rule:     tool failures judged by the exact-retry rule ({one_line(rule['why'] or 'no reason')})"
            )
    if t["prompt"]:
        out.append("Prompt:")
        out.extend(f"  {line}" for line in t["prompt"].splitlines())
    if doc["violations"]:
        out.append("Protected files changed:")
        out.extend(f"  {v['decision']:<9} {shown_path(v['path'])}" for v in doc["violations"])
    if doc["children"]:
        out.append("Subtasks:")
        ref_w = min(max(len(c["ref"]) for c in doc["children"]), 32)
        for c in doc["children"]:
            word = status_word(app, c["status"], c.get("substate"))
            out.append(f"  {clip(c['ref'], ref_w):<{ref_w}}  {word}")
    hold = doc.get("permission_hold")
    if hold:
        out.append(
            f"Held:     the agent reported that a permission ({hold['permission_resource']}) blocked "
            f"{one_line(hold['summary'])} (agent-reported; the remote outcome is unknown)"
        )
        if may(Op.UNBLOCK, Status(t["status"])):  # the one way out, offered where the table lets it run
            retry = f"corral unblock {t['ref']} --retry-blocked"
            out.append(f"          confirm one retry (nothing more is granted): {retry}")
    incidents = doc.get("incidents")
    if incidents and doc.get("session"):
        # Before the agent's own account of its progress: what went wrong is never hidden by a status.
        out.append(f"Failures: {incidents['line']}")
        out.extend(f"  {incident_line(row)}" for row in incidents["rows"])
        out.append(f"  {incidents['note']}")
    out.append("")
    out.append("Timeline:")
    if earlier_turns:
        turns = f"{earlier_turns:,} earlier turn{'' if earlier_turns == 1 else 's'}"
        out.append(f"  … {turns} not shown; corral show {t['ref']} --all shows every turn")
    for when, line in timeline(doc):
        first, *more = line.split("\n")
        out.append(f"  {when}  {first}")
        out.extend(f"  {' ' * len(when)}  {extra}" for extra in more)
    if doc["journal"]:
        out.append("")
        out.append("Journal:")
        out.extend(f"  {_when(n['at'])}  {n['actor']}: {n['body']}" for n in doc["journal"])
    if details and doc["session"]:
        s = doc["session"]
        out.append("")
        out.append("Session:")
        out.append(f"  id {s['id']} · harness session {s['harness_session_id'] or '-'}")
        out.append(f"  consecutive interruptions {s['consecutive_interruptions']} · auto-resumed {s['auto_resumed']}")
    if details and t.get("settings"):
        out.append("")
        out.append("Settings of its own:")
        for name, own in t["settings"].items():
            where = (
                "corral edit --set"
                if own.get("source") == "task"
                else f"{own.get('origin') or 'the environment'} at a launch"
            )
            out.append(f"  {name} = {own.get('value')!r}  (from {where})")
    if details:
        out.extend(failure_details(doc))
    out.append("")
    kept = doc.get("destination_restore_conflict")
    if kept:
        out.append(f"{app.style('Your local changes are kept aside:', 'bold')} {kept['message']}")
        out.append(f"  Restore them: {kept['command']}")
    for put in doc.get("refs_put_back") or []:
        label = app.style(f"Refs guarded (turn {exchange(put)}):", "bold")
        out.append(f"{label} {one_line(put['line'])}")
    if doc["stopped_because"]:
        out.append(f"{app.style('Stopped because:', 'bold')} {one_line(doc['stopped_because'])}")
    if doc["next"]:
        out.append(f"{app.style('Next:', 'bold')} {one_line(doc['next'])}")
    return out


def incident_line(row: dict[str, Any]) -> str:
    """One incident: ``Action required ×3: bash failed: E1  [output.log#byte=1641]``."""
    from corral.domain.incidents import row_text  # only ``show`` and ``failures`` print incidents

    return row_text(row)
