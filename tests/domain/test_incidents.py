"""The incident fold (``Collector``) and the reducer (``reduce``): labels, exact-retry recovery, dispositions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.domain.collector import Collector, Fact, Gap, ModelFailure, ModelOk, ToolEnd, ToolStart, operation_of
from corral.domain.incidents import (
    MODEL_CALL,
    Category,
    FailureState,
    Incident,
    Label,
    reduce,
    summary_line,
    supervision_failure,
)

CWD = "/work/tree"
TEST = {"command": "pytest -q"}


def fold(facts: list[Fact], collector: Collector | None = None) -> list[dict[str, Any]]:
    collector = collector or Collector()
    events: list[dict[str, Any]] = []
    for n, fact in enumerate(facts):
        events += collector.fold(fact, at=f"2026-01-01T00:00:{n:02d}Z")
    return events


def state_of(facts: list[Fact]) -> FailureState:
    return reduce(FailureState(), fold(facts))


def labels(state: FailureState) -> list[str]:
    return [i.label.value for i in state.incidents.values()]


def run(call: str, args: Any = None, *, ok: bool, cwd: str = CWD, name: str = "Bash") -> list[Fact]:
    """A tool call that starts and ends at once."""
    return [ToolStart(call, name, TEST if args is None else args, cwd), ToolEnd(call, not ok, "" if ok else "boom")]


# -- labels ------------------------------------------------------------------------------------------


def test_a_tool_error_is_an_unclassified_failure_observation():
    state = state_of(run("a", ok=False))
    (incident,) = state.incidents.values()
    assert incident.label is Label.UNCLASSIFIED
    assert incident.category == Category.TOOL.value
    assert incident.summary == "Bash failed: boom"
    assert incident.evidence == "output.log#byte=0"
    assert state.needs_action == []


@pytest.mark.parametrize("category", [Category.SUPERVISION, Category.EXIT])
def test_a_non_tool_failure_requires_action_at_once(category):
    state = reduce(FailureState(), [supervision_failure("watchdog:1.1", category, "the watchdog ended it", None)])
    (incident,) = state.incidents.values()
    assert incident.label is Label.ACTION_REQUIRED
    assert incident.category == category.value
    assert state.needs_action == [incident]


def test_a_model_failure_requires_action_until_the_next_successful_model_response():
    collector = Collector()
    state = reduce(FailureState(), fold([ModelFailure("HTTP 529 overloaded", 40)], collector))
    (incident,) = state.incidents.values()
    assert incident.label is Label.ACTION_REQUIRED
    assert incident.operation == MODEL_CALL
    assert incident.evidence == "output.log#byte=40"
    # A retried model call that failed again is the same incident, counted.
    reduce(state, fold([ModelFailure("HTTP 529 overloaded", 90)], collector))
    assert list(state.incidents) == [incident.id] and incident.failures == 2
    reduce(state, fold([ModelOk()], collector))
    assert state.incidents[incident.id].label is Label.RECOVERED
    assert state.needs_action == []


def test_a_successful_model_response_with_nothing_failed_records_nothing():
    assert fold([ModelOk(), ModelOk()]) == []


def test_an_expected_failure_is_labelled_expected_and_keeps_its_label_when_it_later_passes():
    facts: list[Fact] = [ToolStart("a", "Bash", TEST, CWD), ToolEnd("a", True, "red first", expected=True)]
    state = state_of([*facts, *run("b", ok=True)])
    (incident,) = state.incidents.values()
    assert incident.label is Label.EXPECTED
    assert incident.closed_by == "recovered:b"
    assert state.needs_action == []


def test_an_incomplete_observation_needs_action_and_is_reported_once():
    collector = Collector()
    events = fold([Gap("oversized:10", "a record over 2 MiB"), Gap("oversized:10", "again")], collector)
    assert len(events) == 1
    state = reduce(FailureState(), events + events)
    (incident,) = state.incidents.values()
    assert incident.label is Label.INCOMPLETE
    assert incident.category == Category.OBSERVATION.value
    assert state.needs_action == [incident]


# -- exact retry --------------------------------------------------------------------------------------


def test_an_exact_retry_started_after_the_failure_recovers_it():
    state = state_of([*run("a", ok=False), *run("b", ok=True)])
    (incident,) = state.incidents.values()
    assert incident.label is Label.RECOVERED
    assert incident.closed_by == "recovered:b"


def test_argument_key_order_does_not_make_another_operation():
    one = {"command": "pytest", "description": "tests"}
    two = {"description": "tests", "command": "pytest"}
    assert operation_of("Bash", one, CWD) == operation_of("Bash", two, CWD)
    state = state_of([*run("a", one, ok=False), *run("b", two, ok=True)])
    assert labels(state) == [Label.RECOVERED.value]


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param(dict(args={"command": "pytest -q tests/a"}), id="other-arguments"),
        pytest.param(dict(cwd="/elsewhere"), id="other-directory"),
        pytest.param(dict(name="Shell"), id="other-tool"),
    ],
)
def test_a_success_of_another_operation_recovers_nothing(retry):
    kw: dict[str, Any] = {"args": None, "cwd": CWD, "name": "Bash", **retry}
    state = state_of([*run("a", ok=False), *run("b", kw["args"], ok=True, cwd=kw["cwd"], name=kw["name"])])
    assert labels(state) == [Label.UNCLASSIFIED.value]


def test_exit_zero_of_another_command_does_not_clear_the_failure():
    state = state_of([*run("a", ok=False), *run("b", {"command": "true"}, ok=True)])
    assert labels(state) == [Label.UNCLASSIFIED.value]


def test_an_assistant_message_claiming_success_does_not_clear_a_tool_failure():
    # The assistant's words are a model response: it recovers model calls, never a tool.
    state = state_of([*run("a", ok=False), ModelOk(), ModelOk()])
    assert labels(state) == [Label.UNCLASSIFIED.value]


def test_a_parallel_success_that_started_before_the_failure_ended_does_not_recover_it():
    # Both calls of the same operation start, then the first fails and the second succeeds:
    # the success began before the failure was seen, so it is no retry of it.
    state = state_of(
        [
            ToolStart("a", "Bash", TEST, CWD),
            ToolStart("b", "Bash", TEST, CWD),
            ToolEnd("a", True, "flaky"),
            ToolEnd("b", False),
        ]
    )
    assert labels(state) == [Label.UNCLASSIFIED.value]


def test_a_success_that_ended_before_the_failure_does_not_recover_it():
    state = state_of(
        [
            ToolStart("a", "Bash", TEST, CWD),
            ToolStart("b", "Bash", TEST, CWD),
            ToolEnd("b", False),
            ToolEnd("a", True, "flaky"),
        ]
    )
    assert labels(state) == [Label.UNCLASSIFIED.value]


def test_an_end_without_a_seen_start_is_no_retry():
    state = state_of([*run("a", ok=False), ToolEnd("b", False, name="Bash", args=TEST)])
    assert labels(state) == [Label.UNCLASSIFIED.value]


# -- the thrice-failed rule ---------------------------------------------------------------------------


def test_the_same_operation_failing_three_times_without_recovery_requires_action():
    state = state_of([*run("a", ok=False), *run("b", ok=False)])
    (incident,) = state.incidents.values()
    assert (incident.label, incident.failures) == (Label.UNCLASSIFIED, 2)
    state = state_of([*run("a", ok=False), *run("b", ok=False), *run("c", ok=False)])
    (incident,) = state.incidents.values()
    assert (incident.label, incident.failures) == (Label.ACTION_REQUIRED, 3)
    assert incident.first_at == "2026-01-01T00:00:01Z" and incident.last_at == "2026-01-01T00:00:05Z"
    assert state.needs_action == [incident]


def test_failures_of_other_operations_do_not_add_up():
    state = state_of([*run("a", ok=False), *run("b", {"command": "ruff"}, ok=False), *run("c", ok=False)])
    assert sorted((i.failures, i.label.value) for i in state.incidents.values()) == [
        (1, Label.UNCLASSIFIED.value),
        (2, Label.UNCLASSIFIED.value),
    ]


def test_a_recovery_between_failures_resets_the_count():
    facts = [*run("a", ok=False), *run("b", ok=False), *run("c", ok=True), *run("d", ok=False), *run("e", ok=False)]
    state = state_of(facts)
    assert sorted(labels(state)) == sorted([Label.RECOVERED.value, Label.UNCLASSIFIED.value])
    assert state.needs_action == []
    open_one = state.by_label(Label.UNCLASSIFIED)[0]
    assert open_one.failures == 2


def test_an_incident_id_seen_again_after_it_closed_counts_and_recovers_as_a_new_incident():
    # Ids are only unique within one log: a Codex ``item_3`` or a Claude ``model:<byte>`` of a
    # later turn (a fresh output.log) reuses the id of a closed incident of an earlier turn.
    fail = {"kind": "failure", "id": "tool:item_3", "operation": "op", "category": "tool", "summary": "x"}
    recovered = {"kind": "recovered", "id": "r1", "operation": "op", "incidents": ["tool:item_3"]}
    state = reduce(FailureState(), [fail, recovered, fail, fail, fail])
    reopened = [i for i in state.incidents.values() if i.label is not Label.RECOVERED]
    assert len(reopened) == 1, labels(state)
    assert reopened[0].failures == 3 and reopened[0].label is Label.ACTION_REQUIRED
    reduce(state, [{**recovered, "id": "r2"}])
    assert state.needs_action == [], labels(state)


def test_a_model_failure_at_the_same_byte_in_a_later_turn_is_recovered_by_its_next_model_response():
    # One collector per session; every turn has its own output.log, so byte offsets restart.
    collector = Collector()
    turn_one = fold([ModelFailure("HTTP 529", 812), ModelOk()], collector)
    turn_two = fold([ModelFailure("HTTP 529", 812), ModelOk()], collector)
    state = reduce(FailureState(), turn_one + turn_two)
    assert state.needs_action == [], labels(state)


# -- dispositions -------------------------------------------------------------------------------------


def _disposition(value: str, *targets: str, key: str = "d1") -> dict[str, Any]:
    return {"kind": "disposition", "id": key, "disposition": value, "targets": list(targets), "reason": "confined"}


@pytest.mark.parametrize(
    ("disposition", "label", "closed"),
    [
        ("expected", Label.EXPECTED, False),
        ("superseded", Label.SUPERSEDED, True),
        ("open", Label.ACTION_REQUIRED, False),
        ("recovered", Label.RECOVERED, True),
    ],
)
def test_a_disposition_labels_its_targets(disposition, label, closed):
    events = fold(run("a", ok=False))
    (incident_id,) = {e["id"] for e in events}
    state = reduce(FailureState(), [*events, _disposition(disposition, incident_id, "no-such-incident")])
    (incident,) = state.incidents.values()
    assert incident.label is label
    assert incident.disposition == disposition
    assert (incident.closed_by == "d1") is closed
    assert (incident in state.needs_action) is (label is Label.ACTION_REQUIRED)


def test_an_open_disposition_holds_through_later_failures_and_a_closed_incident_takes_no_disposition():
    collector = Collector()
    events = fold(run("a", ok=False), collector)
    incident = events[0]["id"]  # the id the collector gave the incident (its log and the call)
    assert incident == "tool:output.log:a"
    state = reduce(FailureState(), [*events, _disposition("open", incident)])
    reduce(state, fold(run("b", ok=False), collector))
    assert labels(state) == [Label.ACTION_REQUIRED.value]
    reduce(state, fold(run("c", ok=True), collector))
    assert labels(state) == [Label.RECOVERED.value]
    reduce(state, [_disposition("open", incident, key="d2")])
    assert labels(state) == [Label.RECOVERED.value]


def test_an_unknown_event_kind_is_counted_unreadable_not_fatal():
    state = reduce(FailureState(), [{"kind": "mystery"}, {}])
    assert state.unreadable == 2 and state.incidents == {} and state.records == 2


# -- incremental folds --------------------------------------------------------------------------------

STREAM: list[Fact] = [
    ToolStart("a", "Bash", TEST, CWD),
    ToolStart("p", "Read", {"file_path": "x"}, CWD),
    ToolEnd("a", True, "1 failed", offset=100),
    ModelFailure("HTTP 529", 200),
    ModelFailure("HTTP 529", 300),
    ModelOk(),
    ToolEnd("p", False),
    *run("b", ok=False),
    Gap("malformed:400", "a malformed structured record"),
    *run("c", ok=False),
    *run("d", {"command": "ruff"}, ok=False),
    *run("e", ok=True),
    *run("f", {"command": "ruff"}, ok=False),
    ModelFailure("HTTP 500", 900),
]


def test_reducing_in_two_halves_is_reducing_all_at_once():
    events = fold(STREAM)
    whole = reduce(FailureState(), events).to_json()
    for cut in range(len(events) + 1):
        halves = reduce(reduce(FailureState(), events[:cut]), events[cut:])
        assert halves.to_json() == whole, cut
    assert whole["counts"][Label.ACTION_REQUIRED.value] == 1  # the last model failure
    assert whole["counts"][Label.RECOVERED.value] == 2  # the first model failure, the test after three
    assert whole["counts"][Label.INCOMPLETE.value] == 1
    assert whole["counts"][Label.UNCLASSIFIED.value] == 1  # ruff, twice


def test_a_collector_saved_and_loaded_mid_stream_folds_as_one_uninterrupted_fold():
    whole = fold(STREAM)
    for cut in range(len(STREAM) + 1):
        first = Collector("turns/1/output.log")
        events = [e for n, f in enumerate(STREAM[:cut]) for e in first.fold(f, at=f"2026-01-01T00:00:{n:02d}Z")]
        saved = json.loads(json.dumps(first.to_json()))  # as it is kept on disk
        second = Collector.from_json(saved)
        assert second.to_json() == first.to_json()
        events += [
            e for n, f in enumerate(STREAM[cut:], start=cut) for e in second.fold(f, at=f"2026-01-01T00:00:{n:02d}Z")
        ]
        expected = [
            {
                **e,
                **{k: e[k].replace("output.log", "turns/1/output.log") for k in ("evidence", "id") if k in e},
                **(
                    {"incidents": [i.replace("output.log", "turns/1/output.log") for i in e["incidents"]]}
                    if "incidents" in e
                    else {}
                ),
            }
            for e in whole
        ]
        assert events == expected, cut


# -- the one-line account ----------------------------------------------------------------------------


def _state(**counts: int) -> FailureState:
    state = FailureState()
    for label_name, n in counts.items():
        for i in range(n):
            key = f"{label_name}-{i}"
            state.incidents[key] = Incident(key, "op", "tool", "s", label=Label[label_name])
    return state


@pytest.mark.parametrize(
    ("counts", "line"),
    [
        ({}, "No failures need action"),
        (
            {"UNCLASSIFIED": 8, "EXPECTED": 2},
            "No failures need action · 8 unclassified tool errors · 2 expected (history)",
        ),
        ({"UNCLASSIFIED": 1}, "No failures need action · 1 unclassified tool error (history)"),
        ({"RECOVERED": 1}, "No failures need action · 1 recovered (history)"),
        ({"RECOVERED": 2, "SUPERSEDED": 1}, "No failures need action · 3 recovered (history)"),
        ({"ACTION_REQUIRED": 1}, "1 failure needs action"),
        ({"ACTION_REQUIRED": 2, "RECOVERED": 1}, "2 failures need action · 1 recovered (history)"),
        ({"INCOMPLETE": 1}, "1 observation incomplete"),
        (
            {"ACTION_REQUIRED": 1, "INCOMPLETE": 2, "UNCLASSIFIED": 3},
            "1 failure needs action · 2 observations incomplete · 3 unclassified tool errors (history)",
        ),
    ],
)
def test_summary_line_wording(counts, line):
    assert summary_line(_state(**counts)) == line


def test_the_state_as_json_counts_every_label_and_what_needs_action():
    doc = state_of([*run("a", ok=False), ModelFailure("HTTP 401", 5)]).to_json()
    assert doc["needs_action"] == 1
    assert doc["counts"] == {
        "Action required": 1,
        "Unclassified failure observation": 1,
        "Expected failure": 0,
        "Observation incomplete": 0,
        "Recovered": 0,
        "Superseded": 0,
        "Dismissed": 0,
    }
    assert {i["label"] for i in doc["incidents"]} == {"Action required", "Unclassified failure observation"}
    assert doc["journal"] == {"records": 2, "unreadable": 0, "torn": False}


def test_a_secret_is_masked_before_the_summary_is_cut_and_a_lone_surrogate_is_replaced():
    from corral.domain.collector import Collector, ToolEnd, ToolStart

    secret = "sk-ant-api03-SECRETSECRETSECRET"
    collector = Collector(mask=lambda text: text.replace(secret, "[masked]"))
    collector.fold(ToolStart("c1", "bash", {"command": "x"}, "/wt"))
    (event,) = collector.fold(ToolEnd("c1", True, "x" * 150 + " " + secret + " lone \ud800 end", 7))
    assert "sk-an" not in event["summary"] and "SECRET" not in event["summary"]
    assert "\ud800" not in event["summary"]
    event["summary"].encode("utf-8")  # always encodable
