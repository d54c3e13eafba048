"""Incidents: the failures a turn's agent, its model and its supervision ran into, kept apart from status.

A task's lifecycle says where it is; its incidents say what went wrong on the way, and a
blocked task whose tests failed eight times is not healthy because it is blocked
(docs/incidents.md). Three pure parts, each in its own module:

- :mod:`corral.domain.collector` turns a harness's structured facts into journal events;
- :func:`reduce` (here) folds journal events into :class:`FailureState`: one incident per failing
  operation, labelled as :class:`Label` says. It is incremental (a state and the events after
  it), so its cost is linear in the journal. What reads incidents (``show``, ``failures``,
  notices) needs this module alone;
- :mod:`corral.domain.dispositions` checks what a confined agent declares about its own failures.

A person's dismissal is a disposition too (``"disposition": "dismissed"``, ``"actor": "human"``, and
their ``reason``): it closes one incident as :attr:`Label.DISMISSED`, kept in history.

Journal events (one JSON object per line of ``failures.jsonl``): ``{"kind": "failure", "id",
"operation", "category", "summary", "evidence", "at", "expected"}``, ``{"kind": "recovered",
"id", "operation", "incidents", "at"}``, ``{"kind": "incomplete", "id", "operation",
"summary"}`` and ``{"kind": "disposition", "id", "disposition", "targets", "reason", "requested",
"evidence", "permission_resource", "at"}`` (dispositions come only from confined runs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any

from msgspec import Struct, field

#: Failures of one operation, with no recovery between, that make it need someone.
THRICE = 3
#: A summary's length in a journal event (what ``--raw`` shows whole), and an excerpt's in a compact row.
SUMMARY_CHARS = 400
EXCERPT_BYTES = 120
#: The model call is one operation: every failed call is the same incident until one succeeds.
MODEL_CALL = "model-call"


class Label(StrEnum):
    ACTION_REQUIRED = "Action required"
    UNCLASSIFIED = "Unclassified failure observation"
    EXPECTED = "Expected failure"
    INCOMPLETE = "Observation incomplete"
    RECOVERED = "Recovered"
    SUPERSEDED = "Superseded"
    DISMISSED = "Dismissed"  # closed by a person (``corral failures T --dismiss ID -m why``)


#: What needs someone: shown by default; the rest is history.
NEEDS_ACTION = (Label.ACTION_REQUIRED, Label.INCOMPLETE)
CLOSED = (Label.RECOVERED, Label.SUPERSEDED, Label.DISMISSED)
#: The disposition only a person records (never an agent's: its tools refuse it), and who it names.
DISMISSED = "dismissed"
PERSON = "human"


class Category(StrEnum):
    TOOL = "tool"
    MODEL = "model"
    EXIT = "exit"  # the agent's process ended badly (a signal, a crash)
    SUPERVISION = "supervision"  # corral's own observation: a watchdog kill, a lost turn, a spawn failure
    OBSERVATION = "observation"  # the evidence itself: a rewritten log, an oversized record


# controls blank; a lone surrogate (output cut inside a character) is the replacement character
_BLANK_CONTROLS = {c: " " for c in (*range(32), 127)} | {c: "\ufffd" for c in range(0xD800, 0xE000)}


def excerpt(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most ``limit`` characters, controls blanked (a journal field, not a display)."""
    flat = " ".join(text.translate(_BLANK_CONTROLS).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


#: The key corral's shell puts in its structured result (``adapters.harness.base.SHELL_RESULT_KEY``).
SHELL_RESULT = "corral_shell"
_SHELL_FIELD = re.compile(
    r'"(exit_code|timed_out|ended_with_turn|command|stderr|stdout)":\s*'
    r'("(?:[^"\\]|\\.)*"?|-?\d+|true|false|null)'
)


def _partial_string(token: str) -> str:
    """A JSON string's text, the string possibly cut (a summary is an excerpt): what of it decodes."""
    body = token[1:-1] if len(token) > 1 and token.endswith('"') and not token.endswith('\\"') else token[1:]
    while body:
        try:
            return str(json.loads(f'"{body}"'))
        except ValueError:
            body = body[:-1]  # cut inside an escape: drop its start
    return ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def tool_text(text: str) -> str:
    """A tool's result as a person reads it (docs/incidents.md: a result's JSON is shown as its text).

    corral's shell answers in JSON (``{"corral_shell": 1, "exit_code": 1, …}``): it reads as the
    command, how it ended and the first line of its stderr (of its stdout when stderr is empty) —
    ``npm test exited 1: Error: 2 tests failed``. Read field by field, so a result an excerpt cut
    short reads the same as far as it goes (a journal written before rows read as text included).
    Any other text is itself.
    """
    at = text.find("{", 0, 200)
    if at < 0 or SHELL_RESULT not in text[at : at + 40]:
        return text
    before, head = text[:at], text[at:]  # a journal's summary says whose result it was first
    fields: dict[str, Any] = {}
    for key, token in _SHELL_FIELD.findall(head):
        if key in fields:
            continue  # the result's own field comes first; what the command printed comes after
        fields[key] = _partial_string(token) if token.startswith('"') else json.loads(token)
    command = " ".join(str(fields.get("command") or "").split())
    if fields.get("timed_out") is True:
        how = "timed out"
    elif fields.get("ended_with_turn") is True:
        how = "ended with the turn"
    elif isinstance(fields.get("exit_code"), int):
        how = f"exited {fields['exit_code']}"
    else:
        how = "failed"
    said = _first_line(str(fields.get("stderr") or "")) or _first_line(str(fields.get("stdout") or ""))
    return f"{before}{command + ' ' if command else ''}{how}{': ' + said if said else ''}"


def dismissal_event(event_id: str, incident: str, reason: str, at: str | None) -> dict[str, Any]:
    """A person's ``dismissed`` disposition of one incident, with their words."""
    return {
        "kind": "disposition",
        "id": event_id,
        "disposition": DISMISSED,
        "targets": [incident],
        "reason": excerpt(reason),
        "actor": PERSON,
        "at": at,
    }


def failure_event(incident: str, operation: str, category: Category, summary: str, at: str | None) -> dict[str, Any]:
    """A ``failure`` journal event: the one shape every failure is written in."""
    return {
        "kind": "failure",
        "id": incident,
        "operation": operation,
        "category": category.value,
        "summary": summary,
        "at": at,
    }


def supervision_failure(key: str, category: Category, summary: str, at: str | None) -> dict[str, Any]:
    """A failure corral itself observed (a watchdog kill, a signal, a lost turn): never a tool's."""
    return failure_event(f"{category.value}:{key}", f"{category.value}:{key}", category, excerpt(summary), at)


class Incident(Struct):
    id: str
    operation: str
    category: str
    summary: str
    evidence: str | None = None
    first_at: str | None = None
    last_at: str | None = None
    failures: int = 1
    label: Label = Label.UNCLASSIFIED
    closed_by: str | None = None
    expected: bool = False
    disposition: str | None = None
    #: When it first needed action (its grace period for a notice counts from here).
    actionable_at: str | None = None
    #: What an ``open`` disposition said the agent lacked permission for (agent-reported only).
    permission_resource: str | None = None
    #: Why a person dismissed it, or why the agent said it is still open (their words, kept in history).
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "id": self.id,
                "label": self.label.value,
                "category": self.category,
                "summary": self.summary,
                "evidence": self.evidence,
                "failures": self.failures,
                "first_at": self.first_at,
                "last_at": self.last_at,
                "closed_by": self.closed_by,
                "disposition": self.disposition,
                "operation": self.operation,
            }
            | ({"permission_resource": self.permission_resource} if self.permission_resource else {})
            | ({"reason": self.reason} if self.reason else {})
        )


class FailureState(Struct):
    """Every incident of a session, and how many journal bytes and records it covers."""

    incidents: dict[str, Incident] = field(default_factory=dict)
    #: An id seen again after its incident closed names the new incident from then on.
    aliases: dict[str, str] = field(default_factory=dict)
    offset: int = 0
    records: int = 0
    unreadable: int = 0  # journal records that could not be read (reported, never fatal)
    torn: bool = False  # the journal's last line is incomplete (power loss mid-append)
    #: The ids of the disposition events applied: one met again (a replayed scan) changes nothing.
    dispositions: set[str] = field(default_factory=set)
    #: The directory the evidence's paths are relative to (a session's task directory, a scanned
    #: log's own), when the reader knows it: ``--raw`` shows the evidence's whole path from it.
    base: str | None = None
    #: A state with what is only true now added (events not yet written, a torn journal) keeps the
    #: state of the journal alone here: the next incremental read goes on from that one.
    clean: FailureState | None = field(default=None)

    def by_label(self, *labels: Label) -> list[Incident]:
        return [i for i in self.incidents.values() if i.label in labels]

    @property
    def needs_action(self) -> list[Incident]:
        return self.by_label(*NEEDS_ACTION)

    def counts(self) -> dict[str, int]:
        out = {label.value: 0 for label in Label}
        for incident in self.incidents.values():
            out[incident.label.value] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "incidents": [i.to_json() for i in self.incidents.values()],
            "counts": self.counts(),
            "needs_action": len(self.needs_action),
            "journal": {"records": self.records, "unreadable": self.unreadable, "torn": self.torn},
        }


def reduce(state: FailureState, events: Iterable[Mapping[str, Any]]) -> FailureState:
    """Fold ``events`` (in journal order) into ``state``, which it changes and returns."""
    for event in events:
        state.records += 1
        _apply(state, event)
    return state


def _apply(state: FailureState, event: Mapping[str, Any]) -> None:
    kind = event.get("kind")
    given = str(event.get("id") or "")
    key = state.aliases.get(given, given)
    at = event.get("at") if isinstance(event.get("at"), str) else None
    if kind == "failure":
        known = state.incidents.get(key)
        if known is not None and known.label not in CLOSED:
            known.failures += 1
            known.last_at = at or known.last_at
            known.summary = str(event.get("summary") or known.summary)
            known.evidence = event.get("evidence") or known.evidence
            if event.get("expected") is not True and known.disposition != "expected":
                known.expected = False  # declared for one exit, failing with another: an ordinary failure
        else:
            if known is not None:  # failing again after it was closed: a new incident, the old one kept
                key = f"{given}#{state.records}"
                state.aliases[given] = key
            known = state.incidents[key] = Incident(
                id=key,
                operation=str(event.get("operation") or key),
                category=str(event.get("category") or Category.TOOL.value),
                summary=str(event.get("summary") or ""),
                evidence=event.get("evidence") if isinstance(event.get("evidence"), str) else None,
                first_at=at,
                last_at=at,
                expected=event.get("expected") is True,
            )
        known.label = _label(known)
        if known.label is Label.ACTION_REQUIRED and known.actionable_at is None:
            known.actionable_at = at
    elif kind == "recovered":
        for target in event.get("incidents") or ():
            _close(state, state.aliases.get(str(target), str(target)), Label.RECOVERED, key)
    elif kind == "incomplete":
        if key not in state.incidents:
            state.incidents[key] = Incident(
                id=key,
                operation=str(event.get("operation") or "evidence"),
                category=Category.OBSERVATION.value,
                summary=str(event.get("summary") or "evidence is missing or unreadable"),
                label=Label.INCOMPLETE,
            )
    elif kind == "disposition":
        if given and given in state.dispositions:
            return  # the same disposition met again: applied once
        if given:
            state.dispositions.add(given)
        disposition = str(event.get("disposition") or "")
        if disposition == DISMISSED and event.get("actor") != PERSON:
            return  # only a person dismisses
        resource = event.get("permission_resource")
        for target in event.get("targets") or ():
            incident = _open_incident(state, state.aliases.get(str(target), str(target)))
            if incident is None:
                continue
            incident.disposition = disposition
            if disposition == "open" and isinstance(resource, str):
                incident.permission_resource = resource
            if disposition == "recovered":
                _close(state, incident.id, Label.RECOVERED, key)
            elif disposition == "superseded":
                _close(state, incident.id, Label.SUPERSEDED, key)
            elif disposition == DISMISSED:
                incident.reason = str(event.get("reason") or "") or None
                incident.label, incident.closed_by = Label.DISMISSED, key
            elif disposition == "expected":
                incident.expected = True
                incident.label = Label.EXPECTED
            elif disposition == "open":
                incident.reason = str(event.get("reason") or "") or None
                incident.label = Label.ACTION_REQUIRED
                incident.actionable_at = incident.actionable_at or (at or incident.last_at)
    else:
        state.unreadable += 1


def _open_incident(state: FailureState, key: str) -> Incident | None:
    incident = state.incidents.get(key)
    if incident is None or incident.label in CLOSED:
        return None
    return incident


def _close(state: FailureState, key: str, label: Label, by: str) -> None:
    incident = _open_incident(state, key)
    if incident is not None and not (incident.expected and label is Label.RECOVERED):
        incident.label = label
        incident.closed_by = by
    elif incident is not None:
        incident.closed_by = by  # an expected failure keeps its label when it later passes


def _label(incident: Incident) -> Label:
    if incident.disposition == "open":
        return Label.ACTION_REQUIRED
    if incident.expected:
        return Label.EXPECTED
    if incident.category != Category.TOOL.value:
        return Label.ACTION_REQUIRED  # a non-tool failure needs someone other than the agent
    if incident.failures >= THRICE:
        return Label.ACTION_REQUIRED
    return Label.UNCLASSIFIED


def summary_line(state: FailureState) -> str:
    """``No failures need action · 8 unclassified tool errors · 2 expected (history)``, or what needs action."""
    counts = state.counts()
    act = counts[Label.ACTION_REQUIRED.value]
    gaps = counts[Label.INCOMPLETE.value]
    history = []
    if n := counts[Label.UNCLASSIFIED.value]:
        history.append(f"{n} unclassified tool error{'s' if n != 1 else ''}")
    if n := counts[Label.EXPECTED.value]:
        history.append(f"{n} expected")
    if n := counts[Label.RECOVERED.value] + counts[Label.SUPERSEDED.value]:
        history.append(f"{n} recovered")
    if n := counts[Label.DISMISSED.value]:
        history.append(f"{n} dismissed")
    tail = f" · {' · '.join(history)} (history)" if history else ""
    if not act and not gaps:
        return f"No failures need action{tail}"
    head = []
    if act:
        head.append(f"{act} failure{'s' if act != 1 else ''} need{'s' if act == 1 else ''} action")
    if gaps:
        head.append(f"{gaps} observation{'s' if gaps != 1 else ''} incomplete")
    return " · ".join(head) + tail


CORRECTNESS_NOTE = "Work correctness was not inferred from lifecycle alone."


def unclassified_sentence(unclassified: int) -> str:
    """The short account of the history a small page has no room to list: ``8 earlier tool
    failures remain unclassified.`` (empty with none)."""
    if not unclassified:
        return ""
    one = unclassified == 1
    return f"{unclassified} earlier tool failure{'' if one else 's'} remain{'s' if one else ''} unclassified."


def row_text(row: Mapping[str, Any]) -> str:
    """One incident row as a line: ``Action required ×3: bash failed: E1  [output.log#byte=1641]``; an
    incident the agent declared still open says why (``· open: the token is missing``)."""
    times = f" ×{row['failures']}" if row.get("failures", 1) > 1 else ""
    why = f" · open: {row['reason']}" if row.get("disposition") == "open" and row.get("reason") else ""
    where = f"  [{row['evidence']}]" if row.get("evidence") else ""
    return f"{row['label']}{times}: {row['summary']}{why}{where}"


def text_bytes(lines: Iterable[str]) -> int:
    """What ``lines`` take printed, one a line: their UTF-8 bytes and a newline each."""
    return sum(len(line.encode("utf-8", "replace")) + 1 for line in lines)


def page_lines(doc: Mapping[str, Any]) -> list[str]:
    """A page's text as every surface prints it at the least: its rows, the one-line account, the note."""
    return [*(row_text(r) for r in doc["rows"]), *(x for x in (doc["line"], doc["note"]) if x)]


def fit_page(
    doc: Mapping[str, Any],
    first: int,
    max_bytes: int | None,
    render: Callable[[Mapping[str, Any]], list[str]] = page_lines,
) -> dict[str, Any]:
    """``doc`` (the one-line account, the correctness note, every row) as the page that begins at row
    ``first`` and whose text, as ``render`` prints it, takes at most ``max_bytes`` (docs/incidents.md).

    A page never exceeds its budget, and what goes when it is small goes in this order: incident
    rows (the last first), the pointer to the next page, the one-line account (first shortened to
    ``N earlier tool failures remain unclassified.``), and the correctness note last — only when it
    alone does not fit, for it is never cut. A page that shows no row names the same next page as
    the one it was asked for: a larger budget moves on.
    """
    rows: list[dict[str, Any]] = list(doc["rows"])
    total = len(rows)
    first = min(max(first, 0), total)

    def candidate(shown: int, *, more: bool = True, line: str | None = None, note: bool = True) -> dict[str, Any]:
        after = first + shown
        return {
            **doc,
            "rows": rows[first:after],
            "line": doc["line"] if line is None else line,
            "note": doc["note"] if note else "",
            "next_cursor": f"i{after}" if after < total and more else None,
            "rows_total": total,
        }

    if max_bytes is None:
        return candidate(total - first)
    counts = doc.get("counts") or {}
    short = unclassified_sentence(int(counts.get(Label.UNCLASSIFIED.value, 0) or 0))

    def fits(page: dict[str, Any]) -> bool:
        return text_bytes(render(page)) <= max_bytes

    # the most rows that fit with every note (a page's text grows with its rows: found by halving)
    low, high = 0, total - first
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(candidate(mid)) else (low, mid - 1)
    ladder = [candidate(low), candidate(0, more=False), *([candidate(0, more=False, line=short)] if short else [])]
    ladder += [candidate(0, more=False, line=""), candidate(0, more=False, line="", note=False)]
    for page in ladder:
        if fits(page):
            return page
    return candidate(0, more=False, line="", note=False)  # (a renderer that prints something of nothing)


def cursor_index(cursor: str | None, total: int) -> int:
    """The row a page's ``next_cursor`` (``i<N>``) names; a cursor no page gave is refused."""
    if cursor is None:
        return 0
    if not cursor.startswith("i") or not cursor[1:].isdigit():
        from corral.errors import UsageError

        raise UsageError(f"'{cursor}' is not a cursor this command gave.", hint="Use the next_cursor of a page.")
    return min(int(cursor[1:]), total)
