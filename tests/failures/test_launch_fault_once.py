"""A launch that fails is one fault: the fault handler runs once, and what it writes is written once.

The fault is injected where ``launch.launch`` writes the command (the crash point
``launch.command-written`` raising, as a fault of corral's own would), in a fresh ``corral start``
process whose crash-point trace (``CORRAL_CRASH_TRACE``) says how often the handler ran.
"""

from __future__ import annotations

import json
from pathlib import Path

from corral.domain.actors import Role
from corral.domain.status import Status
from tests.failures.conftest import new_task


def test_a_launch_that_fails_records_one_fault(fproj, agent, corral, tmp_path: Path) -> None:
    task = new_task(fproj)
    trace = tmp_path / "trace"
    env = {
        "CORRAL_CRASH_AT": "launch.command-written",
        "CORRAL_CRASH_HOW": "raise",
        "CORRAL_CRASH_TRACE": str(trace),
    }
    result = corral.process("start", task.ref, env=env)  # crash points are read when corral starts
    assert result.returncode != 0 and "crash point launch.command-written reached" in result.stderr
    assert "Traceback" not in result.stderr

    points = trace.read_text().split()
    assert "launch.command-written#1" in points
    assert [p for p in points if p.startswith("fault.")] == ["fault.handling#1"]

    with fproj.store.read() as tx:
        after = tx.get_task(task.id)
        changes = tx.status_changes(task.id)
        faults = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
    assert after is not None and after.status is Status.INTERRUPTED
    assert after.resting_cause is not None and after.resting_cause.code == "internal-fault"
    assert [c.to_status for c in changes] == [Status.BACKLOG, Status.WORKING, Status.INTERRUPTED]
    assert [(t.kind, t.failure.code if t.failure else None) for t in faults] == [("error", "internal-fault")]
    kept = [json.loads(p.read_text()) for p in fproj.paths.diagnostics_dir(task.id).rglob("*.json")]
    assert [d["kind"] for d in kept] == ["internal-fault"]
    assert agent.calls() == []
