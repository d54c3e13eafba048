"""Intents of a confined agent's shell calls: parsing, and what a trusted collector makes of them.

An untrusted collector must stay exactly the exact-retry rule: it is compared, on random fact
streams, with a frozen copy of the collector as it was before intents existed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from corral.domain.collector import Collector, Fact, Gap, ModelFailure, ModelOk, ToolEnd, ToolStart, operation_of
from corral.domain.incidents import MODEL_CALL, FailureState, Label, excerpt, reduce
from corral.domain.intents import ID_PATTERN, MAX_EXPECTED, Intent, Rejected, command_args, parse_intent

CWD = "/work/tree"
SHELL = "mcp__corral__bash"

# -- parse_intent ------------------------------------------------------------------------------------


def test_no_intent_fields_is_an_empty_intent():
    assert parse_intent({"command": "ls"}) == Intent(None, None, ())


def test_a_full_intent_is_read_with_codes_deduplicated_sorted_and_zero_ignored():
    intent = parse_intent(
        {"command": "rg x", "operationId": "search.x", "attemptId": "a-1", "expectedExitCodes": [2, 1, 0, 1]}
    )
    assert intent == Intent("search.x", "a-1", (1, 2))


@pytest.mark.parametrize("value", ["a", "A9", "op/sub:1.2_x-y", "x" * 64, "9lives"])
def test_valid_ids(value):
    assert parse_intent({"operationId": value, "attemptId": value}) == Intent(value, value, ())


@pytest.mark.parametrize("value", ["-a", ".a", "a b", "x" * 65, "a\n", "é", "a\x00", 7, ["a"], " "])
def test_invalid_ids_are_rejected_with_a_reason_each(value):
    verdict = parse_intent({"operationId": value, "attemptId": value})
    assert isinstance(verdict, Rejected)
    assert len(verdict.reasons) == 2
    assert verdict.reasons[0].startswith("operationId ") and verdict.reasons[1].startswith("attemptId ")


def test_the_id_pattern_is_the_documented_one():
    assert ID_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$"


@pytest.mark.parametrize(
    ("codes", "fragment"),
    [
        ([True], "is not an integer"),
        ([1.0], "is not an integer"),
        (["1"], "is not an integer"),
        ([256], "outside 0-255"),
        ([-1], "outside 0-255"),
        ("1", "must be a list"),
        (1, "must be a list"),
        (list(range(1, MAX_EXPECTED + 2)), "17 distinct non-zero codes"),
    ],
)
def test_invalid_expected_exit_codes_are_rejected(codes, fragment):
    verdict = parse_intent({"expectedExitCodes": codes})
    assert isinstance(verdict, Rejected)
    assert any(fragment in r for r in verdict.reasons), verdict.reasons


def test_sixteen_distinct_codes_with_duplicates_and_zeros_are_allowed():
    codes = [0, *range(1, 17), *range(1, 17)]
    assert parse_intent({"expectedExitCodes": codes}) == Intent(None, None, tuple(range(1, 17)))


def test_every_problem_is_reported_once():
    verdict = parse_intent({"operationId": "-x", "attemptId": "ok", "expectedExitCodes": [False, 300]})
    assert isinstance(verdict, Rejected)
    assert len(verdict.reasons) == 3


def test_command_args_drop_only_the_intent():
    args = {"command": "x", "timeout": 5, "operationId": "o", "attemptId": "a", "expectedExitCodes": [1]}
    assert command_args(args) == {"command": "x", "timeout": 5}


# -- the trusted collector ---------------------------------------------------------------------------


def shell(call: str, command: str, *, ok: bool, exit_code: int | None = None, **intent: Any) -> list[Fact]:
    """A call of corral's shell tool, as an adapter gives it: the intent parsed from its arguments."""
    args = {"command": command, **intent}
    code = exit_code if exit_code is not None else (0 if ok else 1)
    return [
        ToolStart(call, SHELL, args, CWD, intent=parse_intent(args)),
        ToolEnd(call, not ok, "" if ok else f"exit {code}", exit_code=code),
    ]


def fold(facts: list[Fact], collector: Collector) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, fact in enumerate(facts):
        events += collector.fold(fact, at=f"2026-01-01T00:00:{n:02d}Z")
    return events


def trusted_state(facts: list[Fact]) -> tuple[FailureState, list[dict[str, Any]]]:
    events = fold(facts, Collector(trusted=True))
    return reduce(FailureState(), events), events


def test_a_failure_then_a_success_of_the_same_operation_id_with_changed_arguments_is_recovered():
    state, events = trusted_state(
        [
            *shell("a", "pytest -x tests/a", ok=False, operationId="tests", attemptId="t1"),
            *shell("b", "pytest -q --timeout=60 tests", ok=True, operationId="tests", attemptId="t2"),
        ]
    )
    (incident,) = state.incidents.values()
    assert incident.operation == "op:tests"
    assert incident.label is Label.RECOVERED
    assert incident.closed_by == "recovered:b"
    assert [e["kind"] for e in events] == ["failure", "recovered"]


def test_the_same_changed_retry_without_an_operation_id_recovers_nothing():
    state, _ = trusted_state(
        [*shell("a", "pytest -x tests/a", ok=False, attemptId="t1"), *shell("b", "pytest", ok=True, attemptId="t2")]
    )
    assert [i.label for i in state.incidents.values()] == [Label.UNCLASSIFIED]


def test_attempt_id_never_changes_the_operation_of_an_exact_retry():
    state, _ = trusted_state([*shell("a", "pytest", ok=False, attemptId="t1"), *shell("b", "pytest", ok=True)])
    assert [i.label for i in state.incidents.values()] == [Label.RECOVERED]


def test_another_operation_id_recovers_nothing():
    state, _ = trusted_state(
        [*shell("a", "pytest", ok=False, operationId="tests"), *shell("b", "pytest", ok=True, operationId="lint")]
    )
    assert [i.label for i in state.incidents.values()] == [Label.UNCLASSIFIED]


def test_a_declared_exit_code_is_an_expected_failure_and_keeps_its_label_when_it_later_passes():
    state, events = trusted_state(
        [
            *shell("a", "rg TODO", ok=False, exit_code=1, operationId="grep", expectedExitCodes=[1]),
            *shell("b", "rg TODO src", ok=True, operationId="grep"),
        ]
    )
    assert events[0]["expected"] is True
    (incident,) = state.incidents.values()
    assert incident.label is Label.EXPECTED
    assert incident.closed_by == "recovered:b"
    assert state.needs_action == []


def test_a_declared_exit_code_returned_as_a_non_error_result_is_still_classified_from_the_exit_code():
    args = {"command": "rg TODO", "expectedExitCodes": [1]}
    state, events = trusted_state(
        [ToolStart("a", SHELL, args, CWD, intent=parse_intent(args)), ToolEnd("a", False, "", exit_code=1)]
    )
    assert events[0]["expected"] is True
    assert [i.label for i in state.incidents.values()] == [Label.EXPECTED]


def test_an_undeclared_exit_code_is_an_ordinary_failure():
    state, events = trusted_state([*shell("a", "rg TODO", ok=False, exit_code=2, expectedExitCodes=[1])])
    assert "expected" not in events[0]
    assert [i.label for i in state.incidents.values()] == [Label.UNCLASSIFIED]


def test_a_timeout_with_no_exit_code_is_an_ordinary_failure_whatever_was_declared():
    args = {"command": "sleep 999", "expectedExitCodes": [1]}
    state, events = trusted_state(
        [ToolStart("a", SHELL, args, CWD, intent=parse_intent(args)), ToolEnd("a", True, "timed out", exit_code=None)]
    )
    assert "expected" not in events[0]
    assert [i.label for i in state.incidents.values()] == [Label.UNCLASSIFIED]


def test_a_declared_exit_then_an_undeclared_one_of_the_same_operation_is_no_longer_expected():
    state, _ = trusted_state(
        [
            *shell("a", "rg x", ok=False, exit_code=1, operationId="g", expectedExitCodes=[1]),
            *shell("b", "rg x", ok=False, exit_code=2, operationId="g", expectedExitCodes=[1]),
        ]
    )
    (incident,) = state.incidents.values()
    assert incident.failures == 2 and incident.label is Label.UNCLASSIFIED


def test_a_rejected_intent_is_its_own_observation_and_never_a_failure_of_the_operation_it_named():
    bad = {"command": "pytest", "operationId": "tests", "expectedExitCodes": [999]}
    facts: list[Fact] = [
        *shell("a", "pytest", ok=False, operationId="tests"),
        ToolStart("r", SHELL, bad, CWD, intent=parse_intent(bad)),
        ToolEnd("r", True, "Invalid command intent", offset=77),
    ]
    state, _ = trusted_state(facts)
    tests = state.incidents["tool:output.log:a"]
    assert tests.failures == 1 and tests.label is Label.UNCLASSIFIED
    rejected = state.incidents["intent:output.log:r"]
    assert rejected.operation == "intent:output.log:r"
    assert rejected.category == "tool" and rejected.label is Label.UNCLASSIFIED
    assert "not run" in rejected.summary and "intent was rejected" in rejected.summary
    assert "outside 0-255" in rejected.summary
    assert rejected.evidence == "output.log#byte=77"


def test_a_reused_attempt_id_is_rejected_and_the_named_operation_untouched():
    facts: list[Fact] = [
        *shell("a", "pytest", ok=False, operationId="tests", attemptId="t1"),
        *shell("b", "pytest", ok=False, operationId="tests", attemptId="t1"),  # refused by the tool
        *shell("c", "pytest", ok=False, operationId="tests", attemptId="t1"),  # refused again
    ]
    state, _ = trusted_state(facts)
    tests = state.incidents["tool:output.log:a"]
    assert tests.failures == 1 and tests.label is Label.UNCLASSIFIED  # not three failures: never "stuck"
    for call in "bc":
        rejected = state.incidents[f"intent:output.log:{call}"]
        assert "attemptId t1 was already used (tool call a)" in rejected.summary


def test_a_reused_attempt_id_across_turns_is_rejected_but_the_same_call_replayed_is_not():
    collector = Collector("turns/1/output.log", trusted=True)
    first = shell("item_1", "pytest", ok=True, attemptId="t1")
    fold(first, collector)
    fold(first, collector)  # the same log scanned again (rewritten): the same call, not a reuse
    assert collector.attempt_owner("t1") == "item_1"
    assert not any(c.kind == "rejected" for c in collector.calls.values())
    collector.evidence_of = "turns/2/output.log"
    events = fold(shell("item_1", "pytest", ok=True, attemptId="t1"), collector)  # Codex ids recur each turn
    assert [e["id"] for e in events] == ["intent:turns/2/output.log:item_1"]


def test_a_rejected_call_that_succeeds_does_not_recover_or_count_as_an_attempt():
    bad = {"command": "pytest", "operationId": "tests", "attemptId": "bad id"}
    facts: list[Fact] = [
        *shell("a", "pytest", ok=False, operationId="tests"),
        ToolStart("r", SHELL, bad, CWD, intent=parse_intent(bad)),
        ToolEnd("r", False),
    ]
    state, _ = trusted_state(facts)
    assert state.incidents["tool:output.log:a"].label is Label.UNCLASSIFIED


def test_an_intent_is_ignored_by_an_untrusted_collector():
    facts = [
        *shell("a", "pytest -x", ok=False, exit_code=1, operationId="tests", expectedExitCodes=[1]),
        *shell("b", "pytest", ok=True, operationId="tests"),
    ]
    events = fold(facts, Collector())
    state = reduce(FailureState(), events)
    (incident,) = state.incidents.values()
    assert incident.label is Label.UNCLASSIFIED and "expected" not in events[0]
    assert incident.operation == operation_of(
        SHELL, {"command": "pytest -x", "operationId": "tests", "expectedExitCodes": [1]}, CWD
    )


def test_a_trusted_collector_saved_and_loaded_mid_stream_folds_as_one_uninterrupted_fold():
    stream: list[Fact] = [
        *shell("a", "pytest", ok=False, operationId="tests", attemptId="t1"),
        ToolStart("p", SHELL, {"command": "x", "attemptId": "t1"}, CWD, intent=parse_intent({"attemptId": "t1"})),
        ModelFailure("HTTP 529", 10),
        ToolEnd("p", True, "refused"),
        ModelOk(),
        *shell("b", "pytest -q", ok=True, operationId="tests", attemptId="t2"),
        *shell("c", "rg", ok=False, exit_code=1, expectedExitCodes=[1]),
        Gap("oversized:9", "big"),
    ]
    whole_collector = Collector(trusted=True)
    whole = fold(stream, whole_collector)
    for cut in range(len(stream) + 1):
        first = Collector(trusted=True)
        events = fold(stream[:cut], first)
        second = Collector.from_json(json.loads(json.dumps(first.to_json())))
        assert second.trusted and second.to_json() == first.to_json()
        events += [
            e for n, f in enumerate(stream[cut:], start=cut) for e in second.fold(f, f"2026-01-01T00:00:{n:02d}Z")
        ]
        assert events == whole, cut
        assert second.to_json() == whole_collector.to_json(), cut


def test_old_collector_json_loads_untrusted():
    old = {"sequence": 3, "starts": {}, "failed": {}, "gaps": [], "evidence_of": "output.log"}
    assert Collector.from_json(old).trusted is False


# -- an untrusted collector is today's collector ----------------------------------------------------------


class LegacyCollector:
    """The collector as it was before intents (exact retry only): the reference an untrusted one must equal."""

    def __init__(self) -> None:
        self.evidence_of = "output.log"
        self.sequence = 0
        self.starts: dict[str, tuple[str, int, str]] = {}
        self.failed: dict[str, tuple[str, int]] = {}
        self.gaps: set[str] = set()

    def fold(self, fact: Fact, at: str | None = None) -> list[dict[str, Any]]:
        self.sequence += 1
        if isinstance(fact, ToolStart):
            self.starts[fact.call_id] = (operation_of(fact.name, fact.args, fact.cwd), self.sequence, fact.name)
            return []
        if isinstance(fact, ToolEnd):
            started = self.starts.pop(fact.call_id, None)
            if started is not None:
                operation, began, name = started
            else:
                name = fact.name or "tool"
                operation, began = operation_of(name, fact.args, ""), self.sequence
            if fact.is_error:
                incident = self.failed.get(operation, (f"tool:{self.evidence_of}:{fact.call_id}", 0))[0]
                self.failed[operation] = (incident, self.sequence)
                summary = f"{name} failed: {excerpt(fact.text)}" if fact.text else f"{name} failed"
                event = {
                    "kind": "failure",
                    "id": incident,
                    "operation": operation,
                    "category": "tool",
                    "summary": excerpt(summary),
                    "at": at,
                    "evidence": f"{self.evidence_of}#byte={fact.offset}",
                }
                if fact.expected:
                    event["expected"] = True
                return [event]
            open_failure = self.failed.get(operation)
            if open_failure is not None and began > open_failure[1]:
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
        if isinstance(fact, ModelFailure):
            incident = self.failed.get(MODEL_CALL, (f"model:{self.evidence_of}:{fact.offset}", 0))[0]
            self.failed[MODEL_CALL] = (incident, self.sequence)
            return [
                {
                    "kind": "failure",
                    "id": incident,
                    "operation": MODEL_CALL,
                    "category": "model",
                    "summary": excerpt(fact.text) or "the model call failed",
                    "at": at,
                    "evidence": f"{self.evidence_of}#byte={fact.offset}",
                }
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
        assert isinstance(fact, Gap)
        if fact.key in self.gaps:
            return []
        self.gaps.add(fact.key)
        return [
            {"kind": "incomplete", "id": f"incomplete:{fact.key}", "operation": "evidence", "summary": fact.summary}
        ]


CALLS = hs.sampled_from(["a", "b", "c", "d"])
INTENT_ARGS = hs.fixed_dictionaries(
    {"command": hs.sampled_from(["pytest", "rg x", "ruff"])},
    optional={
        "operationId": hs.sampled_from(["tests", "lint", "bad id", ""]),
        "attemptId": hs.sampled_from(["t1", "t2", "t1"]),
        "expectedExitCodes": hs.sampled_from([[1], [1, 2], [0], [300], True]),
    },
)


@hs.composite
def facts(draw: Any) -> Fact:
    kind = draw(hs.sampled_from(["start", "end", "model-fail", "model-ok", "gap", "disposition"]))
    call = draw(CALLS)
    if kind == "start":
        args = draw(INTENT_ARGS)
        return ToolStart(call, draw(hs.sampled_from([SHELL, "Read"])), args, CWD, intent=parse_intent(args))
    if kind == "disposition":
        request = {"disposition": "superseded", "targets": [draw(CALLS)], "reason": "r", "evidence": draw(CALLS)}
        return ToolStart(call, "mcp__corral__failure_disposition", request, CWD, disposition=request)
    if kind == "end":
        code = draw(hs.one_of(hs.none(), hs.integers(0, 3)))
        return ToolEnd(
            call,
            draw(hs.booleans()),
            draw(hs.sampled_from(["", "boom"])),
            draw(hs.integers(0, 99)),
            exit_code=code,
            expected=draw(hs.booleans()),
        )
    if kind == "model-fail":
        return ModelFailure("HTTP 529", draw(hs.integers(0, 5)))
    if kind == "model-ok":
        return ModelOk()
    return Gap(f"g{draw(hs.integers(0, 2))}", "gap")


@settings(max_examples=300, deadline=None)
@given(hs.lists(facts(), max_size=30))
def test_an_untrusted_collector_folds_exactly_as_the_collector_before_intents(stream):
    legacy, current = LegacyCollector(), Collector()
    for n, fact in enumerate(stream):
        at = f"t{n}"
        assert current.fold(fact, at) == legacy.fold(fact, at), (n, fact)
    assert (current.sequence, current.starts, current.failed, current.gaps) == (
        legacy.sequence,
        legacy.starts,
        legacy.failed,
        legacy.gaps,
    )


@settings(max_examples=200, deadline=None)
@given(hs.lists(facts(), max_size=30), hs.integers(0, 30))
def test_a_trusted_fold_is_deterministic_and_survives_a_reload_anywhere(stream, cut):
    cut = min(cut, len(stream))
    whole = fold(stream, Collector(trusted=True))
    assert fold(stream, Collector(trusted=True)) == whole
    first = Collector(trusted=True)
    events = fold(stream[:cut], first)
    second = Collector.from_json(json.loads(json.dumps(first.to_json())))
    events += [e for n, f in enumerate(stream[cut:], start=cut) for e in second.fold(f, f"2026-01-01T00:00:{n:02d}Z")]
    assert events == whole
