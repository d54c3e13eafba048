"""When incidents are told: the grace while a turn runs, once each, and the end of the turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from corral.domain.attention import GRACE_SECONDS, due
from corral.domain.clock import rfc3339
from corral.domain.incidents import FailureState, reduce

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return rfc3339(T0 + timedelta(seconds=seconds)) or ""


def tool_failure(op: str, seconds: float) -> dict[str, Any]:
    return {
        "kind": "failure",
        "id": f"tool:{op}",
        "operation": op,
        "category": "tool",
        "summary": f"{op} failed",
        "at": at(seconds),
    }


def model_failure(seconds: float) -> dict[str, Any]:
    return {
        "kind": "failure",
        "id": "model:1",
        "operation": "model-call",
        "category": "model",
        "summary": "HTTP 529",
        "at": at(seconds),
    }


def state(*events: dict[str, Any]) -> FailureState:
    return reduce(FailureState(), events)


def test_a_single_tool_error_wakes_nobody_while_the_turn_runs() -> None:
    s = state(tool_failure("pytest", 0))
    assert due(s, set(), T0 + timedelta(hours=5)) is None


def test_a_non_tool_failure_is_told_after_the_grace_and_only_once() -> None:
    s = state(model_failure(0))
    assert due(s, set(), T0 + timedelta(seconds=GRACE_SECONDS - 1)) is None
    notice = due(s, set(), T0 + timedelta(seconds=GRACE_SECONDS))
    assert notice is not None and notice.kind == "attention" and [i.id for i in notice.incidents] == ["model:1"]
    assert due(s, {"model:1", notice.key}, T0 + timedelta(hours=1)) is None


def test_a_thrice_failed_operation_counts_its_grace_from_the_third_failure() -> None:
    s = state(tool_failure("pytest", 0), tool_failure("pytest", 100), tool_failure("pytest", 200))
    assert due(s, set(), T0 + timedelta(seconds=230)) is None  # third failure at 200 s: 30 s of grace so far
    notice = due(s, set(), T0 + timedelta(seconds=260))
    assert notice is not None and notice.incidents[0].failures == 3


def test_incomplete_observations_wait_for_the_end_of_the_turn() -> None:
    s = state({"kind": "incomplete", "id": "incomplete:oversized:9", "operation": "evidence", "summary": "too big"})
    assert due(s, set(), T0 + timedelta(hours=1)) is None
    end = due(s, set(), T0 + timedelta(hours=1), ended="completion:2")
    assert end is not None and [i.label.value for i in end.incidents] == ["Observation incomplete"]


def test_the_end_of_the_turn_tells_what_is_open_once_counting_what_was_told() -> None:
    s = state(
        model_failure(0),
        tool_failure("pytest", 1),
        tool_failure("lint", 2),
        {"kind": "recovered", "id": "r", "operation": "lint", "incidents": ["tool:lint"], "at": at(3)},
    )
    first = due(s, set(), T0 + timedelta(seconds=61))
    assert first is not None
    told = {first.key, *(i.id for i in first.incidents)}
    end = due(s, told, T0 + timedelta(seconds=90), ended="completion:4")
    assert end is not None and end.kind == "completion" and end.key == "completion:4"
    assert end.incidents == () and end.unclassified == 1 and end.already_told == 1  # lint recovered: not told
    assert "1 unclassified tool error" in end.line() and "1 told before" in end.line()
    assert due(s, told | {end.key}, T0 + timedelta(seconds=91), ended="completion:4") is None
    lost = due(s, told, T0, ended="lost:4")
    assert lost is not None and lost.kind == "lost" and lost.line().startswith("turn lost with")


def test_a_turn_with_nothing_open_ends_without_a_notice() -> None:
    recovered = {"kind": "recovered", "id": "r", "operation": "pytest", "incidents": ["tool:pytest"], "at": at(1)}
    s = state(tool_failure("pytest", 0), recovered)
    assert due(s, set(), T0, ended="completion:2") is None
