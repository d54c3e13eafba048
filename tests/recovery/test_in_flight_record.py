"""The accept's in-flight record read from the shape earlier versions stored, and its tolerance of damage."""

from __future__ import annotations

from corral.engine.recovery.in_flight import InFlight

OLD = {
    "target": "main",
    "old": "a" * 40,
    "new": "b" * 40,
    "destination": "/repo",
    "stash_message": "corral: accept t-1",
}


def test_a_record_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    flight = InFlight.from_json(OLD)
    assert flight == InFlight("main", "a" * 40, "b" * 40, "/repo", "corral: accept t-1")
    assert flight.to_json() == OLD
    assert list(flight.to_json()) == list(OLD)


def test_an_absent_destination_is_written_as_null() -> None:
    doc = InFlight("main", "a" * 40, "b" * 40, None, None).to_json()
    assert doc == {**OLD, "destination": None, "stash_message": None}


def test_a_damaged_optional_field_reads_as_none_and_keeps_the_record() -> None:
    flight = InFlight.from_json({**OLD, "destination": 7, "stash_message": ["x"]})
    assert flight == InFlight("main", "a" * 40, "b" * 40, None, None)
    assert InFlight.from_json({"target": "main", "old": "a", "new": "b"}) == InFlight("main", "a", "b")


def test_a_record_without_its_tips_is_none() -> None:
    assert InFlight.from_json({**OLD, "new": 3}) is None
    assert InFlight.from_json({k: v for k, v in OLD.items() if k != "old"}) is None
    assert InFlight.from_json(["main"]) is None
    assert InFlight.from_json(None) is None
