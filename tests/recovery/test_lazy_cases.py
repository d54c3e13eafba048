"""Lazy's lifecycle cases that corral decides as Lazy does, each a test of its own (docs/lifecycle.md):
the same status again is a no-op, an accepted task with no session reopens to backlog, the
merged-branch sweep never completes a task no agent worked on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.adapters.locks import is_locked
from corral.domain.actors import Actor, Role
from corral.domain.status import Status, check_transition, is_allowed
from corral.engine import workspace
from corral.engine.project import Project
from corral.store.contract import NewTask
from tests.conftest import CLI, FakeAgent, git


def _task_in(repo: Path, ref: str, *path: Status) -> str:
    """A task created in backlog and moved along ``path`` by the system, straight through the store."""
    project = Project.open(repo)
    try:
        with project.store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal=f"Task {ref}"), Actor.HUMAN)
            for status in path:
                tx.set_status(task.id, status, Actor.SYSTEM, "set up by the test")
        return task.id
    finally:
        project.close()


def _worked_task(repo: Path, ref: str, *, agent_turn: bool, rest: Status) -> None:
    """A started task whose branch has one commit beyond its base, resting in ``rest`` (blocked or
    zombie), with or without a recorded agent turn."""
    project = Project.open(repo)
    try:
        with project.store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal=f"Task {ref}", target_branch="main"), Actor.HUMAN)
        ws = workspace.prepare(project, task, "main")
        (ws.worktree / f"{ref}.txt").write_text("the work\n")
        git(ws.worktree, "add", f"{ref}.txt")
        git(ws.worktree, "commit", "-q", "-m", f"work of {ref}")
        with project.store.write() as tx:
            session = tx.insert_session(
                task.id, worktree=str(ws.worktree), branch=ws.branch, base_commit=ws.base_commit
            )
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
            if agent_turn:
                tx.add_turn(task.id, role=Role.AGENT, kind="work", content="Done.", session_id=session.id)
            if rest is Status.ZOMBIE:
                tx.set_status(task.id, Status.ZOMBIE, Actor.SYSTEM, "an accept cut short after its merge")
            elif rest is Status.WORKING:
                pass  # a turn whose supervisor never ran: lost once its grace is over
            else:
                tx.park(task.id, Actor.SYSTEM, "the turn ended")
    finally:
        project.close()


def _changes(repo: Path, task_id: str) -> list[tuple[str | None, str]]:
    project = Project.open(repo)
    try:
        with project.store.read() as tx:
            return [(c.from_status and c.from_status.value, c.to_status.value) for c in tx.status_changes(task_id)]
    finally:
        project.close()


def test_the_same_status_again_is_a_no_op_that_records_nothing(corral: CLI, repo: Path) -> None:
    for status in Status:
        check_transition(status, status, Actor.SYSTEM)  # legal for every status, terminal ones too
    assert is_allowed(Status.ZOMBIE, Status.ZOMBIE, Actor.SYSTEM)
    assert not is_allowed(Status.ZOMBIE, Status.ZOMBIE, Actor.HUMAN)  # zombie stays the system's to set
    task_id = _task_in(repo, "again", Status.WORKING, Status.WORKING, Status.ZOMBIE, Status.ZOMBIE)
    assert _changes(repo, task_id) == [(None, "backlog"), ("backlog", "working"), ("working", "zombie")]
    shown = corral.json("show", "again")
    assert [(c["from"], c["to"]) for c in shown["status_changes"]][1:] == [
        ("backlog", "working"),
        ("working", "zombie"),
    ]


def test_a_task_left_in_zombie_is_completed_by_the_sweep(corral: CLI, repo: Path) -> None:
    _worked_task(repo, "left", agent_turn=True, rest=Status.ZOMBIE)
    git(repo, "merge", "-q", "--ff-only", "corral/left")  # the accept had merged it
    corral.ok("list")  # a reconciler's pass
    shown = corral.json("show", "left")
    assert shown["task"]["status"] == "complete"
    moves = [(c["from"], c["to"]) for c in shown["status_changes"]]
    assert moves[-2:] == [("working", "zombie"), ("zombie", "complete")]  # zombie → zombie recorded nothing


def test_the_merged_branch_sweep_never_completes_a_task_with_no_agent_turn(corral: CLI, repo: Path) -> None:
    _worked_task(repo, "idle", agent_turn=False, rest=Status.BLOCKED)
    _worked_task(repo, "done", agent_turn=True, rest=Status.BLOCKED)
    git(repo, "merge", "-q", "--no-ff", "-m", "both by hand", "corral/idle", "corral/done")
    corral.ok("list")
    assert corral.json("show", "idle")["task"]["status"] == "blocked"
    assert corral.json("show", "done")["task"]["status"] == "complete"


def test_reopening_an_accepted_task_with_no_session_goes_to_backlog(corral: CLI, repo: Path) -> None:
    _task_in(repo, "bare", Status.ZOMBIE, Status.COMPLETE)
    out = corral.json("reopen", "bare")
    shown = corral.json("show", "bare")
    assert shown["task"]["status"] == "backlog", out
    assert [(c["from"], c["to"]) for c in shown["status_changes"]][-1] == ("complete", "backlog")
    corral.ok("start", "bare", "--help")  # from backlog, start is what comes next


def test_show_of_an_interrupted_task_prints_the_consecutive_interruptions_beside_the_reason(
    corral: CLI, repo: Path
) -> None:
    from corral.domain.clock import utcnow
    from corral.domain.records import RestingCause

    corral.ok("create", "Crashes", "--ref", "crashy")
    project = Project.open(repo)
    try:
        with project.store.write() as tx:
            task = tx.task_by_ref("crashy")
            assert task is not None
            session = tx.insert_session(task.id)
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
            cause = RestingCause(code="harness-missing", at=utcnow(), actor=Actor.SYSTEM)
            tx.set_status(task.id, Status.INTERRUPTED, Actor.SYSTEM, "the turn crashed", resting_cause=cause)
            tx.update_session(session.id, consecutive_interruptions=2)
    finally:
        project.close()
    shown = corral.ok("show", "crashy").stdout
    line = next(x for x in shown.splitlines() if x.startswith("Stopped because:"))
    assert line.endswith("(interrupted 2 times in a row)"), line
    assert len(line) > len("Stopped because: (interrupted 2 times in a row)")  # the reason is there too
    assert corral.json("show", "crashy")["stopped_because"].endswith("(interrupted 2 times in a row)")


def test_reject_and_close_refuse_while_a_chat_holds_the_worktree(corral: CLI, repo: Path, agent: FakeAgent) -> None:
    corral.ok("create", "Chatted", "--ref", "chatted")
    corral.ok("start", "chatted", "--wait", "--timeout", "60")
    project = Project.open(repo)
    try:
        with project.store.read() as tx:
            task = tx.task_by_ref("chatted")
            assert task is not None and task.status is Status.BLOCKED
        lock = project.paths.chat_lock(task.id)
    finally:
        project.close()
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    # a chat's process holds the chat lock (flock) for as long as it runs
    holder = subprocess.Popen(["flock", str(lock), "sleep", "60"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not is_locked(lock):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        for how in ("reject", "close"):
            refused = corral(how, "chatted", "-m", "not this")
            assert refused.returncode == 3, refused.stderr
            assert "A chat is open in chatted's worktree" in refused.stderr
            assert "End the chat first" in refused.stderr
        assert corral.json("show", "chatted")["task"]["status"] == "blocked"
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the lock goes with its holder
        holder.wait()
    corral.ok("close", "chatted", "-m", "done with it")  # once the chat ended
    assert corral.json("show", "chatted")["task"]["status"] == "abandoned"


def test_a_working_task_whose_row_does_not_decode_is_skipped_by_the_working_sweep(corral: CLI, repo: Path) -> None:
    import sqlite3

    from corral.engine.recovery.reconcile import reconcile
    from tests.cli.helpers import database

    _task_in(repo, "damaged", Status.WORKING)
    corral.ok("create", "Fine", "--ref", "fine")
    with sqlite3.connect(database(corral)) as conn:
        conn.execute("UPDATE tasks SET metadata = '{not json' WHERE ref = 'damaged'")
    conn.close()
    project = Project.open(repo)
    try:
        for _ in range(2):  # on no pass, not only the first
            assert reconcile(project).problems == []
    finally:
        project.close()
    listed = corral("list")
    assert listed.returncode == 0 and "warning" not in listed.stderr, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["fine"]
    doc = corral("doctor", "--json").json()
    (check,) = [c for c in doc["checks"] if c["name"] == "task-row"]
    assert check["status"] == "fail" and "damaged" in check["message"]  # named once, by doctor


def test_a_working_task_whose_stored_start_lies_in_the_future_is_still_reconciled(corral: CLI, repo: Path) -> None:
    import sqlite3

    from corral.engine.recovery.reconcile import reconcile
    from tests.cli.helpers import database

    _task_in(repo, "ahead", Status.WORKING)  # no supervisor ever ran for it: only the grace period protects it
    _task_in(repo, "now", Status.WORKING)
    with sqlite3.connect(database(corral)) as conn:
        conn.execute("UPDATE tasks SET last_interaction_at = '2100-01-01T00:00:00Z' WHERE ref = 'ahead'")
    conn.close()
    project = Project.open(repo)
    try:
        ended = reconcile(project).ended
        with project.store.read() as tx:
            ahead, now = tx.task_by_ref("ahead"), tx.task_by_ref("now")
        assert ahead is not None and now is not None
        assert ahead.status is Status.INTERRUPTED and ahead.id in ended  # a start in 2100 protects nothing
        assert now.status is Status.WORKING  # a turn launched just now keeps its grace
    finally:
        project.close()


def test_a_resume_on_a_harness_without_a_session_carries_the_goal_and_every_pending_feedback(
    corral: CLI, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", str(agent.bin))
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    agent.script([{"result": "Started."}], default=[{"exit": 1}])  # every turn after the first fails at once
    corral.ok("create", "Rename the widget to gadget", "--ref", "nosession")
    corral.ok("start", "nosession", "--wait", "--timeout", "60")
    first, second = "Use gadget in the docs too.\nEvery one.", "And keep widget as an alias."
    for message in (first, second):
        corral("unblock", "nosession", "-m", message, "--wait", "--timeout", "60")
        assert corral.json("show", "nosession")["task"]["status"] == "interrupted"
    agent.script(default=[{"result": "Resumed."}])
    corral.ok("resume", "nosession", "--wait", "--timeout", "60")
    prompt = agent.calls()[-1]["prompt"]
    assert "Rename the widget to gadget" in prompt  # the task's goal: nothing else tells this agent
    assert first in prompt and second in prompt  # every pending feedback, in full
    assert "conversation above" not in prompt


def test_auto_resumes_of_different_tasks_are_spaced_by_a_project_wide_gap(
    corral: CLI, repo: Path, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from tests.cli.helpers import database

    monkeypatch.setenv("CORRAL_AUTO_RESUME", "1")
    monkeypatch.setenv("CORRAL_GRACE_PERIOD", "1")
    monkeypatch.setenv("CORRAL_AUTO_RESUME_GAP", "3600")
    for ref in ("one", "two"):  # two turns lost at once, as a provider's incident loses them
        _worked_task(repo, ref, agent_turn=True, rest=Status.WORKING)
    with sqlite3.connect(database(corral)) as conn:
        conn.execute("UPDATE tasks SET last_interaction_at = '2020-01-01T00:00:00Z'")
    conn.close()

    def auto_resumed() -> set[str]:
        return {
            ref
            for ref in ("one", "two")
            if any(t["kind"] == "auto-resume" for t in corral.json("show", ref, "--all")["turns"])
        }

    corral.ok("list")  # the pass that finds both lost resumes one of them
    (first,) = auto_resumed()
    other = "two" if first == "one" else "one"
    assert corral.json("show", other)["task"]["status"] == "interrupted"
    corral.ok("list")  # the gap still holds it back
    assert auto_resumed() == {first}
    corral.ok("list", env={"CORRAL_AUTO_RESUME_GAP": "0"})  # no gap: the task held back is resumed by a later pass
    assert auto_resumed() == {"one", "two"}


def test_a_classified_fatal_failure_fills_the_sessions_interrupt_fields_as_well_as_the_cause(
    corral: CLI, agent: FakeAgent
) -> None:
    agent.script(
        default=[{"init": True}, {"result": "Invalid API key · Fix external API key", "is_error": True}, {"exit": 1}]
    )
    corral.ok("create", "Not logged in", "--ref", "nokey")
    assert corral("start", "nokey", "--wait", "--timeout", "60").returncode == 1  # it rests with a cause
    doc = corral.json("show", "nokey")
    assert doc["task"]["status"] == "blocked"  # parked, never auto-resumed
    assert doc["resting_cause"] is not None
    interrupt = doc["session"]["interrupt"]
    assert interrupt is not None, doc["session"]
    assert "Invalid API key" in interrupt["reason"] and interrupt["at"]
    assert interrupt["exit_code"] == doc["turns"][-1]["failure"]["native"]["exit_code"]
    assert doc["session"]["consecutive_interruptions"] == 0  # it parks: the breaker counts interruptions only


def test_chat_on_a_finished_task_reopens_its_captured_session_read_only_in_the_project_root(
    corral: CLI, repo: Path, agent: FakeAgent
) -> None:
    agent.script(
        [
            {"init": True},
            {"transcript": '{"said": "the earlier exchange"}'},
            {"write": {"path": "renamed.txt", "content": "gadget\n"}},
            {"commit": "rename"},
            {"result": "Done."},
        ],
        default=[{"init": True}, {"result": "We renamed it."}],
    )
    corral.ok("create", "Rename it", "--ref", "finished")
    corral.ok("start", "finished", "--wait", "--timeout", "60")
    corral.ok("accept", "finished")
    shown = corral.json("show", "finished")
    assert shown["task"]["status"] == "complete" and not Path(shown["task"]["worktree"]).exists()
    sid = shown["session"]["harness_session_id"]
    head = git(repo, "rev-parse", "HEAD")

    chatted = corral("chat", "finished", input="")
    assert chatted.returncode == 0, chatted.stderr
    call = agent.calls()[-1]
    assert Path(call["cwd"]).resolve() == repo.resolve()  # the project root: no worktree exists
    argv = call["argv"]
    assert argv[argv.index("--resume") + 1] == sid  # the captured session, resumed
    assert argv[argv.index("--permission-mode") + 1] == "plan"  # read-only
    assert "--disallowedTools" in argv
    # the transcript was brought to where a resume in the project root looks for it
    from corral.adapters.harness.claude import config_dir, project_key

    kept = config_dir(os.environ) / "projects" / project_key(repo) / f"{sid}.jsonl"
    assert "the earlier exchange" in kept.read_text()
    again = corral.json("show", "finished")
    assert again["task"]["status"] == "complete"  # a chat moves nothing
    assert [t["sequence"] for t in again["turns"]] == [t["sequence"] for t in shown["turns"]]  # and records no turn
    assert git(repo, "rev-parse", "HEAD") == head


def test_chat_on_a_finished_task_with_no_session_is_refused_with_a_hint(corral: CLI) -> None:
    corral.ok("create", "Never started", "--ref", "unstarted")
    corral.ok("close", "unstarted", "-m", "not needed")
    refused = corral("chat", "unstarted", "--json")
    assert refused.returncode == 3, refused.stderr
    error = refused.json()["error"]
    assert error["code"] == "no-session" and "corral show unstarted" in error["hint"]
