"""The ref guard's report read from the shape earlier versions stored with a turn: what it refuses and tolerates."""

from __future__ import annotations

import pytest

from corral.engine.runtime.ref_guard import RefGuard, RefMove

MOVE: dict[str, object] = {
    "ref": "refs/heads/main",
    "before": "a" * 40,
    "after": "b" * 40,
    "by": "hook",
    "kept": "refs/corral/kept/corral/t-1/1-refs/heads/main",
    "restored": True,
    "error": None,
}
OLD: dict[str, object] = {"moves": [MOVE], "others": 2, "hook": True, "error": None}


def test_a_report_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    guard = RefGuard.from_json(OLD)
    assert guard.moves == (RefMove("refs/heads/main", "a" * 40, "b" * 40, "hook", MOVE["kept"], True),)  # type: ignore[arg-type]
    assert (guard.others, guard.hook, guard.error, guard.objects, guard.strays) == (2, True, None, None, None)
    assert guard.to_json() == OLD
    assert list(guard.to_json()) == list(OLD)
    assert list(guard.to_json()["moves"][0]) == list(MOVE)


def test_a_code_and_nested_reports_are_written_only_when_set() -> None:
    doc = {**OLD, "moves": [{**MOVE, "code": "branch-symref"}], "objects": {"kept": 1}, "strays": {"locks": 1}}
    guard = RefGuard.from_json(doc)
    assert guard.moves[0].code == "branch-symref"
    assert guard.to_json() == doc


def test_the_stored_leniencies_are_kept() -> None:
    sparse = RefGuard.from_json({"moves": [{"ref": "refs/heads/x", "by": "worktree-commits", "restored": "yes"}]})
    assert sparse.moves == (RefMove("refs/heads/x", None, None, "worktree-commits", None, False),)
    damaged = RefGuard.from_json(
        {"moves": None, "others": True, "hook": None, "error": 5, "objects": [1], "strays": "x"}
    )
    assert damaged == RefGuard()
    assert RefGuard.from_json({"hook": False}).hook is False


@pytest.mark.parametrize(
    "moves",
    [
        "refs/heads/main",
        ["refs/heads/main"],
        [{**MOVE, "ref": 3}],
        [{**MOVE, "by": None}],
        [{k: v for k, v in MOVE.items() if k != "ref"}],
        [{**MOVE, "before": 7}],
        [{**MOVE, "code": ["x"]}],
    ],
)
def test_a_move_that_is_not_one_refuses_the_report(moves: object) -> None:
    with pytest.raises(ValueError):
        RefGuard.from_json({**OLD, "moves": moves})
