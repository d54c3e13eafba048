"""Dispositions: what a confined agent declares about its own failures, and whether it holds (docs/incidents.md).

A ``failure_disposition`` call names incidents (by incident id, ``attemptId``, ``operationId`` or
tool call id) and says they are recovered, superseded, expected or still open; a recovery or a
supersession names as evidence a later call that succeeded. :func:`check_disposition` decides it
against what a trusted collector remembers (:class:`Remembered`, which
:class:`corral.domain.collector.Collector` is): the same check when the tool is called and when
the collector replays the call from the log, so a disposition is recorded once and only if it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from msgspec import Struct

from corral.domain.incidents import CLOSED, Category, FailureState, Incident, Label, excerpt
from corral.domain.intents import NEEDS_EVIDENCE, REASON_CHARS, DispositionRequest, Rejected, parse_disposition

#: The kinds of tool call a trusted collector remembers (:class:`Attempt`).
CALL = "call"  # any tool call
SHELL = "shell"  # corral's shell tool with a valid intent
REFUSED = "rejected"  # corral's shell tool whose intent was rejected: it never ran
DISPOSE = "disposition"  # corral's failure_disposition tool


class Attempt(Struct):
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


class Remembered(Protocol):
    """What a trusted collector remembers, against which a disposition's targets and evidence are checked."""

    trusted: bool
    #: Applied to the agent's reason before it is cut and recorded.
    mask: Callable[[str], str]
    #: The reduction of the collector's own events.
    state: FailureState
    calls: dict[str, Attempt]  # "<evidence_of>:<call id>" -> the call
    attempt_ids: dict[str, str]  # attemptId -> the key of the call that first used it
    failure_at: dict[str, int]  # incident id -> the sequence of its latest failure

    def key(self, call_id: str) -> str: ...

    def find_call(self, name: str) -> Attempt | None: ...


class OpenIncident(Struct, frozen=True):
    """An incident a disposition may name: listed with every refusal, so the agent can name it right."""

    id: str
    label: str
    summary: str
    call_id: str | None = None  # the tool call whose failure opened or last joined it
    attempt_id: str | None = None
    operation_id: str | None = None


class Accepted(Struct, frozen=True):
    """A disposition that holds: ``event`` is its journal event (its id the same however often it is checked)."""

    event: dict[str, Any]


class Refused(Struct, frozen=True):
    """A disposition refused whole (nothing is recorded): every reason, and the incidents still open."""

    reasons: tuple[str, ...]
    open_incidents: tuple[OpenIncident, ...]


def disposition_id(collector: Remembered, call_id: str) -> str:
    """The journal id of the disposition a ``failure_disposition`` call records: from its call id alone."""
    return f"disposition:{collector.key(call_id)}"


def disposal_problem(target: str, incident: Incident) -> str | None:
    """Why ``incident`` cannot be disposed, or None: only an open tool failure not disposed yet can."""
    if incident.category != Category.TOOL.value or incident.label is Label.INCOMPLETE:
        return f"{target}: incident {incident.id} is not a tool failure of this agent's"
    if incident.label in CLOSED or incident.closed_by is not None:
        return f"{target}: incident {incident.id} is already closed ({incident.label.value})"
    if incident.disposition is not None:
        return f"{target}: incident {incident.id} was already disposed ({incident.disposition})"
    return None


def open_incidents(collector: Remembered, state: FailureState | None = None) -> tuple[OpenIncident, ...]:
    """The incidents of ``state`` (the collector's own by default) a disposition may name, oldest first."""
    state = state if state is not None else collector.state
    by_incident = {c.incident: c for c in sorted(collector.calls.values(), key=lambda c: c.began) if c.incident}
    found = []
    for incident in state.incidents.values():
        if disposal_problem(incident.id, incident) is not None:
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


def _resolve(collector: Remembered, state: FailureState, target: str) -> tuple[list[Incident], str | None]:
    """The incidents ``target`` names — an incident id, an attemptId, an operationId or a tool call id, in
    that order — or why it names none that may be disposed."""
    incident = state.incidents.get(state.aliases.get(target, target))
    if incident is not None:
        problem = disposal_problem(target, incident)
        return ([], problem) if problem else ([incident], None)
    call = collector.calls.get(collector.attempt_ids.get(target, "")) if target in collector.attempt_ids else None
    if call is None:
        operation = f"op:{target}"
        of_operation = [i for i in state.incidents.values() if i.operation == operation]
        if of_operation:
            still_open = [i for i in of_operation if disposal_problem(target, i) is None]
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
    problem = disposal_problem(target, incident)
    return ([], problem) if problem else ([incident], None)


def _evidence_problems(collector: Remembered, request: DispositionRequest, incidents: Iterable[Incident]) -> list[str]:
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
        elif request.disposition == "recovered" and call.operation != incident.operation:
            # a recovery's evidence is a successful attempt of THAT operation; another
            # command's success is a supersession at most
            problems.append(
                f"evidence {evidence}: it is an attempt of another operation than {incident.id}'s "
                "(recovered needs a later success of the same operation; superseded names another)"
            )
    return problems


def check_disposition(
    collector: Remembered,
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
