"""The merged-branch sweep asks git once per target, not once per task, and means exactly what it meant.

Merged: the branch has commits beyond its session's base and its target contains the tip,
or the target carries a commit whose trailers name the task and its current session.
Real repositories, real branches, a real store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.git import Git
from corral.domain.actors import Actor, Role
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.project import Project
from corral.engine.recovery.merged import sweep_merged_branches
from corral.store import NewTask
from tests.conftest import git


class CountingGit(Git):
    """The real git, with every subcommand it ran remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def run(self, *args: str, **kw: Any) -> Any:
        self.calls.append(args[0])
        return super().run(*args, **kw)


@pytest.fixture
def proj(repo: Path) -> Any:
    p = Project.open(repo, git=CountingGit())
    yield p
    p.close()


def resting(proj: Project, ref: str, *, parent: Task | None = None, commits: int = 1) -> Task:
    """A blocked task whose branch holds ``commits`` commits beyond its session's base, after an agent turn."""
    repo = proj.repo
    start = parent.branch if parent else "main"
    base = git(repo, "rev-parse", start)
    git(repo, "branch", f"corral/{ref}", base)
    for n in range(commits):
        tree = git(repo, "write-tree")
        tip = git(repo, "rev-parse", f"corral/{ref}")
        sha = git(repo, "commit-tree", tree, "-p", tip, "-m", f"{ref} work {n}")
        git(repo, "update-ref", f"refs/heads/corral/{ref}", sha)
    with proj.store.write() as tx:
        task = tx.insert_task(
            NewTask(ref=ref, goal=f"Goal of {ref}", target_branch="main", parent_id=parent.id if parent else None),
            Actor.HUMAN,
        )
        session = tx.insert_session(task.id, branch=f"corral/{ref}", base_commit=base)
        tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        # its agent answered: a task no agent worked on is never completed by the sweep
        tx.add_turn(task.id, role=Role.AGENT, kind="work", content="Done.", session_id=session.id)
        tx.park(task.id, Actor.SYSTEM, "turn ended")
        found = tx.get_task(task.id)
    assert found is not None and found.status is Status.BLOCKED
    return found


def status(proj: Project, task: Task) -> Status:
    with proj.store.read() as tx:
        found = tx.get_task(task.id)
    assert found is not None
    return found.status


def move_main(proj: Project, message: str = "moved", trailers: str = "") -> None:
    repo = proj.repo
    tree = git(repo, "write-tree")
    body = f"{message}\n\n{trailers}" if trailers else message
    sha = git(repo, "commit-tree", tree, "-p", "main", "-m", body)
    git(repo, "update-ref", "refs/heads/main", sha)


def seen(proj: Project) -> dict[str, str]:
    path = proj.paths.merged_sweep
    doc = json.loads(path.read_text()) if path.exists() else {}
    return {k: v for k, v in doc.items() if k != "protocol_version"}


def calls(proj: Project) -> list[str]:
    counted = proj.git
    assert isinstance(counted, CountingGit)
    out, counted.calls = counted.calls, []
    return out


def test_merged_means_work_on_the_target_by_its_tip_or_by_trailers_naming_task_and_session(proj: Project) -> None:
    repo = proj.repo
    by_tip = resting(proj, "by-tip")
    unmerged = resting(proj, "unmerged")
    empty = resting(proj, "empty", commits=0)  # no commits beyond its base: nothing to have merged
    squashed = resting(proj, "squashed")
    old_session = resting(proj, "old-session")
    took_upstream = resting(proj, "took-upstream", commits=0)
    squashed_session, old_session_id = squashed.session_id, old_session.session_id
    assert squashed_session and old_session_id
    move_main(proj, "upstream work")
    # The task branch takes its target in with a merge commit: still nothing of its own on main.
    tree = git(repo, "write-tree")
    merge = git(repo, "commit-tree", tree, "-p", "corral/took-upstream", "-p", "main", "-m", "merge main")
    git(repo, "update-ref", "refs/heads/corral/took-upstream", merge)
    git(repo, "merge", "-q", "--ff", "corral/by-tip")  # main now contains by-tip's tip
    move_main(proj, "squash", f"Corral-Task: {squashed.id}\nCorral-Session: {squashed_session}")
    move_main(proj, "stale", f"Corral-Task: {old_session.id}\nCorral-Session: not-{old_session_id}")

    assert sweep_merged_branches(proj) == 2
    assert status(proj, by_tip) is Status.COMPLETE
    assert status(proj, squashed) is Status.COMPLETE
    for task in (unmerged, empty, old_session, took_upstream):
        assert status(proj, task) is Status.BLOCKED, task.ref
    assert set(seen(proj)) == {unmerged.id, empty.id, old_session.id, took_upstream.id}
    assert "merge-base" not in calls(proj)


def test_git_is_asked_once_per_target_however_many_tasks_rest_on_it(proj: Project) -> None:
    tasks = [resting(proj, f"task-{n}") for n in range(12)]
    parent = tasks[0]
    subtasks = [resting(proj, f"sub-{n}", parent=parent) for n in range(5)]
    calls(proj)

    assert sweep_merged_branches(proj) == 0
    made = calls(proj)
    # All heads read from the repository's files (no process); then per target (main, the parent's
    # branch): which branches it contains, its trailers.
    assert made.count("for-each-ref") == 2 and made.count("log") == 2 and len(made) == 4

    assert sweep_merged_branches(proj) == 0  # nothing moved: only the heads are read, from their files
    assert calls(proj) == []

    move_main(proj)
    git(proj.repo, "merge", "-q", "--ff", f"corral/{tasks[3].ref}")
    assert sweep_merged_branches(proj) == 1
    made = calls(proj)
    # Only main moved: the commits it gained since the last look (every branch was found not on its
    # earlier tip, so it holds one now only if among them) and its trailers, once; and for the one
    # contained task alone, how its branch and main reached the tip (two reflog reads), and its
    # branch's value read once more to delete it by compare-and-swap (adapters/branches) — never a
    # call per resting task.
    assert made.count("rev-list") == 1 and made.count("for-each-ref") == 1 and made.count("log") == 1 + 2
    assert status(proj, tasks[3]) is Status.COMPLETE
    assert all(status(proj, t) is Status.BLOCKED for t in tasks if t is not tasks[3])
    assert all(status(proj, t) is Status.BLOCKED for t in subtasks)


def test_a_branch_merged_into_its_parent_completes_and_the_others_stay(proj: Project) -> None:
    parent = resting(proj, "parent")
    kid = resting(proj, "kid", parent=parent)
    other = resting(proj, "other-kid", parent=parent)
    git(proj.repo, "update-ref", "refs/heads/corral/parent", git(proj.repo, "rev-parse", "corral/kid"))
    assert sweep_merged_branches(proj) == 1
    assert (status(proj, kid), status(proj, other), status(proj, parent)) == (
        Status.COMPLETE,
        Status.BLOCKED,
        Status.BLOCKED,
    )


def test_what_the_sweep_remembers_is_only_its_current_candidates(proj: Project) -> None:
    a, b, c = (resting(proj, ref) for ref in ("a-task", "b-task", "c-task"))
    assert sweep_merged_branches(proj) == 0
    assert set(seen(proj)) == {a.id, b.id, c.id}
    tip = git(proj.repo, "rev-parse", "main")
    assert seen(proj)[a.id] == f"{tip}:{git(proj.repo, 'rev-parse', 'corral/a-task')}:{a.session_id}"

    with proj.store.write() as tx:  # closed by hand: no longer a candidate
        tx.set_status(b.id, Status.ABANDONED, Actor.HUMAN, "not needed")
    git(proj.repo, "merge", "-q", "--ff", "corral/c-task")  # merged: completes, then is no candidate
    assert sweep_merged_branches(proj) == 1
    assert set(seen(proj)) == {a.id}

    with proj.store.write() as tx:
        tx.set_status(a.id, Status.ABANDONED, Actor.HUMAN, "not needed either")
    assert sweep_merged_branches(proj) == 0
    assert seen(proj) == {}


def test_a_branch_that_moved_on_is_looked_at_again(proj: Project) -> None:
    task = resting(proj, "moving")
    assert sweep_merged_branches(proj) == 0
    before = seen(proj)[task.id]
    repo = proj.repo
    tree = git(repo, "write-tree")
    sha = git(repo, "commit-tree", tree, "-p", "corral/moving", "-m", "more work")
    git(repo, "update-ref", "refs/heads/corral/moving", sha)
    calls(proj)
    assert sweep_merged_branches(proj) == 0
    # main did not move: its trailers were read at the last look; whether it holds the new tip is asked
    assert calls(proj) == ["for-each-ref"] and seen(proj)[task.id] != before
    git(repo, "merge", "-q", "--ff", "corral/moving")
    assert sweep_merged_branches(proj) == 1
    assert status(proj, task) is Status.COMPLETE
