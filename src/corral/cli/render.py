"""Human text for the shared projection: the ``show`` page and ``list`` lines."""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

from corral.cli.app import App
from corral.domain.status import Status
from corral.domain.substate import render_status

_STATUS_COLOR = {
    "working": "cyan",
    "blocked": "yellow",
    "conflict": "red",
    "interrupted": "red",
    "complete": "green",
    "abandoned": "dim",
    "merging": "magenta",
    "submitted": "blue",
}


def width() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return shutil.get_terminal_size((100, 24)).columns


def clip(text: str, room: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= room else text[: max(0, room - 1)] + "…"


def status_word(app: App, status: str, substate: str | None) -> str:
    word = render_status(Status(status), substate)
    return app.style(word, _STATUS_COLOR.get(status, "bold"))


def list_lines(app: App, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    ref_w = min(max(len(r["ref"]) for r in rows), 32)
    words = [render_status_plain(r) for r in rows]
    st_w = min(max(len(w) for w in words), 40)
    total = width()
    lines = []
    for r, word in zip(rows, words, strict=True):
        pad = " " * (st_w - len(word))
        room = total - ref_w - st_w - 4
        goal = r["goal"]
        if r.get("reason"):
            goal = f"{goal} — {r['reason']}"
        lines.append(
            f"{clip(r['ref'], ref_w):<{ref_w}}  {status_word(app, r['status'], r['substate'])}{pad}  {clip(goal, room)}"
        )
    return lines


def render_status_plain(row: dict[str, Any]) -> str:
    return render_status(Status(row["status"]), row["substate"])


def _when(at: str | None) -> str:
    if not at:
        return "?"
    return at[:19].replace("T", " ")


def timeline(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(time, line) entries of status changes, turns and comments, in time order.

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
        line = f"turn {t['sequence']} · {t['kind']} · {who}"
        if t["feedback_delivery"] == "pending":
            line += " · feedback pending"
        if t.get("reason"):
            line += f" — {t['reason']}"
        else:
            content = t["content"].strip()
            first = content.splitlines()[0] if content else ""
            if first:
                line += f": {clip(first, 100)}"
        for a in t["attempts"]:
            if a.get("summary"):
                line += f"\n    {a['summary']}"
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
        from corral.domain.failures import signal_name  # only the details view needs it

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
            t["sequence"]
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
        if t.get("failure") and t["sequence"] != same_turn:
            out.append("")
            out += failure_section(f"Failure (turn {t['sequence']})", t["failure"])
        failed = [a for a in t["attempts"] if a.get("failure") and a["outcome"] != "succeeded"]
        if len(t["attempts"]) > 1 and failed:
            out.append("")
            out.append(f"Failed attempts (turn {t['sequence']}):")
            for a in failed:
                f = a["failure"]
                out.append(
                    f"  {a['number']}. {f['code']} · {f.get('category') or '-'} · {_native(f.get('native') or {})}"
                )
    return out


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
        f"{app.style(t['ref'], 'bold')}  ({t['id']})  {status_word(app, t['status'], t['substate'])}",
        f"Goal:     {t['goal']}",
    ]
    if t["parent"]:
        out.append(f"Parent:   {t['parent']}")
    out.append(f"Branch:   {t['branch'] or '(not started)'} → {merges_into or '?'}")
    if t["worktree"]:
        out.append(f"Worktree: {t['worktree']}")
    harness = t["harness"] or "?"
    model = f" ({t['model']})" if t["model"] else ""
    out.append(f"Harness:  {harness}{model}")
    if t["protected"]:
        out.append(f"Protects: {', '.join(t['protected'])}")
    if t["prompt"]:
        out.append("Prompt:")
        out.extend(f"  {line}" for line in t["prompt"].splitlines())
    if doc["violations"]:
        out.append("Protected files changed:")
        out.extend(f"  {v['decision']:<9} {v['path']}" for v in doc["violations"])
    if doc["children"]:
        out.append("Subtasks: " + ", ".join(f"{c['ref']} ({c['status']})" for c in doc["children"]))
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
    if details:
        out.extend(failure_details(doc))
    out.append("")
    kept = doc.get("destination_restore_conflict")
    if kept:
        out.append(f"{app.style('Your local changes are kept aside:', 'bold')} {kept['message']}")
        out.append(f"  Restore them: {kept['command']}")
    if doc["stopped_because"]:
        out.append(f"{app.style('Stopped because:', 'bold')} {doc['stopped_because']}")
    if doc["next"]:
        out.append(f"{app.style('Next:', 'bold')} {doc['next']}")
    return out
