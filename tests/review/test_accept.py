"""accept: merged once, narrated, verified before deleting, every abort restoring the true status."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.read.checkout import give_back
from tests.conftest import git

Writes = list


def work(path: str, content: str, message: str = "agent work") -> list[dict]:
    return [
        {"init": True},
        {"write": {"path": path, "content": content}},
        {"commit": message},
        {"result": f"Wrote {path}."},
    ]


def blocked_with(proj, agent, ref: str, *steps, parent: str | None = None, expect=Status.BLOCKED):
    if steps:
        agent.script(*steps)
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref, parent=parent)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is expect
    return task


def status_of(proj, ref: str) -> Status:
    with proj.store.read() as tx:
        return tx.task_by_ref(ref).status


def test_accept_squash_merges_verifies_archives_and_completes(proj, agent, repo):
    blocked_with(proj, agent, "feat", work("feature.py", "x = 1\n", "add feature"))
    events: list[dict] = []
    before = git(repo, "rev-parse", "main")
    tip = git(repo, "rev-parse", "corral/feat")
    result = accepting.accept(proj, "feat", actor=Actor.HUMAN, report=events.append)
    assert result.task.status is Status.COMPLETE and result.commit
    assert git(repo, "rev-parse", "main") == result.commit
    assert git(repo, "rev-parse", "main^") == before  # a squash: one commit on the target
    message = git(repo, "log", "-1", "--format=%B", "main")
    assert message.startswith("Task feat") and f"Corral-Task: {result.task.id}" in message
    assert "Wrote feature.py." in message  # the summary of the last agent turn
    assert (repo / "feature.py").read_text() == "x = 1\n"  # the checked-out target came along
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "refs/corral/archive/feat") == tip
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "corral/feat"], cwd=repo).returncode != 0
    assert not proj.paths.worktree("feat").exists()
    with proj.store.read() as tx:
        task = tx.task_by_ref("feat")
        session = tx.get_session(task.session_id)
        changes = [(c.from_status, c.to_status) for c in tx.status_changes(task.id)]
    assert session.outcome == "accepted"
    assert "accept_in_flight_from" not in task.metadata
    assert changes[-2:] == [(Status.BLOCKED, Status.MERGING), (Status.MERGING, Status.COMPLETE)]
    phases = [(e["id"], e["state"], e.get("position")) for e in events if e["event"] == "phase"]
    assert phases[0][:2] == ("preflight", "start") and phases[0][2] is None  # a prelude, no position
    assert ("merge", "done", 1) in phases and ("verify", "done", 2) in phases
    plan = next(e for e in events if e["event"] == "plan")
    assert [p["id"] for p in plan["phases"]] == [p.id for p in accepting.plan(pre_accept=False, destination=True)]


def test_accept_refuses_uncommitted_changes_naming_the_files(proj, agent):
    blocked_with(
        proj,
        agent,
        "dirty",
        [{"init": True}, {"write": {"path": "loose.txt", "content": "x"}}, {"result": "left it uncommitted"}],
    )
    with pytest.raises(accepting.AcceptRefused) as caught:
        accepting.accept(proj, "dirty", actor=Actor.HUMAN)
    assert "loose.txt" in caught.value.message
    assert caught.value.exit_code == 3
    assert status_of(proj, "dirty") is Status.BLOCKED


def test_accept_refuses_while_violations_are_pending(proj, agent, monkeypatch):
    monkeypatch.setenv("CORRAL_PROTECTED", "secrets/*")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    blocked_with(proj, agent, "prot", work("secrets/key.txt", "k"), expect=Status.CONFLICT)
    with pytest.raises(accepting.AcceptRefused) as caught:
        accepting.accept(proj, "prot", actor=Actor.HUMAN)
    assert "secrets/key.txt" in caught.value.message
    assert status_of(proj, "prot") is Status.CONFLICT
    proj.close()


def test_a_conflicting_merge_aborts_and_restores_blocked(proj, agent, repo):
    blocked_with(proj, agent, "clash", work("README.md", "agent's\n"))
    (repo / "README.md").write_text("main's\n")
    git(repo, "commit", "-qam", "main edit")
    before = git(repo, "rev-parse", "main")
    with pytest.raises(accepting.MergeConflictOnAccept) as caught:
        accepting.accept(proj, "clash", actor=Actor.HUMAN)
    assert "README.md" in caught.value.message
    assert git(repo, "rev-parse", "main") == before
    with proj.store.read() as tx:
        task = tx.task_by_ref("clash")
    assert task.status is Status.BLOCKED and "accept_in_flight_from" not in task.metadata
    assert proj.paths.worktree("clash").exists()  # nothing deleted


def test_an_aborted_accept_of_a_submitted_task_restores_submitted(proj, agent, repo, tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo, "remote", "add", "origin", str(remote))
    blocked_with(proj, agent, "sub", work("README.md", "agent's\n"))
    from corral.engine.operations.submit import submit

    submit(proj, "sub", actor=Actor.HUMAN)
    assert status_of(proj, "sub") is Status.SUBMITTED
    (repo / "README.md").write_text("main's\n")
    git(repo, "commit", "-qam", "main edit")
    with pytest.raises(accepting.MergeConflictOnAccept):
        accepting.accept(proj, "sub", actor=Actor.HUMAN)
    assert status_of(proj, "sub") is Status.SUBMITTED


def test_two_concurrent_accepts_merge_once(proj, agent, repo):
    blocked_with(proj, agent, "twice", work("t.py", "t = 2\n"))
    before = git(repo, "rev-parse", "main")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", "twice", "--json"],
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    import json

    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sorted(r["already_accepted"] for r in results) == [False, True]
    assert git(repo, "rev-list", "--count", f"{before}..main") == "1"


def test_a_dirty_destination_is_stashed_and_popped(proj, agent, repo):
    blocked_with(proj, agent, "dest", work("shared.txt", "agent's version\n"))
    (repo / "mine.txt").write_text("my uncommitted note\n")  # untouched by the merge: left alone
    (repo / "README.md").write_text("# demo\nlocal edit\n")  # modified, not touched by the merge
    result = accepting.accept(proj, "dest", actor=Actor.HUMAN)
    assert result.warning is None
    assert (repo / "shared.txt").read_text() == "agent's version\n"
    assert (repo / "mine.txt").read_text() == "my uncommitted note\n"
    assert (repo / "README.md").read_text() == "# demo\nlocal edit\n"


def test_a_pop_conflict_leaves_the_merge_standing_and_names_the_stash(proj, agent, repo):
    blocked_with(proj, agent, "pop", work("README.md", "agent's readme\n"))
    (repo / "README.md").write_text("my local readme\n")  # overlaps with the merge
    result = accepting.accept(proj, "pop", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "show", "main:README.md") == "agent's readme"
    assert result.warning and "stash" in result.warning
    stash = git(repo, "stash", "list")
    assert "corral accept" in stash
    assert git(repo, "show", "stash@{0}:README.md") == "my local readme"


def test_a_subtask_merges_into_its_parent_and_the_parents_worktree_follows(proj, agent, repo):
    agent.script(work("parent.txt", "p\n"), work("child.txt", "c\n"))
    blocked_with(proj, agent, "parent")
    child = blocked_with(proj, agent, "child", parent="parent")
    with proj.store.read() as tx:
        parent_wt = Path(tx.get_session(tx.task_by_ref("parent").session_id).worktree)
        child_session = tx.get_session(tx.get_task(child.id).session_id)
    assert child_session.base_commit == git(repo, "rev-parse", "corral/parent")  # it started from the parent
    before = git(repo, "rev-parse", "main")
    result = accepting.accept(proj, "child", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "rev-parse", "main") == before  # main untouched
    assert git(repo, "show", "corral/parent:child.txt") == "c"
    assert (parent_wt / "child.txt").read_text() == "c\n"  # the parent's worktree came along


def test_accept_refuses_while_the_destination_task_is_active(proj, agent, repo):
    agent.script(work("parent.txt", "p\n"), work("child.txt", "c\n"), [{"init": True}, {"sleep": 60}])
    blocked_with(proj, agent, "busy-parent")
    blocked_with(proj, agent, "kid", parent="busy-parent")
    turns.unblock(proj, "busy-parent", actor=Actor.HUMAN, message="keep going")
    with pytest.raises(accepting.AcceptRefused) as caught:
        accepting.accept(proj, "kid", actor=Actor.HUMAN)
    assert "busy-parent" in caught.value.message
    control.stop(proj, "busy-parent", actor=Actor.HUMAN)
    assert status_of(proj, "kid") is Status.BLOCKED


@pytest.mark.slow
def test_sigkill_during_the_merge_phase_is_recovered_by_the_stranded_merge_sweep(proj, agent, repo):
    for i, point in enumerate(["accept.merging", "accept.after-update-ref", "accept.completed"]):
        ref = f"strand-{i}"
        blocked_with(proj, agent, ref, work(f"s{i}.txt", f"{i}\n"))
        tip = git(repo, "rev-parse", f"corral/{ref}")
        env = {"CORRAL_CRASH_AT": point, "CORRAL_CRASH_HOW": "kill"}
        died = subprocess.run(
            [sys.executable, "-m", "corral", "accept", ref],
            cwd=repo,
            capture_output=True,
            text=True,
            env={**__import__("os").environ, **env},
        )
        assert died.returncode == -9, died.stderr
        settle(proj)
        with proj.store.read() as tx:
            task = tx.task_by_ref(ref)
        # nothing is deleted unsaved: the tip is still on its branch or under the archive ref
        kept = set()
        for name in (f"refs/heads/corral/{ref}", f"refs/corral/archive/{ref}"):
            found = subprocess.run(
                ["git", "rev-parse", "--verify", "-q", name], cwd=repo, capture_output=True, text=True
            )
            kept.add(found.stdout.strip())
        assert tip in kept
        if point == "accept.merging":
            assert task.status is Status.BLOCKED  # the ref never moved: restored
            assert proj.paths.worktree(ref).exists()
        else:
            assert task.status is Status.COMPLETE
            assert git(repo, "show", f"main:s{i}.txt") == str(i)


def test_narration_failure_never_changes_the_outcome(proj, agent):
    blocked_with(proj, agent, "loud", work("l.txt", "l\n"))

    def broken(_event):
        raise RuntimeError("listener fell over")

    assert accepting.accept(proj, "loud", actor=Actor.HUMAN, report=broken).task.status is Status.COMPLETE


def test_reject_then_reopen_restores_the_work_uncommitted_changes_included(proj, agent, repo):
    blocked_with(
        proj,
        agent,
        "rr",
        [
            {"init": True},
            {"write": {"path": "done.txt", "content": "c"}},
            {"commit": "committed"},
            {"write": {"path": "wip.txt", "content": "w"}},
            {"result": "half done"},
        ],
    )
    ended = tasks.abandon(proj, "rr", reason="wrong approach", actor=Actor.HUMAN, how="reject")
    assert ended.task.status is Status.ABANDONED and ended.archived
    assert not proj.paths.worktree("rr").exists()
    reopened = tasks.reopen(proj, "rr", reason=None, actor=Actor.HUMAN)
    assert reopened.status is Status.BLOCKED
    wt = proj.paths.worktree("rr")
    assert (wt / "done.txt").read_text() == "c" and (wt / "wip.txt").read_text() == "w"
    threading.enumerate()  # keep threading imported for readers of concurrent tests


def test_the_optional_pre_accept_turn_runs_first_and_the_merge_follows(proj, agent, repo, monkeypatch):
    monkeypatch.setenv("CORRAL_PRE_ACCEPT_PROMPT", "Last look: run the tests and commit any fix.")
    from tests.turns.conftest import reopen

    proj = reopen(proj)
    blocked_with(
        proj,
        agent,
        "pre",
        work("p.py", "p = 1\n"),
        [
            {"init": True},
            {"write": {"path": "p.py", "content": "p = 2\n"}},
            {"commit": "last fix"},
            {"result": "Tests pass."},
        ],
    )
    events: list[dict] = []
    result = accepting.accept(proj, "pre", actor=Actor.HUMAN, report=events.append)
    assert result.task.status is Status.COMPLETE
    assert agent.calls()[-1]["prompt"] == "Last look: run the tests and commit any fix."
    assert git(repo, "show", "main:p.py") == "p = 2"  # the pre-accept turn's commit was merged
    plan = next(e for e in events if e["event"] == "plan")
    assert plan["phases"][0]["id"] == "pre-accept"
    with proj.store.read() as tx:
        history = tx.turns(result.task.id)
        changes = [(c.from_status, c.to_status) for c in tx.status_changes(result.task.id)]
    assert [t.kind for t in history][-2:] == ["pre-accept", "pre-accept"]
    assert (Status.WORKING, Status.BLOCKED) in changes and changes[-1] == (Status.MERGING, Status.COMPLETE)
    proj.close()


def test_a_target_moved_under_the_swap_is_merged_again_onto_its_new_tip(proj, agent, repo, monkeypatch):
    base = "".join(f"line {n}\n" for n in range(1, 13))
    (repo / "shared.txt").write_text(base)
    git(repo, "add", "shared.txt")
    git(repo, "commit", "-qm", "shared")
    blocked_with(proj, agent, "moved", work("shared.txt", base.replace("line 1\n", "line 1 by the agent\n")))
    (repo / "shared.txt").write_text(base.replace("line 12\n", "line 12 mine\n"))  # stashed, then popped
    real_hit = accepting.crashpoints.hit
    swaps: list[str] = []

    def person_commits_meanwhile(name: str) -> None:
        if name == "accept.before-update-ref":
            swaps.append(git(repo, "rev-parse", "main"))
            if len(swaps) == 1:  # between the merge and its compare-and-swap, the person commits
                (repo / "other.txt").write_text("the person's commit\n")
                git(repo, "add", "other.txt")
                git(repo, "commit", "-qm", "meanwhile")
        real_hit(name)

    monkeypatch.setattr(accepting.crashpoints, "hit", person_commits_meanwhile)
    result = accepting.accept(proj, "moved", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE and result.conflict is None
    assert len(swaps) == 2 and swaps[1] != swaps[0]  # merged again onto the moved tip
    assert git(repo, "rev-parse", "main^") == swaps[1]
    assert git(repo, "show", "main:other.txt") == "the person's commit"
    assert (repo / "shared.txt").read_text() == base.replace("line 1\n", "line 1 by the agent\n").replace(
        "line 12\n", "line 12 mine\n"
    )
    assert git(repo, "status", "--porcelain") == "M shared.txt"
    assert git(repo, "stash", "list") == ""


def test_a_pop_conflict_is_named_on_the_task_with_the_stash_and_the_command(proj, agent, repo):
    blocked_with(proj, agent, "named", work("README.md", "agent's readme\n"))
    (repo / "README.md").write_text("my local readme\n")
    result = accepting.accept(proj, "named", actor=Actor.HUMAN)
    stash = git(repo, "stash", "list", "--format=%H")
    assert isinstance(result.conflict, accepting.DestinationRestoreConflict)
    assert result.conflict.exit_code == 1 and stash in result.conflict.message
    assert result.conflict.hint == f"Run: {give_back(repo, stash)}"
    with proj.store.read() as tx:
        note = tx.task_by_ref("named").metadata["destination_restore_conflict"]
    assert note["stash"] == stash and note["command"] == give_back(repo, stash)
