"""Waits on subtasks, agent progress and the task tree through the real CLI: ``list``, ``show``, ``--json``.

The markers are written as the daemon's MCP endpoint writes them (``wait_markers.track_wait``,
``progress_line.post_progress``) by this test process, whose pid also stands in for the running supervisors;
the CLI, a separate process, reads them through the one substate derivation.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.engine.project import Project
from corral.engine.runtime import marked, progress_line, wait_intervals, wait_markers
from corral.engine.runtime import protocol as proto
from tests.cli.helpers import create, to_working


@pytest.fixture
def project(repo: Path) -> Iterator[Project]:
    p = Project.open(repo)  # the real clock: the CLI counts waited seconds with it
    yield p
    p.close()


def _running(project: Project, task_id: str) -> None:
    """A supervisor alive in its work phase (this process), as the reconciler sees one."""
    protocol_dir = project.paths.protocol_dir(task_id)
    protocol_dir.mkdir(parents=True, exist_ok=True)
    proto.write(protocol_dir, proto.SupervisorStatus(command_id="c", pid=os.getpid(), phase="work"), durable=False)


@pytest.fixture
def tree(corral: Any, project: Project) -> dict[str, str]:
    """parent (working) ─ child (working) ─ grandchild (backlog); other (backlog) made between them."""
    ids = {"parent": create(corral, "Parent work", "--ref", "parent")["id"]}
    ids["other"] = create(corral, "Other work", "--ref", "other")["id"]
    ids["child"] = create(corral, "Child work", "--ref", "child", "--parent", "parent")["id"]
    ids["grandchild"] = create(corral, "Grandchild work", "--ref", "grandchild", "--parent", "child")["id"]
    for ref in ("parent", "child"):
        to_working(corral, ref)
        _running(project, ids[ref])
    return ids


def _line(out: str, ref: str) -> str:
    return next(line for line in out.splitlines() if line.strip().split(" ")[0] == ref)


def test_list_and_show_carry_the_waits_the_progress_and_the_tree(
    corral: Any, project: Project, tree: dict[str, str]
) -> None:
    progress_line.post_progress(project, tree["child"], "running migration 3/7")
    with wait_markers.track_wait(project, tree["parent"], ["child"], None) as settle:
        out = corral.ok("list").stdout
        lines = [line for line in out.splitlines() if line.strip()]
        assert [line.split()[0] for line in lines] == ["parent", "child", "grandchild", "other"]
        assert _line(out, "parent").startswith("parent ")
        assert _line(out, "child").startswith("  child ")  # under its parent, indented
        assert _line(out, "grandchild").startswith("    grandchild ")
        assert "working(waiting on child (" in _line(out, "parent")
        assert "working(agent: running migration 3/7)" in _line(out, "child")

        rows = {r["ref"]: r for r in corral.json("list")["tasks"]}
        assert rows["parent"]["substate"].startswith("waiting on child (")
        assert rows["child"]["substate"] == "agent: running migration 3/7"
        assert [(r, rows[r]["parent"], rows[r]["depth"]) for r in ("parent", "child", "grandchild", "other")] == [
            ("parent", None, 0),
            ("child", "parent", 1),
            ("grandchild", "child", 2),
            ("other", None, 0),
        ]
        active = corral.ok("list", "--active").stdout  # the plain quick path, filtered
        assert "working(waiting on child (" in _line(active, "parent")

        doc = corral.json("show", "parent")
        assert doc["task"]["substate"].startswith("waiting on child (")
        assert doc["live"]["substate"].startswith("waiting on child (")  # wait's live line reads the same
        assert doc["live"]["waits"][0]["ref"] == "child"
        assert all({"agent_s", "waited_s"} <= set(t) for t in doc["turns"])
        assert corral.json("show", "child")["children"] == [
            {"ref": "grandchild", "status": "backlog", "substate": None}
        ]
        page = corral.ok("show", "parent").stdout
        assert page.splitlines()[0].startswith("parent  (") and "working(waiting on child (" in page.splitlines()[0]
        settle("rested")
    after = corral.json("list")["tasks"]
    assert next(r for r in after if r["ref"] == "parent")["substate"] == "agent"


def test_a_killed_writer_degrades_every_surface_to_working_agent(
    corral: Any, project: Project, tree: dict[str, str]
) -> None:
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from corral.engine.project import Project
        from corral.engine.runtime import progress_line, wait_markers
        project = Project.open(Path({str(project.paths.repo)!r}))
        held = wait_markers.track_wait(project, {tree["parent"]!r}, ["child"], None)
        held.__enter__()  # kept referenced: the wait is open until the process dies
        progress_line.post_progress(project, {tree["parent"]!r}, "half way")
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == b"ready"
        before = corral.json("show", "parent")["task"]["substate"]
        assert before.startswith("waiting on child (") and before.endswith(" · half way")
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(10)
    assert corral.json("show", "parent")["task"]["substate"] == "agent"
    assert "working(agent)" in _line(corral.ok("list").stdout, "parent")


def test_an_agents_controls_in_progress_never_reach_the_terminal(
    corral: Any, project: Project, tree: dict[str, str]
) -> None:
    # A foreign progress file (never through post_progress): NUL, ESC sequences, a title, C1, bidi.
    hostile = "a\x00b\x1b[2J\x1b]0;pwned\x07c\x9bd\u202ee\nf"
    protocol_dir = project.paths.protocol_dir(tree["child"])
    marked.note(protocol_dir)  # as every marker's writer does first
    proto.write_json(protocol_dir / proto.PROGRESS, {"message": hostile, "pid": os.getpid(), "at": "now"})
    for args in (["list"], ["list", "--active"], ["show", "child"], ["show", "parent"]):
        out = corral.ok(*args).stdout
        assert not any(ch in out for ch in "\x00\x1b\x07\x9b\u202e"), (args, out)
    assert "agent: a\\u0000b\\u001b[2J" in _line(corral.ok("list").stdout, "child")
    sub = corral.json("show", "child")["task"]["substate"]
    assert "\x00" not in sub and "\x1b" not in sub and "\n" not in sub


def test_show_gives_each_child_its_substate_and_each_agent_turn_its_waited_time(
    corral: Any, project: Project, tree: dict[str, str]
) -> None:
    """Needs ``queries.show_task`` to hand ``projection.show`` the task's wait intervals and the
    children's live facts (see the helper's report: engine/operations is not this piece's)."""
    from datetime import timedelta

    from corral.domain.actors import Role
    from tests.cli.helpers import store_of

    progress_line.post_progress(project, tree["child"], "running migration 3/7")
    with wait_markers.track_wait(project, tree["parent"], ["child"], None) as settle:
        settle("rested")
    (waited,) = wait_intervals.intervals(project, tree["parent"])
    assert waited.ended_at is not None
    with store_of(corral) as store, store.write() as tx:
        tx.add_turn(
            tree["parent"],
            role=Role.AGENT,
            kind="start",
            content="done",
            started_at=waited.started_at - timedelta(seconds=30),
            ended_at=waited.ended_at + timedelta(seconds=10),
        )
    doc = corral.json("show", "parent")
    assert doc["children"] == [{"ref": "child", "status": "working", "substate": "agent: running migration 3/7"}]
    (turn,) = [t for t in doc["turns"] if t["role"] == "agent"]
    span = (waited.ended_at - waited.started_at).total_seconds()
    assert turn["waited_s"] == round(span, 1) and turn["agent_s"] == 40.0
    page = corral.ok("show", "parent").stdout.splitlines()
    at = page.index("Subtasks:")
    assert page[at + 1].split() == ["child", "working(agent:", "running", "migration", "3/7)"]


def test_the_live_line_and_the_list_render_the_waits_and_the_tree() -> None:
    from corral.cli.render import clip_ref, live_text

    live = {"status": "working", "phase": "work", "attempt": 1, "elapsed_s": 75.0, "last_line": "thinking"}
    assert live_text(live) == "working · attempt 1 · 1:15 · thinking"  # nothing marked: as before
    marked = {**live, "substate": "waiting on fix-foo (2m10s)", "waits": [{"ref": "fix-foo", "waited_s": 130.0}]}
    assert live_text(marked) == "working · attempt 1 · 1:15 · waiting on fix-foo (2m10s) · thinking"
    hostile = {**live, "substate": "agent: a\x1b[2Jb", "progress": "a\x1b[2Jb"}
    assert "\x1b" not in live_text(hostile)
    assert clip_ref("    a-very-long-subtask-ref", 12) == "    a-very-…"
