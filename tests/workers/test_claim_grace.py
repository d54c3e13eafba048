"""A turn that waited in the queue is not taken for lost the moment a worker claims it: its grace period
counts from the claim, not from when it was queued (docs/lifecycle.md#reconciler-sweeps)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.domain.status import Status
from corral.engine.placement import host_id, host_name
from corral.engine.project import Project
from corral.engine.recovery.working import reconcile_working
from corral.engine.shared_store import claimed
from tests.conftest import FakeClock
from tests.workers.conftest import Team

pytestmark = pytest.mark.slow


def test_a_claimed_turns_grace_counts_from_its_claim(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    laptop = team.laptop()
    for key in ("HOME", "CORRAL_HOME", "CORRAL_CONFIG_FILE"):
        monkeypatch.setenv(key, laptop.env()[key])
    laptop.corral("create", "Waited long", "--ref", "waited")
    laptop.json("start", "waited")  # queued now; no worker claims it for a while
    clock = FakeClock(datetime.now(UTC) + timedelta(seconds=100))  # the claim comes 100 s later
    project = Project.open(laptop.clone, clock=clock)
    try:
        grace = timedelta(seconds=float(project.config["grace_period"]))
        assert grace < timedelta(seconds=90)
        with project.store.read() as tx:
            task = tx.task_by_ref("waited")
            assert task is not None
            command = tx.current_command(task.id)
        assert command is not None and command.command_id is not None
        # This host's worker claims it (so this host's sweep judges it); its supervisor is not up yet.
        me = claimed.Me(host_id(project), host_name(project))
        assert claimed.claim(project, me, task.id, command.command_id) is not None

        def sweep() -> bool:
            with project.store.read() as tx:
                [head] = [h for h in tx.task_heads([Status.WORKING]) if h.id == task.id]
            return reconcile_working(project, head, grace)

        clock.advance(1)  # 101 s after it was queued, 1 s after its claim
        assert not sweep()
        with project.store.read() as tx:
            assert tx.get_task(task.id).status is Status.WORKING  # not taken for lost
        clock.advance(grace.total_seconds())  # past the grace from the claim, and still no supervisor
        assert sweep()
        with project.store.read() as tx:
            assert tx.get_task(task.id).status is Status.INTERRUPTED
    finally:
        project.close()
