"""A sweep that may fail without stopping the pass (``reconcile.tolerated``): its failure is one line the pass
reports and its stand-in result is used; a caller with no problems list gets the failure itself."""

from __future__ import annotations

from typing import Any

import pytest

from corral.engine.placement import LocalPlacement
from corral.engine.project import Project
from corral.engine.recovery.reconcile import sweep_working, tolerated
from corral.engine.shared_store.team_placement import SharedPlacement


def _broken() -> list[str]:
    raise OSError("disk gone")


def test_a_failing_sweep_is_one_reported_line_and_its_stand_in_result() -> None:
    problems: list[str] = []
    assert tolerated(problems, "shipped files", _broken, ["nothing"]) == ["nothing"]
    assert problems == ["shipped files: OSError: disk gone"]
    assert tolerated(problems, "leases", lambda: ["t1"], []) == ["t1"]  # a sweep that works is its own result
    assert problems == ["shipped files: OSError: disk gone"]


def test_a_caller_with_no_problems_list_gets_the_failure() -> None:
    with pytest.raises(OSError, match="disk gone"):
        tolerated(None, "shipped files", _broken, [])


def test_the_shared_sweeps_run_only_with_the_shared_placement(project: Any) -> None:
    """The lease rows are unreadable: a pass of the shared placement reports it and goes on; the local one
    never reads them."""
    with project.store.write() as tx:
        tx._db.execute("DROP TABLE leases")
    local = Project.open(project.repo, clock=project.clock, placement=LocalPlacement(), store=project.store)
    problems: list[str] = []
    assert sweep_working(local, problems=problems) == []
    assert problems == []
    shared = SharedPlacement("postgresql://shared")  # never reached: the records are the SQLite store's
    team = Project.open(project.repo, clock=project.clock, placement=shared, store=project.store)
    assert sweep_working(team, problems=problems) == []
    assert [p.split(":")[0] for p in problems] == ["leases", "turns held elsewhere", "shipped files"]
    with pytest.raises(Exception, match="leases"):
        sweep_working(team)  # no problems list: the first failure is the caller's
