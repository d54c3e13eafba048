"""``failure_disposition``: the request's shape, its check against the incidents, and its replay once."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from corral.domain.collector import Collector, Fact, ToolEnd, ToolStart
from corral.domain.dispositions import Accepted, Refused, check_disposition, disposition_id, open_incidents
from corral.domain.incidents import FailureState, Label, reduce
from corral.domain.intents import PERMISSION_RESOURCES, DispositionRequest, Rejected, parse_disposition, parse_intent

CWD = "/work/tree"
SHELL = "mcp__corral__bash"
DISPOSE = "mcp__corral__failure_disposition"


def shell(call: str, command: str, *, ok: bool, **intent: Any) -> list[Fact]:
    args = {"command": command, **intent}
    return [
        ToolStart(call, SHELL, args, CWD, intent=parse_intent(args)),
        ToolEnd(call, not ok, "" if ok else "exit 1", exit_code=0 if ok else 1),
    ]


def start(call: str, command: str, **intent: Any) -> ToolStart:
    args = {"command": command, **intent}
    return ToolStart(call, SHELL, args, CWD, intent=parse_intent(args))


def dispose_call(call: str, request: dict[str, Any], *, ok: bool = True) -> list[Fact]:
    return [ToolStart(call, DISPOSE, request, CWD, disposition=request), ToolEnd(call, not ok, "")]


class Run:
    """A trusted collector, the journal it fed (reduced), and the facts so far."""

    def __init__(self, *, trusted: bool = True) -> None:
        self.collector = Collector("turns/1/output.log", trusted=trusted)
        self.events: list[dict[str, Any]] = []

    def feed(self, *facts: Fact) -> list[dict[str, Any]]:
        new = [e for f in facts for e in self.collector.fold(f, at=AT)]
        self.events += new
        return new

    @property
    def state(self) -> FailureState:
        return reduce(FailureState(), self.events)

    def check(self, call_id: str = "d1", **request: Any) -> Accepted | Refused:
        return check_disposition(self.collector, self.collector.state, request, call_id=call_id, at=AT)


AT = "2026-01-01T00:00:00Z"
TESTS_FAILED = "tool:turns/1/output.log:a"


def failed_then_fixed() -> Run:
    """pytest fails (attempt t1); a merge-conflict fix lands; a different check passes (attempt v1)."""
    run = Run()
    run.feed(*shell("a", "pytest -x", ok=False, operationId="tests", attemptId="t1"))
    run.feed(*shell("b", "git merge --continue", ok=True, attemptId="m1"))
    run.feed(*shell("v", "make verify", ok=True, attemptId="v1"))
    return run


# -- the request's shape -----------------------------------------------------------------------------


def test_a_well_formed_request_is_parsed():
    assert parse_disposition(
        {"disposition": "open", "targets": ["t1"], "reason": "needs a human", "permissionResource": "network-access"}
    ) == DispositionRequest("open", ("t1",), "needs a human", None, "network-access")


@pytest.mark.parametrize(
    ("request_", "fragment"),
    [
        ({"disposition": "fixed", "targets": ["x"], "reason": "r"}, "disposition must be one of"),
        ({"disposition": "expected", "targets": [], "reason": "r"}, "targets is empty"),
        ({"disposition": "expected", "targets": "x", "reason": "r"}, "targets must be a list"),
        ({"disposition": "expected", "targets": [f"x{n}" for n in range(21)], "reason": "r"}, "21 items"),
        ({"disposition": "expected", "targets": ["x" * 201], "reason": "r"}, "at most 200"),
        ({"disposition": "expected", "targets": ["x"]}, "reason is required"),
        ({"disposition": "expected", "targets": ["x"], "reason": "  "}, "reason is empty"),
        ({"disposition": "expected", "targets": ["x"], "reason": "r" * 401}, "at most 400"),
        ({"disposition": "superseded", "targets": ["x"], "reason": "r"}, "evidence is required for superseded"),
        ({"disposition": "recovered", "targets": ["x"], "reason": "r"}, "evidence is required for recovered"),
        ({"disposition": "superseded", "targets": ["x"], "reason": "r", "evidence": "e" * 201}, "at most 200"),
        ({"disposition": "open", "targets": ["x"], "reason": "r", "permissionResource": "root"}, "must be one of"),
        (
            {"disposition": "expected", "targets": ["x"], "reason": "r", "permissionResource": "unknown"},
            "only for an open disposition",
        ),
        ({"disposition": "expected", "targets": ["x"], "reason": "r", "why": 1}, "unknown field 'why'"),
    ],
)
def test_a_malformed_request_is_rejected(request_, fragment):
    verdict = parse_disposition(request_)
    assert isinstance(verdict, Rejected)
    assert any(fragment in r for r in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("resource", PERMISSION_RESOURCES)
def test_every_permission_resource_is_accepted_with_open(resource):
    parsed = parse_disposition({"disposition": "open", "targets": ["x"], "reason": "r", "permissionResource": resource})
    assert isinstance(parsed, DispositionRequest) and parsed.permission_resource == resource


# -- the check -----------------------------------------------------------------------------------------


def test_superseded_with_evidence_of_a_later_success_is_accepted():
    run = failed_then_fixed()
    verdict = run.check(disposition="superseded", targets=["t1"], reason="conflict resolved", evidence="v1")
    assert isinstance(verdict, Accepted)
    event = verdict.event
    assert event["kind"] == "disposition" and event["disposition"] == "superseded"
    assert event["id"] == "disposition:turns/1/output.log:d1" == disposition_id(run.collector, "d1")
    assert event["targets"] == [TESTS_FAILED] and event["requested"] == ["t1"]
    assert event["evidence"] == "v1" and event["reason"] == "conflict resolved"
    state = reduce(run.state, [event])
    assert state.incidents[TESTS_FAILED].label is Label.SUPERSEDED


@pytest.mark.parametrize("target", [TESTS_FAILED, "t1", "tests", "a"], ids=["incident", "attempt", "operation", "call"])
def test_a_target_may_be_an_incident_an_attempt_an_operation_or_a_call(target):
    run = failed_then_fixed()
    verdict = run.check(disposition="superseded", targets=[target], reason="passed differently", evidence="b")
    assert isinstance(verdict, Accepted), verdict
    assert verdict.event["targets"] == [TESTS_FAILED]


def test_without_evidence_it_is_refused_whole_with_the_open_incidents_listed():
    run = failed_then_fixed()
    run.feed(*shell("c", "ruff check", ok=False, attemptId="r1"))
    verdict = run.check(disposition="superseded", targets=["t1", "r1"], reason="done")
    assert isinstance(verdict, Refused)
    assert any("evidence is required" in r for r in verdict.reasons)
    listed = {(o.id, o.summary, o.call_id, o.attempt_id, o.operation_id) for o in verdict.open_incidents}
    assert listed == {
        (TESTS_FAILED, f"{SHELL} failed: exit 1", "a", "t1", "tests"),
        ("tool:turns/1/output.log:c", f"{SHELL} failed: exit 1", "c", "r1", None),
    }


def test_evidence_of_a_success_that_started_before_the_failure_is_refused():
    run = Run()
    run.feed(start("v", "make verify", attemptId="v1"), start("a", "pytest", operationId="tests", attemptId="t1"))
    run.feed(ToolEnd("a", True, "exit 1", exit_code=1), ToolEnd("v", False, "", exit_code=0))
    verdict = run.check(disposition="superseded", targets=["t1"], reason="verify passed", evidence="v1")
    assert isinstance(verdict, Refused)
    assert verdict.reasons == (f"evidence v1: it started before the failure of {TESTS_FAILED}",)


def test_evidence_that_failed_never_ran_or_is_unknown_is_refused():
    run = failed_then_fixed()
    run.feed(*shell("x", "make verify", ok=False, attemptId="x1"))
    bad = {"command": "true", "attemptId": "v1"}  # reused: refused by the tool, never ran
    run.feed(ToolStart("y", SHELL, bad, CWD, intent=parse_intent(bad)), ToolEnd("y", True, "reused"))
    for evidence, fragment in [("x1", "did not succeed"), ("y", "never ran"), ("nope", "no attemptId")]:
        verdict = run.check(disposition="superseded", targets=["t1"], reason="r", evidence=evidence)
        assert isinstance(verdict, Refused) and fragment in verdict.reasons[0], (evidence, verdict)


def test_twenty_one_targets_are_refused_and_twenty_accepted():
    run = Run()
    for n in range(21):
        run.feed(*shell(f"c{n}", f"probe {n}", ok=False, attemptId=f"p{n}"))
    refused = run.check(disposition="expected", targets=[f"p{n}" for n in range(21)], reason="probes")
    assert isinstance(refused, Refused) and "21 items" in refused.reasons[0]
    assert len(refused.open_incidents) == 21
    accepted = run.check(disposition="expected", targets=[f"p{n}" for n in range(20)], reason="probes")
    assert isinstance(accepted, Accepted) and len(accepted.event["targets"]) == 20


def test_one_unknown_target_refuses_the_whole_request():
    run = failed_then_fixed()
    verdict = run.check(disposition="expected", targets=["t1", "ghost"], reason="r")
    assert isinstance(verdict, Refused)
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("ghost: no incident")


def test_open_with_a_permission_resource_carries_it_and_needs_action():
    run = failed_then_fixed()
    verdict = run.check(
        disposition="open", targets=["t1"], reason="Local credential cache", permissionResource="credential-files"
    )
    assert isinstance(verdict, Accepted)
    assert verdict.event["permission_resource"] == "credential-files"
    incident = reduce(run.state, [verdict.event]).incidents[TESTS_FAILED]
    assert incident.label is Label.ACTION_REQUIRED
    assert incident.permission_resource == "credential-files"
    assert incident.to_json()["permission_resource"] == "credential-files"


def test_an_unknown_permission_resource_is_refused():
    run = failed_then_fixed()
    verdict = run.check(disposition="open", targets=["t1"], reason="r", permissionResource="sudo")
    assert isinstance(verdict, Refused) and "permissionResource must be one of" in verdict.reasons[0]
    assert [o.id for o in verdict.open_incidents] == [TESTS_FAILED]


def test_closed_and_already_disposed_incidents_are_refused():
    run = Run()
    run.feed(*shell("a", "pytest", ok=False, operationId="tests"), *shell("b", "pytest", ok=True, operationId="tests"))
    closed = run.check(disposition="expected", targets=["a"], reason="r")
    assert isinstance(closed, Refused) and "already closed (Recovered)" in closed.reasons[0]
    run.feed(*shell("c", "ruff", ok=False, attemptId="r1"))
    run.feed(*dispose_call("d1", {"disposition": "expected", "targets": ["r1"], "reason": "lint is advisory"}))
    again = run.check("d2", disposition="open", targets=["r1"], reason="r")
    assert isinstance(again, Refused) and "already disposed (expected)" in again.reasons[0]
    assert again.open_incidents == ()


def test_an_untrusted_collector_refuses_and_its_replay_records_nothing():
    run = Run(trusted=False)
    run.feed(*shell("a", "pytest", ok=False, operationId="tests", attemptId="t1"))
    assert isinstance(run.check(disposition="expected", targets=["t1"], reason="r"), Refused)
    new = run.feed(*dispose_call("d1", {"disposition": "expected", "targets": ["t1"], "reason": "r"}))
    assert new == []
    assert run.state.incidents[TESTS_FAILED].disposition is None


# -- the replay ---------------------------------------------------------------------------------------


def test_the_replay_records_a_successful_disposition_call_once():
    run = failed_then_fixed()
    request = {"disposition": "superseded", "targets": ["t1"], "reason": "verified", "evidence": "v1"}
    told = run.check(**request)  # what the tool checked before answering
    assert isinstance(told, Accepted)
    new = run.feed(*dispose_call("d1", request))
    assert new == [told.event]  # the replay reaches the same event, id included
    assert run.state.incidents[TESTS_FAILED].label is Label.SUPERSEDED
    assert run.feed(*dispose_call("d1", request)) == []  # the log scanned again: not twice
    # and a journal holding it twice (the tool wrote it, the replay too) applies it once
    state = reduce(FailureState(), [*run.events, told.event])
    assert state.dispositions == {told.event["id"]}


def test_a_refused_disposition_call_records_no_disposition():
    run = failed_then_fixed()
    request = {"disposition": "superseded", "targets": ["t1"], "reason": "r"}  # no evidence: the tool refused
    for call in ("d1", "d2", "d3"):  # refused whole, and nothing is written: three are no stuck operation
        assert run.feed(*dispose_call(call, request, ok=False)) == []
    assert run.state.incidents[TESTS_FAILED].disposition is None
    assert list(run.state.incidents) == [TESTS_FAILED]


def test_a_disposition_reported_done_that_does_not_hold_on_replay_is_an_incomplete_observation():
    run = failed_then_fixed()
    new = run.feed(*dispose_call("d1", {"disposition": "expected", "targets": ["ghost"], "reason": "r"}))
    assert [e["kind"] for e in new] == ["incomplete"]
    assert "does not hold on replay" in new[0]["summary"]
    assert run.state.incidents[TESTS_FAILED].disposition is None


def test_after_a_closing_disposition_the_operation_failing_again_is_a_new_incident():
    run = failed_then_fixed()
    run.feed(*dispose_call("d1", {"disposition": "superseded", "targets": ["t1"], "reason": "r", "evidence": "v1"}))
    run.feed(*shell("e", "pytest", ok=False, operationId="tests"))
    state = run.state
    assert state.incidents[TESTS_FAILED].label is Label.SUPERSEDED
    assert state.incidents["tool:turns/1/output.log:e"].label is Label.UNCLASSIFIED


def test_the_check_survives_a_reload_of_the_collector():
    run = failed_then_fixed()
    loaded = Collector.from_json(json.loads(json.dumps(run.collector.to_json())))
    request = {"disposition": "superseded", "targets": ["t1"], "reason": "r", "evidence": "v1"}
    assert check_disposition(loaded, None, request, call_id="d1", at=AT) == run.check(**request)
    assert open_incidents(loaded) == open_incidents(run.collector)


def test_an_expected_disposition_keeps_its_label_when_the_operation_later_passes():
    run = Run()
    run.feed(*shell("a", "pytest", ok=False, operationId="tests", attemptId="t1"))
    run.feed(*dispose_call("d1", {"disposition": "expected", "targets": ["t1"], "reason": "red first"}))
    run.feed(*shell("b", "pytest", ok=True, operationId="tests"))
    incident = run.state.incidents[TESTS_FAILED]
    assert incident.label is Label.EXPECTED and incident.closed_by == "recovered:b"


@settings(max_examples=100, deadline=None)
@given(hs.lists(hs.integers(0, 6), min_size=1, max_size=12))
def test_dispositions_apply_once_however_often_the_journal_repeats_them(repeats):
    run = failed_then_fixed()
    run.feed(*shell("c", "ruff", ok=False, attemptId="r1"))
    run.feed(*dispose_call("d1", {"disposition": "superseded", "targets": ["t1"], "reason": "r", "evidence": "v1"}))
    run.feed(*dispose_call("d2", {"disposition": "open", "targets": ["r1"], "reason": "r"}))
    once = run.state.to_json()
    dispositions = [e for e in run.events if e["kind"] == "disposition"]
    assert len(dispositions) == 2
    journal = copy.deepcopy(run.events)
    for n in repeats:
        journal.insert(min(n + len(run.events) - 2, len(journal)), dispositions[n % 2])
    replayed = reduce(FailureState(), journal).to_json()
    assert replayed["incidents"] == once["incidents"] and replayed["counts"] == once["counts"]


def test_a_trusted_collector_keeps_only_the_calls_a_disposition_could_name():
    run = Run()
    for n in range(50):
        run.feed(*shell(f"ok{n}", f"ls {n}", ok=True))  # nothing open: never evidence of anything
    assert run.collector.calls == {}
    run.feed(*shell("a", "pytest", ok=False, attemptId="t1"))
    run.feed(*shell("v", "make verify", ok=True))  # started after an open failure: kept as evidence
    assert set(run.collector.calls) == {"turns/1/output.log:a", "turns/1/output.log:v"}
    verdict = run.check(disposition="superseded", targets=["t1"], reason="verified", evidence="v")
    assert isinstance(verdict, Accepted)
