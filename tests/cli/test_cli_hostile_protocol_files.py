"""Nothing hangs on a protocol file: a FIFO or a huge file where status.json belongs leaves
list and show answering at once, and the task reads as what it is."""

from __future__ import annotations

import os

from corral.domain.actors import Actor
from corral.engine.operations import tasks, turns
from corral.engine.project import Project
from tests.failures.conftest import kill_supervisor
from tests.turns.conftest import reopen

SLOW = [{"init": True}, {"sleep": 60}]


def _working_task(proj: Project, ref: str):  # type: ignore[no-untyped-def]
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    return task


def test_a_fifo_and_a_huge_file_where_status_json_belongs_never_hang_a_read(proj, agent, corral, monkeypatch):
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "3600")  # the turns stay working: only the reads are on trial
    proj = reopen(proj)
    agent.script(SLOW, SLOW)
    fifo_task = _working_task(proj, "fifo")
    huge_task = _working_task(proj, "huge")
    for task in (fifo_task, huge_task):
        kill_supervisor(proj, task)  # no heartbeat will put a good status.json back
    fifo = proj.paths.protocol_dir(fifo_task.id) / "status.json"
    fifo.unlink()
    os.mkfifo(fifo)  # nobody will ever write it: a blocking open waits for ever
    huge = proj.paths.protocol_dir(huge_task.id) / "status.json"
    huge.unlink()
    with huge.open("wb") as fh:
        fh.truncate(1024**3)  # 1 GB (sparse): reading it whole would take seconds and gigabytes
    listed = corral("list", "--json", timeout=30)
    assert listed.returncode == 0, listed.stderr
    rows = {r["ref"]: r for r in listed.json()["tasks"]}
    assert rows["fifo"]["status"] == "working" and rows["huge"]["status"] == "working"
    for ref in ("fifo", "huge"):
        shown = corral("show", ref, "--json", timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert shown.json()["task"]["substate"] == "not-alive"  # an unusable status file is no live supervisor
    proj.close()
