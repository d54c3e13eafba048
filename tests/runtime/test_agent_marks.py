"""The agent's tool-call bookkeeping: wait markers, persisted wait intervals, the progress line.

Markers carry their writer's pid and start time: a writer killed with SIGKILL leaves a marker
that reads as nothing. Intervals are a start line and an end line, folded; an end that never
came reads ``ended_at`` None. A wait that cannot be recorded still waits; progress is capped,
collapsed, escaped, and gone when a new command is written.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.domain.actors import Actor, Role
from corral.domain.agent_tools import PROGRESS_CAP
from corral.domain.status import Status
from corral.domain.substate import Live, Waiting, substate
from corral.engine.operations.launch import clear_protocol
from corral.engine.project import Project
from corral.engine.read import projection
from corral.engine.runtime import agent_marks, liveness, progress_line, wait_intervals, wait_markers
from corral.engine.runtime import protocol as proto
from corral.store import NewTask
from tests.conftest import FakeClock


def _task(project: Project, ref: str, *, working: bool = True, parent_id: str | None = None) -> Any:
    with project.store.write() as tx:
        task = tx.insert_task(
            NewTask(ref=ref, goal=f"Goal of {ref}", target_branch="main", parent_id=parent_id), Actor.HUMAN
        )
        if working:
            tx.insert_session(task.id, branch=f"corral/{ref}", base_commit="0" * 40)
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        found = tx.get_task(task.id)
    protocol_dir = project.paths.protocol_dir(task.id)
    protocol_dir.mkdir(parents=True, exist_ok=True)
    if working:  # a supervisor alive in its work phase: this very process
        proto.write(protocol_dir, proto.SupervisorStatus(command_id="c", pid=os.getpid(), phase="work"), durable=False)
    return found


def _marker(project: Project, task_id: str) -> dict[str, Any] | None:
    path = project.paths.protocol_dir(task_id) / wait_markers.WAITING
    return json.loads(path.read_text()) if path.exists() else None


def _lines(project: Project) -> list[dict[str, Any]]:
    path = wait_intervals.intervals_file(project)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- wait markers ---------------------------------------------------------------------------


def test_a_wait_marks_its_targets_and_clears_on_settle(project: Project, clock: FakeClock) -> None:
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    with wait_markers.track_wait(project, parent.id, ["fix-foo"], 2) as settle:
        doc = _marker(project, parent.id)
        assert doc is not None and doc["pid"] == os.getpid() and doc["pid_start"] is not None
        assert [w["target"] for w in doc["waits"]] == ["fix-foo"]
        clock.advance(130)
        assert [(w.target, w.since) for w in wait_markers.active_waits(protocol_dir)] == [
            ("fix-foo", clock() - timedelta(seconds=130))
        ]
        live = liveness.live_facts(project, parent)
        assert live is not None and live.waits == (Waiting("fix-foo", 130.0),)
        assert substate(Status.WORKING, live) == "waiting on fix-foo (2m10s)"
        settle("rested")
    assert _marker(project, parent.id) is None
    assert wait_markers.active_waits(protocol_dir) == []
    after = liveness.live_facts(project, parent)
    assert after is not None and substate(Status.WORKING, after) == "agent"


def test_two_concurrent_waits_of_one_caller_both_appear(project: Project) -> None:
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    entered, release = threading.Barrier(3), threading.Event()

    def wait_on(target: str) -> None:
        with wait_markers.track_wait(project, parent.id, [target], 2) as settle:
            entered.wait(5)
            release.wait(5)
            settle("rested")

    threads = [threading.Thread(target=wait_on, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    entered.wait(5)
    try:
        assert sorted(w.target for w in wait_markers.active_waits(protocol_dir)) == ["a", "b"]
    finally:
        release.set()
        for t in threads:
            t.join(5)
    assert wait_markers.active_waits(protocol_dir) == []


def test_a_cancelled_call_still_clears_and_records_cancelled(project: Project) -> None:
    parent = _task(project, "parent")

    async def call() -> None:
        with wait_markers.track_wait(project, parent.id, ["sub"], 2):
            await asyncio.sleep(30)  # the client disconnects: the call is cancelled

    async def main() -> None:
        job = asyncio.ensure_future(call())
        await asyncio.sleep(0.05)
        assert _marker(project, parent.id) is not None
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(main())
    assert _marker(project, parent.id) is None
    (only,) = wait_intervals.intervals(project, parent.id)
    assert only.outcome == "cancelled" and only.ended_at is not None


def test_an_error_in_the_body_propagates_and_records_error(project: Project) -> None:
    parent = _task(project, "parent")
    with pytest.raises(RuntimeError, match="boom"), wait_markers.track_wait(project, parent.id, ["sub"], 2):
        raise RuntimeError("boom")
    assert _marker(project, parent.id) is None
    assert [i.outcome for i in wait_intervals.intervals(project, parent.id)] == ["error"]


def test_consecutive_calls_on_one_target_read_as_one_stretch(project: Project, clock: FakeClock) -> None:
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    with wait_markers.track_wait(project, parent.id, ["sub"], 2) as settle:
        clock.advance(240)
        settle("timeout")  # the call's bound ran out: the agent calls again
    clock.advance(2)
    with wait_markers.track_wait(project, parent.id, ["sub"], 2) as settle:
        clock.advance(10)
        live = liveness.live_facts(project, parent)
        assert live is not None and live.waits == (Waiting("sub", 252.0),)
        settle("rested")
    clock.advance(wait_markers.CONTINUE_SECONDS + 1)
    with wait_markers.track_wait(project, parent.id, ["sub"], 2):  # after a rest the stretch starts anew
        assert [w.since for w in wait_markers.active_waits(protocol_dir)] == [clock()]


def _writer_process(project: Project, task_id: str, what: str) -> subprocess.Popen[bytes]:
    """A real process that marks a wait (or posts progress) and then sleeps, holding it."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from corral.engine.project import Project
        from corral.engine.runtime import progress_line, wait_markers
        project = Project.open(Path({str(project.paths.repo)!r}))
        if {what!r} == "wait":
            ctx = wait_markers.track_wait(project, {task_id!r}, ["sub"], 2)
            ctx.__enter__()
        else:
            progress_line.post_progress(project, {task_id!r}, "running migration 3/7")
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=os.environ.copy())
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_a_marker_whose_writer_was_killed_reads_no_waits_and_no_progress(project: Project) -> None:
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    waiter = _writer_process(project, parent.id, "wait")
    poster = _writer_process(project, parent.id, "progress")
    try:
        assert [w.target for w in wait_markers.active_waits(protocol_dir)] == ["sub"]
        assert progress_line.progress(protocol_dir) == "running migration 3/7"
        live = liveness.live_facts(project, parent)
        assert live is not None and substate(Status.WORKING, live) == "waiting on sub (0s) · running migration 3/7"
    finally:
        for proc in (waiter, poster):
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
    assert (protocol_dir / wait_markers.WAITING).exists() and (protocol_dir / proto.PROGRESS).exists()  # left behind
    assert wait_markers.active_waits(protocol_dir) == []
    assert progress_line.progress(protocol_dir) is None
    live = liveness.live_facts(project, parent)
    assert live is not None and substate(Status.WORKING, live) == "agent"  # degrades, never lies
    (open_one,) = wait_intervals.intervals(project, parent.id)  # died mid-wait
    assert open_one.ended_at is None and open_one.outcome is None
    assert open_one.to_json()["ended_at"] is None and open_one.to_json()["outcome"] is None


def test_a_pid_now_held_by_another_process_is_not_believed(project: Project) -> None:
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    with wait_markers.track_wait(project, parent.id, ["sub"], 2):
        doc = _marker(project, parent.id)
        assert doc is not None
        for w in doc["waits"]:
            w["pid_start"] = w["pid_start"] + 1  # same pid, another start: another process
        proto.write_json(protocol_dir / wait_markers.WAITING, doc)
        assert wait_markers.active_waits(protocol_dir) == []


def test_a_dead_run_with_a_marker_stays_not_alive(project: Project) -> None:
    parent = _task(project, "parent")
    dead = subprocess.Popen(["true"])
    dead.wait()
    protocol_dir = project.paths.protocol_dir(parent.id)
    proto.write(protocol_dir, proto.SupervisorStatus(command_id="c", pid=dead.pid, phase="work"), durable=False)
    with wait_markers.track_wait(project, parent.id, ["sub"], 2):
        live = liveness.live_facts(project, parent)
        assert live is not None and substate(Status.WORKING, live) == "not-alive"


def test_a_wait_whose_bookkeeping_raises_still_waits(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root ignores directory modes: the same guarantee, with the writes themselves failing."""
    parent = _task(project, "parent")

    def refuse(*_a: object, **_k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(wait_intervals, "append", refuse)
    monkeypatch.setattr(proto, "write_json", refuse)
    ran = False
    with wait_markers.track_wait(project, parent.id, ["sub"], 2) as settle:
        ran = True
        settle("rested")
    assert ran
    assert progress_line.post_progress(project, parent.id, "hello").message == "hello"
    assert wait_intervals.intervals(project, parent.id) == []
    assert not (project.paths.protocol_dir(parent.id) / proto.PROGRESS).exists()


def test_a_wait_that_cannot_be_recorded_still_waits(project: Project) -> None:
    """Nothing can be written where the bookkeeping goes (directories in the files' places, which
    no mode bit lets even root write through): the wait still waits, the post still answers."""
    parent = _task(project, "parent")
    protocol_dir = project.paths.protocol_dir(parent.id)
    waits_dir = wait_intervals.intervals_file(project).parent
    waits_dir.parent.mkdir(parents=True, exist_ok=True)
    waits_dir.write_text("not a directory")  # waits/intervals.jsonl cannot be made
    for name in (wait_markers.WAITING_LOCK, wait_markers.WAITING, proto.PROGRESS):
        (protocol_dir / name).mkdir()
    ran = False
    with wait_markers.track_wait(project, parent.id, ["sub"], None) as settle:
        ran = True
        settle("rested")
    assert ran
    assert progress_line.post_progress(project, parent.id, "hello") == progress_line.Posted("hello", False)
    assert wait_intervals.intervals(project, parent.id) == []
    assert wait_markers.active_waits(protocol_dir) == [] and progress_line.progress(protocol_dir) is None
    live = liveness.live_facts(project, parent)
    assert live is not None and substate(Status.WORKING, live) == "agent"


def test_clear_and_clear_owned(project: Project) -> None:
    mine, other = _task(project, "mine"), _task(project, "other")
    with wait_markers.track_wait(project, mine.id, ["a"], 2), wait_markers.track_wait(project, other.id, ["b"], 2):
        progress_line.post_progress(project, mine.id, "step 1")
        progress_line.post_progress(project, other.id, "step 2")
        agent_marks.clear(project.paths.protocol_dir(other.id))
        assert wait_markers.active_waits(project.paths.protocol_dir(other.id)) == []
        assert progress_line.progress(project.paths.protocol_dir(other.id)) is None
        agent_marks.clear_owned(project, os.getpid() + 100_000)  # another process's: nothing of ours goes
        assert [w.target for w in wait_markers.active_waits(project.paths.protocol_dir(mine.id))] == ["a"]
        agent_marks.clear_owned(project, os.getpid())
        assert _marker(project, mine.id) is None
        assert progress_line.progress(project.paths.protocol_dir(mine.id)) is None


# -- persisted intervals --------------------------------------------------------------------


def test_intervals_are_a_start_and_an_end_line_folded_on_read(project: Project, clock: FakeClock) -> None:
    parent = _task(project, "parent")
    other = _task(project, "other")
    with wait_markers.track_wait(project, parent.id, ["a", "b", "a"], 7) as settle:
        clock.advance(30)
        settle("timeout")
    with wait_markers.track_wait(project, other.id, ["c"], None) as settle:
        settle("bogus")  # not an outcome: recorded as an error
    lines = _lines(project)
    assert [(line["event"], line["task_id"]) for line in lines] == [
        ("start", parent.id),
        ("end", parent.id),
        ("start", other.id),
        ("end", other.id),
    ]
    (one,) = wait_intervals.intervals(project, parent.id)
    assert one.targets == ("a", "b") and one.turn_sequence == 7 and one.outcome == "timeout"
    assert (one.ended_at - one.started_at).total_seconds() == 30  # type: ignore[operator]
    doc = one.to_json()
    assert set(doc) == {"id", "task_id", "targets", "turn_sequence", "started_at", "ended_at", "outcome"}
    (theirs,) = wait_intervals.intervals(project, other.id)
    assert theirs.outcome == "error"
    assert theirs.turn_sequence == 1  # best-effort: the next unused sequence (no turn yet)


def test_a_torn_line_is_skipped_not_the_file(project: Project) -> None:
    parent = _task(project, "parent")
    with wait_markers.track_wait(project, parent.id, ["a"], 2) as settle:
        settle("rested")
    path = wait_intervals.intervals_file(project)
    with path.open("a") as fh:
        fh.write('{"event":"start","task_id":"' + parent.id + '","id":"x"\n')  # a crash mid-line
    assert [i.outcome for i in wait_intervals.intervals(project, parent.id)] == ["rested"]


def test_waited_seconds_count_overlaps_once_and_bound_an_open_interval(project: Project, clock: FakeClock) -> None:
    t0 = clock()
    found = [
        wait_intervals.WaitInterval(
            "1", "t", ("a",), 2, t0 + timedelta(seconds=10), t0 + timedelta(seconds=40), "rested"
        ),
        wait_intervals.WaitInterval(
            "2", "t", ("b",), 2, t0 + timedelta(seconds=30), t0 + timedelta(seconds=50), "rested"
        ),
        wait_intervals.WaitInterval("3", "t", ("c",), 2, t0 + timedelta(seconds=90)),  # died mid-wait
        wait_intervals.WaitInterval(
            "4", "t", ("d",), 1, t0 - timedelta(seconds=90), t0 - timedelta(seconds=5), "rested"
        ),
    ]
    assert wait_intervals.waited_seconds(found, t0, t0 + timedelta(seconds=100)) == 40 + 10
    assert wait_intervals.waited_seconds([], t0, t0 + timedelta(seconds=100)) == 0


def test_show_reports_agent_and_waited_time_per_turn_and_children_with_substates(
    project: Project, clock: FakeClock
) -> None:
    parent = _task(project, "parent")
    child = _task(project, "child", parent_id=parent.id)
    _task(project, "idle-child", working=False, parent_id=parent.id)
    start = clock()
    with wait_markers.track_wait(project, parent.id, ["child"], 2) as settle:
        clock.advance(100)
        settle("rested")
    clock.advance(20)
    with project.store.write() as tx:
        tx.add_turn(parent.id, role=Role.AGENT, kind="start", content="done", started_at=start, ended_at=clock())
    with project.store.read() as tx:
        task = tx.get_task(parent.id)
        assert task is not None
        doc = projection.show(
            tx,
            task,
            liveness.live_facts(project, task),
            intervals=wait_intervals.intervals(project, parent.id),
            live_of=lambda t: liveness.live_facts(project, t),
        )
        bare = projection.show(tx, task)
    (turn,) = [t for t in doc["turns"] if t["role"] == "agent"]
    assert (turn["agent_s"], turn["waited_s"]) == (20.0, 100.0)
    # created in the same instant (a fake clock): the order between them is the ids'
    assert sorted(doc["children"], key=lambda c: c["ref"]) == [
        {"ref": "child", "status": "working", "substate": "agent"},
        {"ref": "idle-child", "status": "backlog", "substate": None},
    ]
    (plain,) = [t for t in bare["turns"] if t["role"] == "agent"]
    assert (plain["agent_s"], plain["waited_s"]) == (120.0, None)  # waits not read: not claimed
    assert [c["substate"] for c in bare["children"]] == [None, None]
    assert child.id != parent.id


def test_list_rows_as_a_tree() -> None:
    rows: list[dict[str, Any]] = [
        {"ref": "a", "parent": None},
        {"ref": "b", "parent": None},
        {"ref": "a1", "parent": "a"},
        {"ref": "a1x", "parent": "a1"},
        {"ref": "orphan", "parent": "not-listed"},
        {"ref": "a2", "parent": "a"},
        {"ref": "loop1", "parent": "loop2"},
        {"ref": "loop2", "parent": "loop1"},
    ]
    tree = projection.as_tree(rows)
    assert [(r["ref"], r["depth"]) for r in tree] == [
        ("a", 0),
        ("a1", 1),
        ("a1x", 2),
        ("a2", 1),
        ("b", 0),
        ("orphan", 0),
        ("loop1", 0),
        ("loop2", 1),
    ]
    assert all(r["parent"] == next(x for x in rows if x["ref"] == r["ref"])["parent"] for r in tree)


@given(st.lists(st.integers(min_value=-1, max_value=12), max_size=14))
def test_as_tree_keeps_every_row_and_puts_each_under_its_parent(parents: list[int]) -> None:
    rows: list[dict[str, Any]] = [
        {"ref": f"r{i}", "parent": f"r{p}" if p >= 0 else None} for i, p in enumerate(parents)
    ]
    tree = projection.as_tree(rows)
    assert sorted(r["ref"] for r in tree) == sorted(r["ref"] for r in rows)  # nothing hidden, nothing twice
    at = {r["ref"]: i for i, r in enumerate(tree)}
    for i, r in enumerate(tree):
        if r["depth"] > 0:  # directly under its parent's subtree, one level deeper
            parent = r["parent"]
            assert at[parent] < i and tree[at[parent]]["depth"] == r["depth"] - 1
            assert all(x["depth"] >= r["depth"] for x in tree[at[parent] + 1 : i])


# -- progress -------------------------------------------------------------------------------


def test_progress_is_collapsed_capped_and_says_it_was_truncated(project: Project) -> None:
    task = _task(project, "task")
    protocol_dir = project.paths.protocol_dir(task.id)
    assert progress_line.post_progress(project, task.id, "  running\n migration\t3/7 ") == progress_line.Posted(
        "running migration 3/7", False
    )
    doc = json.loads((protocol_dir / proto.PROGRESS).read_text())
    assert doc["pid"] == os.getpid() and doc["message"] == "running migration 3/7"
    live = liveness.live_facts(project, task)
    assert live is not None and substate(Status.WORKING, live) == "agent: running migration 3/7"
    long = progress_line.post_progress(project, task.id, "x" * 500)
    assert long.truncated and len(long.message) == PROGRESS_CAP and long.message.endswith("…")
    exact = progress_line.post_progress(project, task.id, "y" * PROGRESS_CAP)
    assert not exact.truncated and exact.message == "y" * PROGRESS_CAP
    # A foreign file over the cap is cut again on read.
    proto.write_json(protocol_dir / proto.PROGRESS, {"message": "z" * 900, "pid": os.getpid(), "at": "x"})
    shown = progress_line.progress(protocol_dir)
    assert shown is not None and len(shown) == PROGRESS_CAP


def test_progress_controls_are_escaped(project: Project) -> None:
    task = _task(project, "task")
    posted = progress_line.post_progress(project, task.id, "a\x00b\x1b[31mred\x9b")
    assert "\x00" not in posted.message and "\x1b" not in posted.message and "\x9b" not in posted.message
    assert posted.message == "a\\u0000b\\u001b[31mred\\u009b"
    protocol_dir = project.paths.protocol_dir(task.id)
    proto.write_json(protocol_dir / proto.PROGRESS, {"message": "x\x1b]0;t\x07y", "pid": os.getpid(), "at": "x"})
    assert progress_line.progress(protocol_dir) == "x\\u001b]0;t\\u0007y"


def test_progress_is_gone_when_a_new_command_is_written(project: Project) -> None:
    task = _task(project, "task")
    protocol_dir = project.paths.protocol_dir(task.id)
    progress_line.post_progress(project, task.id, "from the last turn")
    assert progress_line.progress(protocol_dir) == "from the last turn"
    clear_protocol(protocol_dir)
    assert progress_line.progress(protocol_dir) is None
    assert not (protocol_dir / proto.PROGRESS).exists()


def test_progress_is_never_in_the_database(project: Project) -> None:
    task = _task(project, "task")
    progress_line.post_progress(project, task.id, "a-unique-progress-marker-line")
    project.store.close()  # everything written is in the files
    for path in project.paths.root.glob("corral.db*"):
        assert b"a-unique-progress-marker-line" not in path.read_bytes()


def test_a_marker_is_listed_before_it_is_written_and_unlisted_with_its_turn(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.engine.runtime import marked

    task = _task(project, "task")
    protocol_dir = project.paths.protocol_dir(task.id)
    alive = Live(alive=True, phase="work")
    assert task.id not in marked.tasks(project.paths)
    progress_line.post_progress(project, task.id, "reading the parser")
    assert task.id in marked.tasks(project.paths)  # this process's own write is seen at once
    assert liveness.with_marks(project, task.id, alive).progress == "reading the parser"
    agent_marks.clear(protocol_dir)  # the turn's teardown
    assert not (protocol_dir / proto.PROGRESS).exists() and task.id not in marked.tasks(project.paths)
    # Another process's marker: its entry shows once this reader's listing is older than LISTED_SECONDS.
    other = _task(project, "other")
    assert other.id not in marked.tasks(project.paths)
    (project.paths.marked / other.id).touch()
    monkeypatch.setattr(marked, "LISTED_SECONDS", 0.0)
    assert other.id in marked.tasks(project.paths)


def test_marks_are_read_only_where_the_agent_is_active(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    task = _task(project, "task")
    protocol_dir = project.paths.protocol_dir(task.id)
    proto.write(protocol_dir, proto.SupervisorStatus(command_id="c", pid=os.getpid(), phase="check"), durable=False)
    read: list[Path] = []

    def spy(d: Path) -> list[wait_markers.ActiveWait]:
        read.append(d)
        return []

    monkeypatch.setattr(wait_markers, "active_waits", spy)
    progress_line.post_progress(project, task.id, "hi")
    live = liveness.live_facts(project, task)
    assert live is not None and live.progress is None and read == []
