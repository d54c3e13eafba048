"""A confined agent's ``failure_disposition`` against what only a person may do: dismiss, or close an incident
that is not its own tool failure (a watchdog kill, its process's exit), whatever nulls or extra fields it sends."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.collector import Collector, ToolEnd, ToolStart
from corral.domain.dispositions import Accepted, Refused, check_disposition
from corral.domain.incidents import Category, Label, dismissal_event, reduce, supervision_failure
from corral.domain.intents import parse_intent

AT = "2026-01-01T00:00:00Z"
SHELL = "mcp__corral__bash"


def collector_with_failures() -> Collector:
    """A trusted collector whose run failed a shell call and then passed one, beside a watchdog kill corral saw."""
    collector = Collector("turns/1/output.log", trusted=True)
    for call, ok, operation in (("c1", False, "build"), ("c2", True, "lint")):
        args = {"command": "make", "operationId": operation}
        collector.fold(ToolStart(call, SHELL, args, "/wt", intent=parse_intent(args)), at=AT)
        collector.fold(ToolEnd(call, not ok, "" if ok else "exit 2", exit_code=0 if ok else 2), at=AT)
    reduce(collector.state, [supervision_failure("watchdog", Category.SUPERVISION, "killed (last: turn 1)", AT)])
    return collector


@pytest.mark.parametrize(
    "request_",
    [
        {"disposition": "dismissed", "targets": ["watchdog"], "reason": "x"},
        {"disposition": "expected", "targets": ["supervision:watchdog"], "reason": "x"},
        {"disposition": "superseded", "targets": ["supervision:watchdog"], "reason": "x", "evidence": "c2"},
        {"disposition": "open", "targets": ["supervision:watchdog"], "reason": "x", "permissionResource": None},
        {"disposition": "expected", "targets": ["supervision:watchdog"], "reason": "x", "actor": "human"},
        {"disposition": "expected", "targets": ["op:watchdog"], "reason": "x", "evidence": None},
        {"disposition": "expected", "targets": [None], "reason": None},
    ],
)
def test_an_agent_cannot_close_or_dismiss_what_is_not_its_tool_failure(request_: dict[str, Any]) -> None:
    collector = collector_with_failures()
    got = check_disposition(collector, None, request_, call_id="d1", at=AT)
    assert isinstance(got, Refused), got
    assert collector.state.incidents["supervision:watchdog"].label is Label.ACTION_REQUIRED


def test_a_dismissal_in_the_journal_counts_only_as_a_persons() -> None:
    collector = collector_with_failures()
    forged = {**dismissal_event("disposition:turns/1/output.log:d9", "supervision:watchdog", "agent", AT)}
    forged.pop("actor")
    for event in (forged, {**forged, "id": "d10", "actor": "agent"}, {**forged, "id": "d11", "actor": None}):
        reduce(collector.state, [event])
        assert collector.state.incidents["supervision:watchdog"].label is Label.ACTION_REQUIRED, event
    accepted = check_disposition(
        collector,
        None,
        {"disposition": "superseded", "targets": ["build"], "reason": "ok", "evidence": "c2"},
        call_id="d2",
    )
    assert isinstance(accepted, Accepted) and "actor" not in accepted.event, accepted
