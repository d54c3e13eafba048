"""The merged-branch sweep remembers what it looked at across a task's turns, and still sees every change.

A crash → resume takes a task working → interrupted → working → blocked: each time it comes
back to rest with its branch and its target where they were, git's answer is the one already
found, and asking again (a ``for-each-ref --merged``, a ``log -n500`` of the target) was the
largest git cost of a resume. What git said depends only on the two tips and the session; what
may veto a completion (uncommitted work, no agent turn, a follow of the target) can change during
a turn, so only a plain "not on the target" outlives the rest it was found in.
Real repositories, real branches, a real store; the git processes are counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor, Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.recovery.merged import sweep_merged_branches
from corral.engine.recovery.reconcile import reconcile
from tests.conftest import git
from tests.perf_batched.test_merged_sweep import CountingGit, calls, move_main, resting, seen, status


@pytest.fixture
def proj(repo: Path) -> Any:
    p = Project.open(repo, git=CountingGit())
    yield p
    p.close()


def works(proj: Project, task: Task) -> None:
    """The task's next turn starts (unblock, resume): it leaves the sweep's candidates."""
    with proj.store.write() as tx:
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "resume")


def rests(proj: Project, task: Task, how: Status = Status.INTERRUPTED, *, answered: bool = False) -> None:
    """The turn ends (a crash: interrupted; or its agent answered and it parks blocked)."""
    with proj.store.write() as tx:
        if answered:
            tx.add_turn(task.id, role=Role.AGENT, kind="work", content="Done.", session_id=task.session_id)
        if how is Status.INTERRUPTED:
            tx.set_status(task.id, Status.INTERRUPTED, Actor.SYSTEM, "its supervisor died")
        else:
            tx.park(task.id, Actor.SYSTEM, "turn ended")


def commit_on(proj: Project, branch: str, message: str) -> str:
    repo = proj.repo
    tree = git(repo, "write-tree")
    sha = git(repo, "commit-tree", tree, "-p", branch, "-m", message)
    git(repo, "update-ref", f"refs/heads/{branch}", sha)
    return sha


def test_two_passes_with_nothing_changed_start_no_git_at_all(proj: Project) -> None:
    tasks = [resting(proj, f"task-{n}") for n in range(4)]
    calls(proj)
    assert sweep_merged_branches(proj) == 0
    assert calls(proj)  # the first look asks git
    for _ in range(2):
        assert sweep_merged_branches(proj) == 0
        assert calls(proj) == []  # the tips are read from the ref files: no git process
    assert all(status(proj, t) is Status.BLOCKED for t in tasks)


def test_a_whole_reconcile_pass_with_nothing_changed_starts_no_git(proj: Project) -> None:
    resting(proj, "calm")
    reconcile(proj)
    calls(proj)
    reconcile(proj)
    assert calls(proj) == []


def test_a_crash_and_resume_with_nothing_moved_asks_git_nothing_again(proj: Project) -> None:
    task = resting(proj, "crashes")
    other = resting(proj, "stays")
    assert sweep_merged_branches(proj) == 0
    calls(proj)
    # The crash cycle the daemon sees: resumed, crashed, resumed, its turn ends blocked; a pass between each.
    for step in (
        lambda: works(proj, task),
        lambda: rests(proj, task),
        lambda: works(proj, task),
        lambda: rests(proj, task, Status.BLOCKED, answered=True),
    ):
        step()
        assert sweep_merged_branches(proj) == 0
        assert calls(proj) == []
    assert status(proj, task) is Status.BLOCKED and status(proj, other) is Status.BLOCKED
    assert set(seen(proj)) == {task.id, other.id}


def test_a_hand_merge_while_the_task_worked_is_seen_when_it_rests(proj: Project) -> None:
    task = resting(proj, "merged-meanwhile")
    assert sweep_merged_branches(proj) == 0
    works(proj, task)
    assert sweep_merged_branches(proj) == 0
    git(proj.repo, "merge", "-q", "--no-ff", "-m", "merged by hand", f"corral/{task.ref}")
    rests(proj, task, Status.BLOCKED, answered=True)
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE


def test_a_squash_naming_the_session_while_the_task_worked_is_seen(proj: Project) -> None:
    task = resting(proj, "squashed-meanwhile")
    assert sweep_merged_branches(proj) == 0
    works(proj, task)
    move_main(proj, "squash", f"Corral-Task: {task.id}\nCorral-Session: {task.session_id}")
    rests(proj, task)
    calls(proj)
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE


def test_a_branch_moved_while_the_task_worked_is_asked_about_its_new_tip_only(proj: Project) -> None:
    task = resting(proj, "moved-on")
    assert sweep_merged_branches(proj) == 0
    works(proj, task)
    tip = commit_on(proj, f"corral/{task.ref}", "more work")
    rests(proj, task)
    calls(proj)
    assert sweep_merged_branches(proj) == 0
    # Its target did not move: what the target's trailers say was read at the last look; only
    # whether the target holds the new tip is asked.
    assert calls(proj) == ["for-each-ref"]
    assert seen(proj)[task.id].split(":")[1] == tip

    works(proj, task)
    git(proj.repo, "merge", "-q", "--no-ff", "-m", "merged by hand", f"corral/{task.ref}")
    rests(proj, task, Status.BLOCKED, answered=True)
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE


def test_a_veto_found_at_rest_is_looked_at_again_after_the_next_turn(proj: Project) -> None:
    """A merged branch with no agent turn stays (nothing of the task's to complete); once a turn of
    its agent is recorded and it rests again, the same tips complete it."""
    repo = proj.repo
    base = git(repo, "rev-parse", "main")
    git(repo, "branch", "corral/unanswered", base)
    commit_on(proj, "corral/unanswered", "a person's work")
    from corral.store import NewTask

    with proj.store.write() as tx:
        made = tx.insert_task(NewTask(ref="unanswered", goal="g", target_branch="main"), Actor.HUMAN)
        session = tx.insert_session(made.id, branch="corral/unanswered", base_commit=base)
        tx.set_status(made.id, Status.WORKING, Actor.HUMAN, "start")
        tx.park(made.id, Actor.SYSTEM, "turn ended")
        task = tx.get_task(made.id)
    assert task is not None and task.session_id == session.id
    git(repo, "merge", "-q", "--no-ff", "-m", "merged by hand", "corral/unanswered")
    assert sweep_merged_branches(proj) == 0
    assert status(proj, task) is Status.BLOCKED
    works(proj, task)
    assert sweep_merged_branches(proj) == 0
    rests(proj, task, Status.BLOCKED, answered=True)
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE


def test_a_task_that_ends_is_forgotten_and_a_new_session_is_looked_at_again(proj: Project) -> None:
    done, renewed = resting(proj, "ends"), resting(proj, "renewed")
    assert sweep_merged_branches(proj) == 0
    works(proj, done)
    works(proj, renewed)
    assert sweep_merged_branches(proj) == 0
    assert set(seen(proj)) == {done.id, renewed.id}  # working: still remembered
    rests(proj, done)
    with proj.store.write() as tx:  # it crashed and was abandoned before a pass saw it rest
        tx.set_status(done.id, Status.ABANDONED, Actor.HUMAN, "not needed")
        # its current session now another (insert_session makes it the task's)
        tx.insert_session(renewed.id, branch=f"corral/{renewed.ref}", base_commit=git(proj.repo, "rev-parse", "main"))
    rests(proj, renewed)
    calls(proj)
    assert sweep_merged_branches(proj) == 0
    assert calls(proj)  # another session: another question
    assert set(seen(proj)) == {renewed.id}


def test_a_target_that_moved_is_asked_only_what_it_gained(proj: Project) -> None:
    tasks = [resting(proj, f"many-{n}") for n in range(6)]
    assert sweep_merged_branches(proj) == 0
    move_main(proj, "upstream work")
    calls(proj)
    assert sweep_merged_branches(proj) == 0
    # Every branch was found not on main's last tip: it is on the new one only if among the commits
    # main gained (one rev-list), and main's trailers are read once — nothing per branch.
    assert sorted(calls(proj)) == ["log", "rev-list"]
    assert all(status(proj, t) is Status.BLOCKED for t in tasks)


def test_a_target_put_onto_another_history_holding_the_branch_is_seen(proj: Project) -> None:
    """main moves on, then is reset onto the task's branch (which its last tip never held): the
    commits main gained since are the branch's, so the work is found on it."""
    task = resting(proj, "reset-onto")
    move_main(proj, "upstream work")
    assert sweep_merged_branches(proj) == 0
    git(proj.repo, "update-ref", "refs/heads/main", git(proj.repo, "rev-parse", f"corral/{task.ref}"))
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE


def test_when_the_targets_earlier_tip_is_gone_its_branches_are_asked_as_at_a_first_look(proj: Project) -> None:
    task = resting(proj, "after-gc")
    stays = resting(proj, "stays-after-gc")
    move_main(proj, "upstream work, later thrown away")
    assert sweep_merged_branches(proj) == 0
    repo = proj.repo
    git(repo, "update-ref", "refs/heads/main", "main~1")  # that tip is dropped, and collected
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    git(repo, "merge", "-q", "--no-ff", "-m", "merged by hand", f"corral/{task.ref}")
    calls(proj)
    assert sweep_merged_branches(proj) == 1
    made = calls(proj)
    # rev-list could not say (the earlier tip is gone): one for-each-ref --merged asked instead, and
    # one more reads the completed task's branch to delete it by compare-and-swap.
    assert made.count("rev-list") == 1 and made.count("for-each-ref") == 2
    assert status(proj, task) is Status.COMPLETE and status(proj, stays) is Status.BLOCKED
