"""Incidents: the failures a turn's agent, its model and its supervision ran into, kept apart from status.

A task's lifecycle says where it is; its incidents say what went wrong on the way, and a
blocked task whose tests failed eight times is not healthy because it is blocked
(docs/incidents.md). Two pure folds live here:

- :class:`Collector` turns a harness's structured facts (:class:`ToolStart`, :class:`ToolEnd`,
  :class:`ModelFailure`, :class:`ModelOk`, :class:`Gap`; each adapter makes them from its own
  log lines, from structured fields only) into journal events. Recovery is by **exact retry**
  only: the same tool, the same canonical arguments and working directory, started after the
  failure. Another command's success, a parallel success and whatever the assistant writes
  clear nothing. A failed model call is recovered by the next successful model response.
- :func:`reduce` folds journal events into :class:`FailureState`: one incident per failing
  operation, labelled as :class:`Label` says. It is incremental (a state and the events after
  it), so its cost is linear in the journal.

Journal events (one JSON object per line of ``failures.jsonl``): ``{"kind": "failure", "id",
"operation", "category", "summary", "evidence", "at", "expected"}``, ``{"kind": "recovered",
"id", "operation", "incidents", "at"}``, ``{"kind": "incomplete", "id", "operation",
"summary"}`` and ``{"kind": "disposition", "id", "disposition", "targets", "reason", "requested",
"evidence", "permission_resource", "at"}`` (dispositions come only from confined runs).

A **trusted** collector (``Collector(trusted=True)``: a run corral launched confined) also honours
what corral's own tools declare (:mod:`corral.domain.intents`): a shell call's intent (its
``operationId`` names the operation, its ``expectedExitCodes`` make a declared exit an expected
failure, a rejected intent is an observation of its own) and ``failure_disposition`` calls,
replayed through :func:`check_disposition`. An untrusted collector ignores all of it: its events
are exactly those of the exact-retry rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any

from corral.domain.intents import (
    NEEDS_EVIDENCE,
    REASON_CHARS,
    DispositionRequest,
    Intent,
    Rejected,
    command_args,
    parse_disposition,
)
from corral.domain.record import field, record

#: Failures of one operation, with no recovery between, that make it need someone.
THRICE = 3
#: A summary's and an excerpt's length in a journal event, and in a compact row.
SUMMARY_CHARS = 180
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


#: What needs someone: shown by default; the rest is history.
NEEDS_ACTION = (Label.ACTION_REQUIRED, Label.INCOMPLETE)
CLOSED = (Label.RECOVERED, Label.SUPERSEDED)


class Category(StrEnum):
    TOOL = "tool"
    MODEL = "model"
    EXIT = "exit"  # the agent's process ended badly (a signal, a crash)
    SUPERVISION = "supervision"  # corral's own observation: a watchdog kill, a lost turn, a spawn failure
    OBSERVATION = "observation"  # the evidence itself: a rewritten log, an oversized record


# -- the collector's facts -------------------------------------------------------------------------


@record
class ToolStart:
    call_id: str
    name: str
    args: Any
    cwd: str
    #: corral's own shell tool (filled by the adapter for that tool only): the call's intent,
    #: ``intents.parse_intent(args)``. Honoured only by a trusted collector.
    intent: Intent | Rejected | None = None
    #: corral's own ``failure_disposition`` tool (filled for that tool only): the request, its
    #: arguments as sent. Honoured only by a trusted collector.
    disposition: Mapping[str, Any] | None = None


@record
class ToolEnd:
    call_id: str
    is_error: bool
    text: str = ""
    offset: int = 0  # where in output.log: the evidence
    name: str | None = None
    args: Any = None
    expected: bool = False
    #: The final shell exit code, from the tool's structured result (never parsed from text); None
    #: for a timeout, an abort, or a tool that has none. Read only by a trusted collector.
    exit_code: int | None = None


@record
class ModelFailure:
    text: str
    offset: int = 0
    #: A turn-level report of how the turn ended (Codex's ``turn.failed``): while a failed model call
    #: is still open it is that failure told again, not another one.
    restates: bool = False


@record
class ModelOk:
    """A successful model response: what recovers a failed model call."""


@record
class Gap:
    """Evidence that is missing, torn or unreadable."""

    key: str
    summary: str


Fact = ToolStart | ToolEnd | ModelFailure | ModelOk | Gap


def operation_of(name: str, args: Any, cwd: str) -> str:
    """A tool operation's identity: its name and a digest of its canonical arguments (keys sorted)
    and working directory — a digest, so no argument (a token on a command line) is ever stored."""
    import hashlib  # only a tool operation needs it; reading incidents does not

    canonical = json.dumps([name, args if args is not None else {}, cwd], sort_keys=True, default=str)
    return f"{name}:{hashlib.sha256(canonical.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}"


# controls blank; a lone surrogate (output cut inside a character) is the replacement character
_BLANK_CONTROLS = {c: " " for c in (*range(32), 127)} | {c: "\ufffd" for c in range(0xD800, 0xE000)}


def excerpt(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line of at most ``limit`` characters, controls blanked (a journal field, not a display)."""
    flat = " ".join(text.translate(_BLANK_CONTROLS).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


#: The kinds of tool call a trusted collector remembers (:class:`Attempt`).
CALL = "call"  # any tool call
SHELL = "shell"  # corral's shell tool with a valid intent
REFUSED = "rejected"  # corral's shell tool whose intent was rejected: it never ran
DISPOSE = "disposition"  # corral's failure_disposition tool


@record(frozen=False)
class Attempt:
    """One tool call as a trusted collector remembers it: what dispositions' targets and evidence name."""

    call_id: str
    kind: str
    operation: str
    began: int  # the collector's sequence at its start
    attempt_id: str | None = None
    expected: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()  # a rejected intent's, or a disposition request's of a wrong shape
    request: dict[str, Any] | None = None  # a disposition call's request (``DispositionRequest`` fields)
    outcome: str = "running"  # running | ok | failed | rejected
    incident: str | None = None  # the incident its failure joined

    def to_json(self) -> list[Any]:
        return [
            self.call_id,
            self.kind,
            self.operation,
            self.began,
            self.attempt_id,
            list(self.expected),
            list(self.reasons),
            self.request,
            self.outcome,
            self.incident,
        ]

    @classmethod
    def from_json(cls, v: list[Any]) -> Attempt:
        return cls(
            str(v[0]),
            str(v[1]),
            str(v[2]),
            int(v[3]),
            v[4] if isinstance(v[4], str) else None,
            tuple(int(c) for c in v[5] or ()),
            tuple(str(r) for r in v[6] or ()),
            dict(v[7]) if isinstance(v[7], dict) else None,
            str(v[8]),
            v[9] if isinstance(v[9], str) else None,
        )


class Collector:
    """The fold from facts to journal events, with what it must remember between scans.

    ``starts`` are tool calls begun and not ended; ``failed`` the open failure of each
    operation (its incident id and the sequence number of the failing call's start), so a
    later start of the same operation can recover it. The whole state is JSON (:meth:`to_json`),
    kept beside the cursor of the scan it belongs to.

    A ``trusted`` collector (a confined run) honours intents and dispositions. It also remembers
    every call (``calls``, by ``<evidence_of>:<call id>``), every ``attemptId`` and the call that
    first used it, when each incident last failed, and ``state``: the reduction of its own
    events, against which a disposition is checked (:func:`check_disposition`) — the same check
    when the tool is called and when the collector replays the call from the log.
    """

    def __init__(
        self, evidence_of: str = "output.log", mask: Callable[[str], str] | None = None, trusted: bool = False
    ) -> None:
        self.evidence_of = evidence_of
        #: Applied to a whole text before it is cut to a summary: a secret is masked before any cut.
        self.mask = mask or (lambda text: text)
        self.trusted = trusted
        self.sequence = 0
        self.starts: dict[str, tuple[str, int, str]] = {}  # call id -> (operation, sequence, name)
        self.failed: dict[str, tuple[str, int]] = {}  # operation -> (incident id, sequence)
        self.gaps: set[str] = set()
        # trusted only
        self.calls: dict[str, Attempt] = {}  # "<evidence_of>:<call id>" -> the call
        self.attempt_ids: dict[str, str] = {}  # attemptId -> the key of the call that first used it
        self.failure_at: dict[str, int] = {}  # incident id -> the sequence of its latest failure
        self.state = FailureState()
        self.open_ids: set[str] = set()  # the incidents of ``state`` a disposition may still name
        # An ``Observation incomplete`` note of a log scanned under the exact rule because its provenance
        # could not be read -> the incidents that failed under it. A later trusted scan closes the note
        # once every one of them is resolved (:meth:`close_notes`); while a note is open, ``state``
        # follows the exact-rule events too, so those incidents can be recovered or disposed of later.
        self.notes: dict[str, list[str]] = {}
        self.exact_note: str | None = None  # the note the log being scanned now is under (per scan)

    def key(self, call_id: str) -> str:
        """A call's key: call ids are unique within one log only (a Codex ``item_3`` recurs each turn)."""
        return f"{self.evidence_of}:{call_id}"

    def find_call(self, name: str) -> Attempt | None:
        """The call an ``attemptId`` or a tool call id names (of this log first, else the latest)."""
        owner = self.attempt_ids.get(name)
        if owner is not None and owner in self.calls:
            return self.calls[owner]
        here = self.calls.get(self.key(name))
        if here is not None:
            return here
        found = [c for c in self.calls.values() if c.call_id == name]
        return max(found, key=lambda c: c.began) if found else None

    def attempt_owner(self, attempt_id: str) -> str | None:
        """The tool call id that first used ``attempt_id`` in this session, if any: a later call with
        it (another call id) reuses it, and is refused."""
        owner = self.attempt_ids.get(attempt_id)
        call = self.calls.get(owner) if owner is not None else None
        return call.call_id if call is not None else None

    def fold(self, fact: Fact, at: str | None = None) -> list[dict[str, Any]]:
        self.sequence += 1
        if isinstance(fact, ToolEnd):
            events = self._tool_end(fact, at)  # remembers its own events (a disposition needs them first)
        else:
            events = self._fold(fact, at)
            if self.trusted and events:
                self._remember(fact, events)
        if self.exact_note is not None and not self.trusted and events:
            self._under_note(fact, events)
        return events

    def _under_note(self, fact: Fact, events: list[dict[str, Any]]) -> None:
        """Events of the exact rule while a note is open: followed, and each failure counted against it."""
        self._remember(fact, events)
        assert self.exact_note is not None
        noted = self.notes.setdefault(self.exact_note, [])
        for event in events:
            if event.get("kind") == "failure":
                given = str(event.get("id"))
                resolved = self.state.aliases.get(given, given)
                if resolved not in noted:
                    noted.append(resolved)

    def close_notes(self, at: str | None = None) -> list[dict[str, Any]]:
        """In a trusted scan, the events closing each note whose exact-rule incidents are all resolved
        (recovered, superseded or expected). Failures of a trusted period never hold a note open."""
        if not self.trusted or not self.notes:
            return []
        events = []
        for note, ids in list(self.notes.items()):
            if all(self._settled(i) for i in ids):
                del self.notes[note]
                event: dict[str, Any] = {"kind": "recovered", "id": f"recovered:{note}", "operation": "evidence"}
                event.update(incidents=[note], at=at)
                reduce(self.state, [event])
                events.append(event)
        return events

    def _settled(self, key: str) -> bool:
        incident = self.state.incidents.get(key)
        return incident is None or incident.label in CLOSED or incident.label is Label.EXPECTED

    def _fold(self, fact: ToolStart | ModelFailure | ModelOk | Gap, at: str | None) -> list[dict[str, Any]]:
        if isinstance(fact, ToolStart):
            if self.trusted:
                self._trusted_start(fact)
            else:
                self.starts[fact.call_id] = (operation_of(fact.name, fact.args, fact.cwd), self.sequence, fact.name)
            return []
        if isinstance(fact, ModelFailure):
            if fact.restates and MODEL_CALL in self.failed:
                return []
            incident = self.failed.get(MODEL_CALL, (f"model:{self.evidence_of}:{fact.offset}", 0))[0]
            self.failed[MODEL_CALL] = (incident, self.sequence)
            return [
                _failure(
                    incident, MODEL_CALL, Category.MODEL, excerpt(self.mask(fact.text)) or "the model call failed", at
                )
                | {"evidence": f"{self.evidence_of}#byte={fact.offset}"}
            ]
        if isinstance(fact, ModelOk):
            open_model = self.failed.pop(MODEL_CALL, None)
            if open_model is None:
                return []
            return [
                {
                    "kind": "recovered",
                    "id": f"recovered:{open_model[0]}:{self.sequence}",
                    "operation": MODEL_CALL,
                    "incidents": [open_model[0]],
                    "at": at,
                }
            ]
        if fact.key in self.gaps:
            return []
        self.gaps.add(fact.key)
        return [
            {"kind": "incomplete", "id": f"incomplete:{fact.key}", "operation": "evidence", "summary": fact.summary}
        ]

    def _trusted_start(self, fact: ToolStart) -> None:
        key = self.key(fact.call_id)
        intent = fact.intent
        if isinstance(intent, Intent) and intent.attempt_id is not None:
            owner = self.attempt_ids.get(intent.attempt_id)
            if owner is not None and owner != key:  # the same key again is this call replayed, not a reuse
                first = self.calls[owner].call_id if owner in self.calls else owner
                intent = Rejected((f"attemptId {intent.attempt_id} was already used (tool call {first})",))
        if isinstance(intent, Rejected):
            call = Attempt(fact.call_id, REFUSED, f"intent:{key}", self.sequence, reasons=intent.reasons)
        elif fact.disposition is not None:
            call = Attempt(fact.call_id, DISPOSE, operation_of(fact.name, fact.args, fact.cwd), self.sequence)
            request = parse_disposition(fact.disposition)
            if isinstance(request, Rejected):
                call.reasons = request.reasons
            else:
                call.request = _request_json(request)
        elif isinstance(intent, Intent):
            operation = (
                f"op:{intent.operation_id}"
                if intent.operation_id is not None
                else operation_of(fact.name, command_args(fact.args), fact.cwd)
            )
            call = Attempt(fact.call_id, SHELL, operation, self.sequence, intent.attempt_id, intent.expected)
            if intent.attempt_id is not None:
                self.attempt_ids.setdefault(intent.attempt_id, key)
        else:
            call = Attempt(fact.call_id, CALL, operation_of(fact.name, fact.args, fact.cwd), self.sequence)
        self.starts[fact.call_id] = (call.operation, self.sequence, fact.name)
        self.calls[key] = call

    def _tool_end(self, fact: ToolEnd, at: str | None) -> list[dict[str, Any]]:
        started = self.starts.pop(fact.call_id, None)
        if started is not None:
            operation, began, name = started
        else:  # an end whose start was never seen: it cannot be a retry of anything
            name = fact.name or "tool"
            operation, began = operation_of(name, fact.args, ""), self.sequence
        call = self.calls.get(self.key(fact.call_id)) if self.trusted and started is not None else None
        if call is None:
            events = self._end(fact, operation, began, name, fact.is_error, fact.expected, at)
            if self.trusted:
                self._remember(fact, events)
            return events
        if call.kind == REFUSED:  # the tool refused it: it never ran, so it is no failure of what it named
            call.outcome = "rejected"
            text = excerpt(self.mask("; ".join(call.reasons)))
            event = _failure(
                f"intent:{self.key(fact.call_id)}",
                call.operation,
                Category.TOOL,
                excerpt(f"{name} was not run: its intent was rejected: {text}"),
                at,
            )
            event["evidence"] = f"{self.evidence_of}#byte={fact.offset}"
            self._remember(fact, [event])
            return [event]
        code = fact.exit_code
        failed = fact.is_error or (call.kind == SHELL and code is not None and code != 0)
        expected = fact.expected or (call.kind == SHELL and failed and code is not None and code in call.expected)
        call.outcome = "failed" if failed else "ok"
        events = self._end(fact, operation, began, name, failed, expected, at)
        self._remember(fact, events)
        if call.kind == DISPOSE and not failed:
            tail = self._dispose(fact, call, at)
            self._remember(fact, tail)
            events += tail
        if not failed and call.attempt_id is None and not self._may_be_evidence(call):
            del self.calls[self.key(fact.call_id)]  # nothing it could be evidence for: not kept
        return events

    def _may_be_evidence(self, call: Attempt) -> bool:
        """Whether an incident still open failed before ``call`` started. Closed and disposed incidents
        stay so (a new failure is a new incident, after it), so if none did, none ever will."""
        if call.kind == DISPOSE:
            return False
        return any(self.failure_at.get(i, call.began) < call.began for i in self.open_ids)

    def _end(
        self, fact: ToolEnd, operation: str, began: int, name: str, failed: bool, expected: bool, at: str | None
    ) -> list[dict[str, Any]]:
        if failed:
            incident = self.failed.get(operation, (f"tool:{self.evidence_of}:{fact.call_id}", 0))[0]
            # when it ended: only a call of the operation started after this is a retry of it
            self.failed[operation] = (incident, self.sequence)
            summary = f"{name} failed: {excerpt(self.mask(fact.text))}" if fact.text else f"{name} failed"
            event = _failure(incident, operation, Category.TOOL, excerpt(summary), at)
            event["evidence"] = f"{self.evidence_of}#byte={fact.offset}"
            if expected:
                event["expected"] = True
            return [event]
        open_failure = self.failed.get(operation)
        if open_failure is not None and began > open_failure[1]:  # started after the failure: an exact retry
            del self.failed[operation]
            return [
                {
                    "kind": "recovered",
                    "id": f"recovered:{fact.call_id}",
                    "operation": operation,
                    "incidents": [open_failure[0]],
                    "at": at,
                }
            ]
        return []

    def _dispose(self, fact: ToolEnd, call: Attempt, at: str | None) -> list[dict[str, Any]]:
        """A successful ``failure_disposition`` call replayed: its event if the check holds here too."""
        event_id = disposition_id(self, fact.call_id)
        if event_id in self.state.dispositions:
            return []  # replayed (a rescanned log): recorded once
        verdict: Accepted | Refused
        if call.request is None:
            verdict = Refused(call.reasons, ())
        else:
            verdict = check_disposition(self, self.state, _request_of(call.request), call_id=fact.call_id, at=at)
        if isinstance(verdict, Refused):  # the agent was told it was recorded: the evidence disagrees
            why = excerpt(self.mask("; ".join(verdict.reasons)))
            return [
                {
                    "kind": "incomplete",
                    "id": f"incomplete:{event_id}",
                    "operation": "evidence",
                    "summary": excerpt(f"a failure_disposition reported done does not hold on replay: {why}"),
                }
            ]
        event = verdict.event
        if event["disposition"] in NEEDS_EVIDENCE:  # closed: the operation's next failure is a new incident
            closed = {self.state.aliases.get(t, t) for t in event["targets"]}
            for operation, (incident, _seq) in list(self.failed.items()):
                if self.state.aliases.get(incident, incident) in closed:
                    del self.failed[operation]
        return [event]

    def _remember(self, fact: Fact, events: list[dict[str, Any]]) -> None:
        aliases = self.state.aliases
        for event in events:
            reduce(self.state, [event])
            kind = event.get("kind")
            if kind == "recovered":
                self._recheck(aliases.get(str(i), str(i)) for i in event.get("incidents") or ())
            elif kind == "disposition":
                self._recheck(aliases.get(str(i), str(i)) for i in event.get("targets") or ())
            if kind != "failure":
                continue
            given = str(event.get("id"))
            resolved = aliases.get(given, given)
            self.failure_at[resolved] = self.sequence
            self._recheck([resolved])
            if isinstance(fact, ToolEnd) and (call := self.calls.get(self.key(fact.call_id))) is not None:
                call.incident = resolved

    def _recheck(self, ids: Iterable[str]) -> None:
        for key in ids:
            incident = self.state.incidents.get(key)
            if incident is not None and _problem(key, incident) is None:
                self.open_ids.add(key)
            else:
                self.open_ids.discard(key)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "sequence": self.sequence,
            "starts": {k: list(v) for k, v in self.starts.items()},
            "failed": {k: list(v) for k, v in self.failed.items()},
            "gaps": sorted(self.gaps),
            "evidence_of": self.evidence_of,
            "trusted": self.trusted,
        }
        if self.trusted or self.notes:
            doc["calls"] = {k: v.to_json() for k, v in self.calls.items()}
            doc["attempt_ids"] = dict(self.attempt_ids)
            doc["failure_at"] = dict(self.failure_at)
            doc["state"] = _state_json(self.state)
        if self.notes:
            doc["notes"] = {k: list(v) for k, v in self.notes.items()}
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Collector:
        made = cls(str(data.get("evidence_of") or "output.log"), trusted=data.get("trusted") is True)
        made.sequence = int(data.get("sequence") or 0)
        made.starts = {str(k): (str(v[0]), int(v[1]), str(v[2])) for k, v in dict(data.get("starts") or {}).items()}
        made.failed = {str(k): (str(v[0]), int(v[1])) for k, v in dict(data.get("failed") or {}).items()}
        made.gaps = {str(g) for g in data.get("gaps") or ()}
        made.notes = {str(k): [str(i) for i in v] for k, v in dict(data.get("notes") or {}).items()}
        if "state" in data:
            made.calls = {str(k): Attempt.from_json(list(v)) for k, v in dict(data.get("calls") or {}).items()}
            made.attempt_ids = {str(k): str(v) for k, v in dict(data.get("attempt_ids") or {}).items()}
            made.failure_at = {str(k): int(v) for k, v in dict(data.get("failure_at") or {}).items()}
            made.state = _state_load(dict(data.get("state") or {}))
            made._recheck(list(made.state.incidents))
        return made


def _request_json(request: DispositionRequest) -> dict[str, Any]:
    return {
        "disposition": request.disposition,
        "targets": list(request.targets),
        "reason": request.reason,
        "evidence": request.evidence,
        "permission_resource": request.permission_resource,
    }


def _request_of(doc: Mapping[str, Any]) -> DispositionRequest:
    return DispositionRequest(
        str(doc.get("disposition")),
        tuple(str(t) for t in doc.get("targets") or ()),
        str(doc.get("reason")),
        doc.get("evidence") if isinstance(doc.get("evidence"), str) else None,
        doc.get("permission_resource") if isinstance(doc.get("permission_resource"), str) else None,
    )


def _failure(incident: str, operation: str, category: Category, summary: str, at: str | None) -> dict[str, Any]:
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
    return _failure(f"{category.value}:{key}", f"{category.value}:{key}", category, excerpt(summary), at)


# -- the reducer --------------------------------------------------------------------------------------


@record(frozen=False)
class Incident:
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

    def to_json(self) -> dict[str, Any]:
        return {
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
        } | ({"permission_resource": self.permission_resource} if self.permission_resource else {})


@record(frozen=False)
class FailureState:
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
    #: A state with what is only true now added (events not yet written, a torn journal) keeps the
    #: state of the journal alone here: the next incremental read goes on from that one.
    clean: FailureState | None = field(default=None, repr=False)

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
            elif disposition == "expected":
                incident.expected = True
                incident.label = Label.EXPECTED
            elif disposition == "open":
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


# -- the collector's own state, as JSON ---------------------------------------------------------------

_INCIDENT_FIELDS = (
    "id",
    "operation",
    "category",
    "summary",
    "evidence",
    "first_at",
    "last_at",
    "failures",
    "label",
    "closed_by",
    "expected",
    "disposition",
    "actionable_at",
    "permission_resource",
)


def _state_json(state: FailureState) -> dict[str, Any]:
    return {
        "incidents": [
            [i.label.value if f == "label" else getattr(i, f) for f in _INCIDENT_FIELDS]
            for i in state.incidents.values()
        ],
        "aliases": dict(state.aliases),
        "records": state.records,
        "dispositions": sorted(state.dispositions),
    }


def _state_load(doc: Mapping[str, Any]) -> FailureState:
    state = FailureState()
    for row in doc.get("incidents") or ():
        values = dict(zip(_INCIDENT_FIELDS, row, strict=False))
        values["label"] = Label(values.get("label") or Label.UNCLASSIFIED.value)
        incident = Incident(**values)
        state.incidents[incident.id] = incident
    state.aliases = {str(k): str(v) for k, v in dict(doc.get("aliases") or {}).items()}
    state.records = int(doc.get("records") or 0)
    state.dispositions = {str(d) for d in doc.get("dispositions") or ()}
    return state


# -- dispositions ------------------------------------------------------------------------------------


@record
class OpenIncident:
    """An incident a disposition may name: listed with every refusal, so the agent can name it right."""

    id: str
    label: str
    summary: str
    call_id: str | None = None  # the tool call whose failure opened or last joined it
    attempt_id: str | None = None
    operation_id: str | None = None


@record
class Accepted:
    """A disposition that holds: ``event`` is its journal event (its id the same however often it is checked)."""

    event: dict[str, Any]


@record
class Refused:
    """A disposition refused whole (nothing is recorded): every reason, and the incidents still open."""

    reasons: tuple[str, ...]
    open_incidents: tuple[OpenIncident, ...]


def disposition_id(collector: Collector, call_id: str) -> str:
    """The journal id of the disposition a ``failure_disposition`` call records: from its call id alone."""
    return f"disposition:{collector.key(call_id)}"


def _problem(target: str, incident: Incident) -> str | None:
    """Why ``incident`` cannot be disposed, or None: only an open tool failure not disposed yet can."""
    if incident.category != Category.TOOL.value or incident.label is Label.INCOMPLETE:
        return f"{target}: incident {incident.id} is not a tool failure of this agent's"
    if incident.label in CLOSED or incident.closed_by is not None:
        return f"{target}: incident {incident.id} is already closed ({incident.label.value})"
    if incident.disposition is not None:
        return f"{target}: incident {incident.id} was already disposed ({incident.disposition})"
    return None


def open_incidents(collector: Collector, state: FailureState | None = None) -> tuple[OpenIncident, ...]:
    """The incidents of ``state`` (the collector's own by default) a disposition may name, oldest first."""
    state = state if state is not None else collector.state
    by_incident = {c.incident: c for c in sorted(collector.calls.values(), key=lambda c: c.began) if c.incident}
    found = []
    for incident in state.incidents.values():
        if _problem(incident.id, incident) is not None:
            continue
        call = by_incident.get(incident.id)
        operation_id = incident.operation[3:] if incident.operation.startswith("op:") else None
        found.append(
            OpenIncident(
                incident.id,
                incident.label.value,
                incident.summary,
                call.call_id if call else None,
                call.attempt_id if call else None,
                operation_id,
            )
        )
    return tuple(found)


def _resolve(collector: Collector, state: FailureState, target: str) -> tuple[list[Incident], str | None]:
    """The incidents ``target`` names — an incident id, an attemptId, an operationId or a tool call id, in
    that order — or why it names none that may be disposed."""
    incident = state.incidents.get(state.aliases.get(target, target))
    if incident is not None:
        problem = _problem(target, incident)
        return ([], problem) if problem else ([incident], None)
    call = collector.calls.get(collector.attempt_ids.get(target, "")) if target in collector.attempt_ids else None
    if call is None:
        operation = f"op:{target}"
        of_operation = [i for i in state.incidents.values() if i.operation == operation]
        if of_operation:
            still_open = [i for i in of_operation if _problem(target, i) is None]
            if still_open:
                return still_open, None
            return [], f"{target}: operation {target} has no open incident"
        call = collector.find_call(target)
    if call is None:
        return [], f"{target}: no incident, attemptId, operationId or tool call of this session has that name"
    if call.outcome == "running":
        return [], f"{target}: attempt {call.call_id} has not ended"
    if call.incident is None or call.outcome == "ok":
        return [], f"{target}: attempt {call.call_id} did not fail"
    incident = state.incidents.get(call.incident)
    if incident is None:
        return [], f"{target}: attempt {call.call_id} has no incident"
    problem = _problem(target, incident)
    return ([], problem) if problem else ([incident], None)


def _evidence_problems(collector: Collector, request: DispositionRequest, incidents: Iterable[Incident]) -> list[str]:
    evidence = request.evidence or ""
    call = collector.find_call(evidence)
    if call is None:
        return [f"evidence {evidence}: no attemptId or tool call of this session has that name"]
    if call.kind == REFUSED:
        return [f"evidence {evidence}: that call never ran (its intent was rejected)"]
    if call.kind == DISPOSE:
        return [f"evidence {evidence}: a failure_disposition call is not an attempt"]
    if call.outcome == "running":
        return [f"evidence {evidence}: that attempt has not ended"]
    if call.outcome != "ok":
        return [f"evidence {evidence}: that attempt did not succeed"]
    problems = []
    for incident in incidents:
        failed_at = collector.failure_at.get(incident.id)
        if failed_at is None or call.began <= failed_at:
            problems.append(f"evidence {evidence}: it started before the failure of {incident.id}")
    return problems


def check_disposition(
    collector: Collector,
    state: FailureState | None,
    request: Mapping[str, Any] | DispositionRequest,
    *,
    call_id: str,
    at: str | None = None,
) -> Accepted | Refused:
    """Whether a ``failure_disposition`` request holds, and its journal event if it does.

    ``request`` is the call's arguments as the agent sent them (or a parsed request); ``call_id``
    the ``failure_disposition`` call's own id, from which the event's id is made, so a replay can
    never record it twice. ``state`` is what the targets are resolved against: the collector's own
    (``collector.state``, the default) is what the replay uses, so the tool should pass it too.
    Any problem refuses the whole request, with the open incidents listed.
    """
    state = state if state is not None else collector.state
    if not collector.trusted:
        return Refused(("this run is not confined: its dispositions are ignored",), ())
    listing = open_incidents(collector, state)
    parsed = request if isinstance(request, DispositionRequest) else parse_disposition(request)
    if isinstance(parsed, Rejected):
        return Refused(parsed.reasons, listing)
    reasons: list[str] = []
    chosen: dict[str, Incident] = {}
    for target in parsed.targets:
        found, problem = _resolve(collector, state, target)
        if problem is not None:
            reasons.append(problem)
        for incident in found:
            chosen.setdefault(incident.id, incident)
    if parsed.disposition in NEEDS_EVIDENCE and chosen:
        reasons += _evidence_problems(collector, parsed, chosen.values())
    event_id = disposition_id(collector, call_id)
    if event_id in state.dispositions:
        reasons.append(f"the disposition of call {call_id} is already recorded")
    if reasons:
        return Refused(tuple(reasons), listing)
    given = {v: k for k, v in state.aliases.items()}  # an incident by the id its events carry
    event: dict[str, Any] = {
        "kind": "disposition",
        "id": event_id,
        "disposition": parsed.disposition,
        "targets": [given.get(i, i) for i in chosen],
        "requested": list(parsed.targets),
        "reason": excerpt(collector.mask(parsed.reason), REASON_CHARS),
        "at": at,
    }
    if parsed.evidence is not None:
        event["evidence"] = parsed.evidence
    if parsed.permission_resource is not None:
        event["permission_resource"] = parsed.permission_resource
    return Accepted(event)


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


def row_text(row: Mapping[str, Any]) -> str:
    """One incident row as a line: ``Action required ×3: bash failed: E1  [output.log#byte=1641]``."""
    times = f" ×{row['failures']}" if row.get("failures", 1) > 1 else ""
    where = f"  [{row['evidence']}]" if row.get("evidence") else ""
    return f"{row['label']}{times}: {row['summary']}{where}"
