"""A lease's turn plan and a task's session-carry note read from the shapes earlier versions stored."""

from __future__ import annotations

import msgspec
import pytest

from corral.domain.team import HARNESS_CARRY, SessionCarry, TurnPlan

PLAN: dict[str, object] = {
    "kind": "resume",
    "body": "go on",
    "target": "main",
    "delivered": ["f-1"],
    "sync_before_work": True,
    "announce_merge": False,
    "read_only": False,
    "resume_after_crash": True,
    "pending": ["f-2"],
    "reverts": [["a.txt", None], ["b.txt", "c" * 40]],
}


def test_a_plan_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    plan = TurnPlan.from_json(PLAN)
    assert plan.reverts == (("a.txt", None), ("b.txt", "c" * 40))
    assert (plan.delivered, plan.pending, plan.announce_merge) == (("f-1",), ("f-2",), False)
    assert plan.to_json() == PLAN and list(plan.to_json()) == list(PLAN)
    assert TurnPlan.from_json({"kind": "first", "body": "b", "target": "main"}) == TurnPlan("first", "b", "main")


@pytest.mark.parametrize(
    "bad", [{"kind": None}, {"body": 3}, {"reverts": [["a.txt"]]}, {"read_only": "yes"}, {"pending": "f-2"}]
)
def test_a_plan_of_the_wrong_shape_is_refused_naming_the_field(bad: dict[str, object]) -> None:
    with pytest.raises(msgspec.ValidationError) as refused:
        TurnPlan.from_json({**PLAN, **bad})
    assert next(iter(bad)) in str(refused.value)
    with pytest.raises(ValueError):
        TurnPlan.from_json({k: v for k, v in PLAN.items() if k != "target"})


def test_a_carry_note_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    old = {"made_on": "laptop", "host": "box", "carried": False, "why": "no transcript"}
    carry = SessionCarry.of({HARNESS_CARRY: old})
    assert carry == SessionCarry("laptop", "box", False, "no transcript")
    assert carry is not None and carry.to_json() == old and list(carry.to_json()) == list(old)


def test_a_damaged_carry_note_keeps_what_is_sound() -> None:
    assert SessionCarry.of({HARNESS_CARRY: {"made_on": 1, "host": "box", "carried": True, "why": ["x"]}}) == (
        SessionCarry(None, "box", True)
    )
    for bad in ({"host": 3, "carried": True}, {"host": "box", "carried": "yes"}, {"host": "box"}, "box"):
        assert SessionCarry.of({HARNESS_CARRY: bad}) is None
    assert SessionCarry.of({}) is None
