"""Intake of a confined agent's declarations: nulls and empty optional strings are undeclared; a recovery's
evidence is a later success of the same operation (seed 000; the reference's own situations)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.domain.collector import Collector, Fact, ToolEnd, ToolStart
from corral.domain.dispositions import Accepted, Refused, check_disposition
from corral.domain.incidents import Label
from corral.domain.intents import DispositionRequest, Intent, parse_disposition, parse_intent

CWD = "/work/tree"
SHELL = "mcp__corral__bash"
AT = "2026-01-01T00:00:00Z"


def shell(call: str, command: str, *, ok: bool, **intent: Any) -> list[Fact]:
    args = {"command": command, **intent}
    return [
        ToolStart(call, SHELL, args, CWD, intent=parse_intent(args)),
        ToolEnd(call, not ok, "" if ok else "exit 1", exit_code=0 if ok else 1),
    ]


def feed(collector: Collector, *facts: Fact) -> list[dict[str, Any]]:
    return [e for f in facts for e in collector.fold(f, at=AT)]


@pytest.mark.parametrize(
    "intent",
    [
        {"attemptId": None},
        {"attemptId": ""},
        {"operationId": None},
        {"operationId": ""},
        {"expectedExitCodes": None},
        {"operationId": None, "attemptId": None, "expectedExitCodes": None},
    ],
)
def test_a_null_or_empty_intent_field_is_undeclared(intent: dict[str, Any]) -> None:
    assert parse_intent({"command": "npm test", **intent}) == Intent()


def test_undeclared_fields_beside_declared_ones_keep_the_declared_ones() -> None:
    got = parse_intent({"command": "x", "operationId": "build", "attemptId": None, "expectedExitCodes": None})
    assert got == Intent("build", None, ())


def test_a_wrong_type_is_still_refused_never_coerced() -> None:
    assert not isinstance(parse_intent({"operationId": 7}), Intent)
    assert not isinstance(parse_intent({"attemptId": False}), Intent)


def test_failures_with_null_intents_reach_the_thrice_rule() -> None:
    """Models with nullable schemas send nulls: the real failures are one operation's, failing thrice."""
    collector = Collector("turns/1/output.log", trusted=True)
    feed(collector, *shell("c0", "npm test", ok=False, attemptId=None, expectedExitCodes=None, timeout_seconds=None))
    feed(collector, *shell("c1", "npm test", ok=False, operationId=""))
    feed(collector, *shell("c2", "npm test", ok=False))
    (incident,) = collector.state.incidents.values()
    assert incident.failures == 3 and incident.label is Label.ACTION_REQUIRED
    assert not incident.operation.startswith("intent:")  # never a "not run" observation


@pytest.mark.parametrize(
    "extra", [{"evidence": None}, {"evidence": ""}, {"permissionResource": None}, {"permissionResource": ""}]
)
def test_a_disposition_s_null_or_empty_optional_field_is_undeclared(extra: dict[str, Any]) -> None:
    request = {"disposition": "open", "targets": ["t1"], "reason": "the token is missing", **extra}
    assert parse_disposition(request) == DispositionRequest("open", ("t1",), "the token is missing")


def test_a_null_evidence_is_missing_evidence_for_a_recovery() -> None:
    got = parse_disposition({"disposition": "recovered", "targets": ["t1"], "reason": "r", "evidence": None})
    assert not isinstance(got, DispositionRequest)
    assert any("evidence is required" in r for r in got.reasons)


def _conflict() -> Collector:
    """The reference's merge-conflict situation: a cherry-pick fails; a different command continues it."""
    collector = Collector("turns/1/output.log", trusted=True)
    feed(collector, *shell("pick", "git cherry-pick abc123", ok=False, attemptId="pick-1"))
    feed(
        collector, *shell("continue", "git add a.ts && git cherry-pick --continue", ok=True, attemptId="pick-continue")
    )
    return collector


def _check(collector: Collector, **request: Any) -> Accepted | Refused:
    return check_disposition(collector, collector.state, request, call_id="d1", at=AT)


def test_recovered_with_another_operation_s_success_is_refused_whole() -> None:
    collector = _conflict()
    verdict = _check(
        collector, disposition="recovered", targets=["pick-1"], reason="resolved", evidence="pick-continue"
    )
    assert isinstance(verdict, Refused)
    assert any("another operation" in r for r in verdict.reasons), verdict.reasons
    # the same evidence supersedes it: a different remediation established the outcome
    verdict = _check(
        collector, disposition="superseded", targets=["pick-1"], reason="resolved", evidence="pick-continue"
    )
    assert isinstance(verdict, Accepted)


def test_another_command_s_success_is_no_recovery_of_a_declared_operation() -> None:
    collector = Collector("turns/1/output.log", trusted=True)
    feed(collector, *shell("a", "npm test", ok=False, operationId="unit", attemptId="full-1"))
    feed(collector, *shell("o", "echo all tests passed", ok=True, attemptId="other"))
    feed(collector, *shell("b", "npm test -- --bail", ok=True, operationId="unit", attemptId="scoped-2"))
    refused = _check(collector, disposition="recovered", targets=["full-1"], reason="passed", evidence="other")
    assert isinstance(refused, Refused)
    # (the declared retry already recovered it automatically; a disposition finds nothing open)
    assert all(i.label is Label.RECOVERED for i in collector.state.incidents.values())
