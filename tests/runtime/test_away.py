"""What a host knows of a turn another host holds (``liveness.away``): what that host shipped, judged by who
holds the lease; a turn run on its own host is never read as lost here (docs/workers.md#turns-run-on-your-own-host)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.domain.status import Status
from corral.domain.substate import Live, substate
from corral.domain.team import LOCAL_PLAN, Lease, LeaseState, Worker, WorkerState
from corral.engine.runtime.liveness import REPORT_FRESH, away, live_to_json

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SHIPPED = {"live": live_to_json(Live(alive=True, phase="work", kind="start", progress="running migration 3/7"))}


def _sub(live: Live) -> str | None:
    return substate(Status.WORKING, live)


def _local(command_id: str = "cmd-1") -> Lease:
    return Lease("t1", command_id, 4, LeaseState.LOCAL, dict(LOCAL_PLAN), worker_id="laptop-a-0f0f", host="laptop-a")


def test_a_local_turn_reads_as_its_host_shipped_it_while_its_host_reports_it() -> None:
    assert _sub(away(_local(), ("cmd-1", SHIPPED, NOW - timedelta(seconds=5)), {}, NOW)) == (
        "agent: running migration 3/7"
    )


def test_a_local_turn_its_host_has_not_reported_lately_is_unreported_never_lost() -> None:
    stale = NOW - REPORT_FRESH - timedelta(seconds=1)
    assert _sub(away(_local(), ("cmd-1", SHIPPED, stale), {}, NOW)) == "unreported"
    assert _sub(away(_local(), None, {}, NOW)) == "unreported"  # nothing shipped yet
    assert _sub(away(_local("cmd-2"), ("cmd-1", SHIPPED, NOW), {}, NOW)) == "unreported"  # an earlier turn's facts


def test_a_workers_turn_is_alive_while_its_worker_holds_the_lease() -> None:
    claimed = Lease("t1", "cmd-1", 2, LeaseState.CLAIMED, {"kind": "start"}, worker_id="w-a", host="build-1")
    beat = Worker("w-a", "build-1", 41, WorkerState.RUNNING, 30.0, NOW - timedelta(hours=1), NOW - timedelta(seconds=5))
    gone = Worker("w-a", "build-1", 41, WorkerState.RUNNING, 30.0, NOW - timedelta(hours=1), NOW - timedelta(minutes=5))
    shipped = ("cmd-1", SHIPPED, NOW - timedelta(minutes=5))
    assert _sub(away(claimed, shipped, {"w-a": beat}, NOW)) == "agent: running migration 3/7"
    assert _sub(away(claimed, shipped, {"w-a": gone}, NOW)) == "not-alive"  # its lease runs out: the lease sweep's
    queued = Lease("t1", "cmd-1", 1, LeaseState.QUEUED, {"kind": "start"})
    assert _sub(away(queued, None, {}, NOW)) == "queued"
