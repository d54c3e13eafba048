"""The same-cause breaker's kept interruption read from the shape earlier versions stored."""

from __future__ import annotations

import pytest

from corral.domain.breaker import Interruption

OLD: dict[str, object] = {"code": "turn-crashed", "exit_code": 137, "head": "a" * 40, "at": 1000.5}


def test_an_interruption_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    kept = Interruption.from_json(OLD)
    assert kept == Interruption("turn-crashed", 137, "a" * 40, 1000.5)
    assert kept is not None and kept.to_json() == OLD and list(kept.to_json()) == list(OLD)
    whole = Interruption.from_json({**OLD, "at": 1000})
    assert whole is not None and whole.at == 1000.0 and isinstance(whole.at, float)


def test_a_damaged_fact_reads_as_none_and_keeps_the_interruption() -> None:
    damaged = {"code": "turn-crashed", "exit_code": True, "head": 5, "at": 1000.5}
    assert Interruption.from_json(damaged) == Interruption("turn-crashed", None, None, 1000.5)
    assert Interruption.from_json({"code": "x", "at": 1.0}) == Interruption("x", None, None, 1.0)


@pytest.mark.parametrize(
    "data",
    [None, ["turn-crashed"], {**OLD, "code": 3}, {**OLD, "at": True}, {**OLD, "at": "1000"}, {"code": "x"}],
)
def test_what_is_not_an_interruption_is_none(data: object) -> None:
    assert Interruption.from_json(data) is None
