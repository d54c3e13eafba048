"""The stray-ref report read from the shape earlier versions stored with a turn, and its tolerance of damage."""

from __future__ import annotations

from corral.engine.runtime.stray_report import Found, StrayReport

SOUND = {"kind": "ref", "name": "refs/heads/x", "value": "a" * 40, "removed": False, "why": "checked out"}
OLD: dict[str, object] = {
    "locks": 1,
    "refs": 2,
    "symrefs": 0,
    "broken": 0,
    "left": 1,
    "items": [
        SOUND,
        {"kind": "lock", "name": "refs/heads/y.lock", "value": None, "removed": True, "why": None},
    ],
    "task_refs": ["refs/heads/corral/t-1"],
    "error": None,
}


def test_a_report_in_the_stored_shape_reads_and_writes_back_the_same() -> None:
    report = StrayReport.from_json(OLD)
    assert report.items[0] == Found("ref", "refs/heads/x", "a" * 40, False, "checked out")
    assert report.items[1] == Found("lock", "refs/heads/y.lock", None, True)
    assert (report.locks, report.refs, report.left, report.task_refs) == (1, 2, 1, ("refs/heads/corral/t-1",))
    assert report.to_json() == OLD
    assert list(report.to_json()) == list(OLD)
    assert list(report.to_json()["items"][0]) == ["kind", "name", "value", "removed", "why"]


def test_a_damaged_report_keeps_what_is_sound() -> None:
    damaged = {
        **OLD,
        "locks": -3,
        "refs": True,
        "symrefs": "2",
        "items": [
            "not an object",
            {"kind": 5, "name": "", "value": 7, "removed": 1, "why": ["x"]},
            SOUND,
        ],
        "task_refs": ["refs/heads/corral/t-1", 9],
        "error": {"why": "x"},
    }
    report = StrayReport.from_json(damaged)
    assert (report.locks, report.refs, report.symrefs, report.left) == (0, 0, 0, 1)
    assert report.items == (Found("?", "?", None, False, None), StrayReport.from_json(OLD).items[0])
    assert report.task_refs == ("refs/heads/corral/t-1",)
    assert report.error is None


def test_a_report_of_wrong_containers_reads_as_empty() -> None:
    assert StrayReport.from_json({"items": "x", "task_refs": {"a": 1}, "left": 2}) == StrayReport(left=2)
    assert StrayReport.from_json({}) == StrayReport()
