"""Retention: a diagnostic 90 days old is pruned, its reference reads "Expired after 90 days",
and the failure evidence and resting cause stay. `corral prune` also removes stale worktrees —
never one with unsaved work — and the daemon prunes diagnostics once a day."""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from pathlib import Path

from corral.daemon.daemon_service import PRUNE_SECONDS, Daemon
from corral.domain.actors import Actor
from corral.engine.operations import tasks
from corral.engine.operations.prune import prune
from corral.engine.project import Project
from corral.engine.read import diagnostic_retention
from tests.conftest import FakeAgent, FakeClock, git
from tests.failures.conftest import diagnostic_files, line_after, new_task, run_start, show_json, show_text

#: An agent that is not logged in: a fatal failure, so the turn fails at once, never retried.
NOT_LOGGED_IN = [{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}]


def failed_task(repo: Path, clock: FakeClock, agent: FakeAgent, monkeypatch):
    """A real failure (the agent is not logged in) recorded by a project on an injected clock."""
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    agent.script(NOT_LOGGED_IN)
    proj = Project.open(repo, clock=clock)
    task = new_task(proj)
    done = run_start(proj, task)
    assert done.resting_cause.code == "harness-not-authenticated"
    assert len(agent.calls()) == 1
    return proj, task


def test_a_diagnostic_past_90_days_is_removed_and_reads_expired(repo, corral, clock, agent, monkeypatch):
    proj, task = failed_task(repo, clock, agent, monkeypatch)
    (kept,) = diagnostic_files(proj)
    assert kept.stat().st_mode & 0o777 == 0o600

    clock.advance(timedelta(days=89, hours=23).total_seconds())
    assert prune(proj).diagnostics.removed == []
    assert kept.exists()

    clock.advance(timedelta(hours=1).total_seconds())  # 90 days
    result = prune(proj)
    assert result.diagnostics.removed == [f"{task.id}/{kept.name}"]
    assert not kept.exists() and diagnostic_files(proj) == []

    doc = show_json(corral, task.ref)
    cause = doc["resting_cause"]
    assert cause["code"] == "harness-not-authenticated"  # the resting cause stays
    evidence = cause["evidence"]
    assert evidence["native"]["exit_code"] == 1  # and the evidence with it
    assert evidence["diagnostic"] == f"{task.id}/{kept.name}"  # the reference too, now expired
    assert evidence["diagnostic_status"] == "expired" and evidence["diagnostic_path"] is None
    assert evidence["diagnostic_note"] == diagnostic_retention.EXPIRED == "Expired after 90 days"
    (turn,) = [t for t in doc["turns"] if t["role"] == "agent"]
    assert turn["failure"]["code"] == "harness-not-authenticated" and turn["failure"]["diagnostic_status"] == "expired"

    details = show_text(corral, task.ref, "--details")
    assert line_after(details, "  diagnostic") == "Expired after 90 days"
    text = show_text(corral, task.ref)
    assert line_after(text, "Stopped because:") == "Claude Code is not authenticated — log in through the harness."
    proj.close()


def test_corral_prune_cli_and_the_daemon(repo, corral, clock, agent, monkeypatch):
    proj, _task = failed_task(repo, clock, agent, monkeypatch)
    (diag,) = diagnostic_files(proj)
    old = (clock() - timedelta(days=91)).timestamp()
    os.utime(diag, (old, old))
    orphan = proj.paths.diagnostics / "0123456789abcdef" / "gone.json"  # a deleted task's
    orphan.parent.mkdir(parents=True)
    orphan.write_text("{}")

    events = []
    daemon = Daemon(on_event=events.append)
    daemon.prune_once(daemon.adopt(proj))
    assert not diag.exists() and not orphan.parent.exists()
    assert any(
        e["event"] == "pruned" and e["diagnostics"] == 1 and e["orphaned_tasks"] == 1 and e["project"] == str(proj.repo)
        for e in events
    )

    doc = corral.json("prune")
    assert doc["pruned"]["diagnostics"] == {"removed": [], "orphaned_tasks": [], "kept": 0}
    proj.close()


def test_prune_removes_stale_clean_worktrees_and_keeps_unsaved_work(repo, corral, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    proj = Project.open(repo)
    live = tasks.create(proj, "Live task", actor=Actor.HUMAN)
    run_start(proj, live)  # its worktree belongs to a live task: kept silently
    root = proj.paths.worktrees
    clean = root / "left-by-a-deleted-task"
    dirty = root / "left-with-changes"
    for path, branch in ((clean, "corral/left-clean"), (dirty, "corral/left-dirty")):
        git(repo, "worktree", "add", "-q", "-b", branch, str(path), "main")
    (dirty / "unsaved.txt").write_text("work nobody committed\n")
    stray = root / "not-a-worktree"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine\n")

    doc = corral.json("prune")
    worktrees = doc["pruned"]["worktrees"]
    assert worktrees["removed"] == [str(clean)]
    kept = {k["path"]: k["reason"] for k in worktrees["kept"]}
    assert "uncommitted changes" in kept[str(dirty)]
    assert "not a git worktree" in kept[str(stray)]
    assert str(proj.paths.worktree(live.ref)) not in kept
    assert not clean.exists() and (dirty / "unsaved.txt").exists() and (stray / "notes.txt").exists()
    assert proj.paths.worktree(live.ref).is_dir()
    listed = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert str(clean) not in listed
    assert git(repo, "rev-parse", "--verify", "corral/left-clean")  # the branch stays
    text = corral.ok("prune").stdout
    assert "Worktrees: removed 0." in text and "uncommitted changes" in text
    proj.close()


def test_the_daemon_loop_prunes_each_project_when_first_served_and_then_once_per_interval(
    repo, agent, monkeypatch, tmp_path
):
    import threading
    import time

    proj = Project.open(repo)
    tasks.create(proj, "Have a database", actor=Actor.HUMAN)  # a project without one is not served
    assert proj.paths.db.exists()
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    git(other, "commit", "-q", "--allow-empty", "-m", "other's first")
    second = Project.open(other)
    tasks.create(second, "Have one too", actor=Actor.HUMAN)
    daemon = Daemon(tick=0.05)
    daemon.prune_every = 0.3
    calls: dict[str, list[float]] = {}
    monkeypatch.setattr(daemon, "prune_once", lambda slot: calls.setdefault(slot.repo, []).append(time.monotonic()))
    runner = threading.Thread(target=daemon.run)
    runner.start()
    deadline = time.monotonic() + 20  # the daemon starts its MCP endpoint first (the SDK is slow to load)
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(1.0)
    daemon.request_stop()
    runner.join(10)
    assert not runner.is_alive()
    assert set(calls) == {str(proj.repo), str(second.repo)}  # each project pruned on its own
    for times in calls.values():
        assert 3 <= len(times) <= 6  # when first served, then once per interval (a day by default)
    assert PRUNE_SECONDS == 24 * 3600
    proj.close()
    second.close()
