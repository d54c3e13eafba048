"""The incident collector: a harness's structured facts folded into journal events (docs/incidents.md).

:class:`Collector` turns a harness's structured facts (:class:`ToolStart`, :class:`ToolEnd`,
:class:`ModelFailure`, :class:`ModelOk`, :class:`Gap`; each adapter makes them from its own
log lines, from structured fields only) into journal events (:mod:`corral.domain.incidents`).
Recovery is by **exact retry** only: the same tool, the same canonical arguments and working
directory, started after the failure. Another command's success, a parallel success and
whatever the assistant writes clear nothing. A failed model call is recovered by the next
successful model response.

A **trusted** collector (``Collector(trusted=True)``: a run corral launched confined) also honours
what corral's own tools declare (:mod:`corral.domain.intents`): a shell call's intent (its
``operationId`` names the operation, its ``expectedExitCodes`` make a declared exit an expected
failure, a rejected intent is an observation of its own) and ``failure_disposition`` calls,
replayed through :func:`corral.domain.dispositions.check_disposition`. An untrusted collector
ignores all of it: its events are exactly those of the exact-retry rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from msgspec import Struct

from corral.domain.dispositions import (
    CALL,
    DISPOSE,
    REFUSED,
    SHELL,
    Accepted,
    Attempt,
    Refused,
    check_disposition,
    disposal_problem,
    disposition_id,
)
from corral.domain.incidents import (
    CLOSED,
    MODEL_CALL,
    SUMMARY_CHARS,
    Category,
    FailureState,
    Incident,
    Label,
    excerpt,
    failure_event,
    reduce,
    tool_text,
)
from corral.domain.intents import NEEDS_EVIDENCE, DispositionRequest, Intent, Rejected, command_args, parse_disposition


def _excerpt(text: str) -> str:
    """:func:`corral.domain.incidents.excerpt` of ``text``, sparing its pass that blanks controls over a text
    with none (most tool output): that pass maps every character through a table, the costliest step
    of folding a failing call."""
    if text.isprintable():  # no control, no lone surrogate (neither is printable): blanking changes nothing
        flat = " ".join(text.split())
        return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"
    return excerpt(text)


class ToolStart(Struct, frozen=True):
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
    #: Its operation (:func:`operation_of` of its name, arguments and directory) when the scan knows it
    #: already (a call it folds unparsed): not worked out again. Read only by an untrusted collector.
    operation: str | None = None


class ToolEnd(Struct, frozen=True):
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


class ModelFailure(Struct, frozen=True):
    text: str
    offset: int = 0
    #: A turn-level report of how the turn ended (Codex's ``turn.failed``): while a failed model call
    #: is still open it is that failure told again, not another one.
    restates: bool = False


class ModelOk(Struct, frozen=True):
    """A successful model response: what recovers a failed model call."""


class Gap(Struct, frozen=True):
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
        #: trusted: a shell call begun, with an intent -> its operation under the exact rule (what an
        #: exact-rule scan, without provenance, named its failures by): its success recovers those too
        self.exact_starts: dict[str, str] = {}
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
                operation = fact.operation or operation_of(fact.name, fact.args, fact.cwd)
                self.starts[fact.call_id] = (operation, self.sequence, fact.name)
            return []
        if isinstance(fact, ModelFailure):
            if fact.restates and MODEL_CALL in self.failed:
                return []
            incident = self.failed.get(MODEL_CALL, (f"model:{self.evidence_of}:{fact.offset}", 0))[0]
            self.failed[MODEL_CALL] = (incident, self.sequence)
            return [
                failure_event(
                    incident, MODEL_CALL, Category.MODEL, _excerpt(self.mask(fact.text)) or "the model call failed", at
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
        if call.kind == SHELL:  # its operation under the exact rule, if an exact-rule scan left a failure of it
            exact = operation_of(fact.name, fact.args, fact.cwd)
            if exact != call.operation:
                self.exact_starts[fact.call_id] = exact

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
            text = _excerpt(self.mask("; ".join(call.reasons)))
            event = failure_event(
                f"intent:{self.key(fact.call_id)}",
                call.operation,
                Category.TOOL,
                _excerpt(f"{name} was not run: its intent was rejected: {text}"),
                at,
            )
            event["evidence"] = f"{self.evidence_of}#byte={fact.offset}"
            self._remember(fact, [event])
            return [event]
        code = fact.exit_code
        failed = fact.is_error or (call.kind == SHELL and code is not None and code != 0)
        expected = fact.expected or (call.kind == SHELL and failed and code is not None and code in call.expected)
        call.outcome = "failed" if failed else "ok"
        if call.kind == DISPOSE and failed:
            return []  # the tool refused it whole, and nothing is written: no incident either
        events = self._end(fact, operation, began, name, failed, expected, at)
        exact = self.exact_starts.pop(fact.call_id, None)
        if exact is not None and not failed:  # an exact retry of a failure an exact-rule scan left open
            events += self._end(fact, exact, began, name, False, False, at)
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
            summary = f"{name} failed: {_excerpt(self.mask(tool_text(fact.text)))}" if fact.text else f"{name} failed"
            event = failure_event(incident, operation, Category.TOOL, _excerpt(summary), at)
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
            why = _excerpt(self.mask("; ".join(verdict.reasons)))
            return [
                {
                    "kind": "incomplete",
                    "id": f"incomplete:{event_id}",
                    "operation": "evidence",
                    "summary": _excerpt(f"a failure_disposition reported done does not hold on replay: {why}"),
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
            if incident is not None and disposal_problem(key, incident) is None:
                self.open_ids.add(key)
            else:
                self.open_ids.discard(key)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "sequence": self.sequence,
            "starts": {k: list(v) for k, v in self.starts.items()},
            "failed": {k: list(v) for k, v in self.failed.items()},
            "gaps": sorted(self.gaps),
            **({"exact_starts": dict(self.exact_starts)} if self.exact_starts else {}),
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
        made.exact_starts = {str(k): str(v) for k, v in dict(data.get("exact_starts") or {}).items()}
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


#: An incident's fields, in order, as a collector's saved state keeps each one: a row, not an object.
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
    """A trusted collector's own reduction as JSON, kept with its scan's cursor (every field, unlike ``to_json``)."""
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
