"""A worker's turn asks git each fact once: what its host holds already (the branch, the remote-tracking refs,
the worktree's ``HEAD`` and its tree) is read from the files where they are plain, the remote's WIP ref is taken
from the claim's one ``ls-remote``, and a ref not there is not deleted again. Whatever changed since (the remote
moved, its WIP went, a commit was packed away) is still seen, and asked of git where the files do not say."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.domain.records import Task
from corral.engine.git_remote import remote_name
from corral.engine.project import Project
from corral.engine.shared_store import remote_branches as remote
from corral.errors import GitError
from tests.conftest import git
from tests.runtime.test_gitfacts_one_scan import logging_git


@pytest.fixture
def shared(corral: Any, repo: Path, tmp_path: Path) -> Iterator[tuple[Project, Task, Path, Path]]:
    """A task of ``repo`` whose branch is on a bare remote, with a project whose git logs each subcommand."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "main")
    corral.ok("create", "Task", "--ref", "t")
    logged, log = logging_git(tmp_path)
    project = Project.open(repo, git=logged)
    with project.store.read() as tx:
        task = tx.task_by_ref("t")
    assert isinstance(task, Task)
    git(repo, "branch", "-f", task.branch, "main")
    git(repo, "push", "-q", "origin", task.branch)
    git(repo, "update-ref", "-d", f"refs/remotes/origin/{task.branch}")  # this host has never fetched it
    assert remote_name(project) == "origin"  # listed once for the whole test
    log.write_text("")
    try:
        yield project, task, bare, log
    finally:
        project.close()


def asked(log: Path) -> list[str]:
    return log.read_text().split()


def commit_in(where: Path, name: str) -> str:
    (where / name).write_text(f"{name}\n")
    git(where, "add", name)
    git(where, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-m", name)
    return git(where, "rev-parse", "HEAD")


def work_on_branch(repo: Path, branch: str) -> str:
    """A commit on ``branch``, made in a worktree of it beside the repository (the task's turn, by hand)."""
    wt = repo.parent / "task-wt"
    git(repo, "worktree", "add", "-q", str(wt), branch)
    return commit_in(wt, "work.txt")


def test_a_fetch_asks_the_remote_once_and_fetches_only_what_this_host_lacks(shared, repo):
    project, task, _bare, log = shared
    main = git(repo, "rev-parse", "main")
    fetched = remote.fetch(project, task, "main")
    assert (fetched.branch, fetched.wip, fetched.target) == (main, None, main)
    assert git(repo, "rev-parse", f"refs/remotes/origin/{task.branch}") == main
    # No WIP ref there or here: nothing deleted; the tracking refs read from their files. The branch is at the
    # target's tip, which this host's tracking ref of the target holds already: its own is set, nothing fetched.
    assert asked(log) == ["ls-remote", "update-ref"]
    log.write_text("")
    assert remote.fetch(project, task, "main") == fetched
    assert asked(log) == ["ls-remote"]  # nothing new: nothing fetched


def test_a_fetch_follows_the_remote_when_its_branch_moves_and_its_wip_comes_and_goes(shared, repo, tmp_path):
    project, task, bare, log = shared
    remote.fetch(project, task, "main")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(bare), str(other))
    git(other, "checkout", "-q", task.branch)
    moved = commit_in(other, "moved.txt")
    git(other, "push", "-q", "origin", f"HEAD:refs/heads/{task.branch}", f"HEAD:{remote.wip_ref(task)}")
    fetched = remote.fetch(project, task, "main")
    assert (fetched.branch, fetched.wip) == (moved, moved)
    assert git(repo, "rev-parse", f"refs/remotes/origin/{task.branch}", f"refs/corral/remote-wip/{task.ref}") == (
        f"{moved}\n{moved}"
    )
    git(other, "push", "-q", "origin", f":{remote.wip_ref(task)}")
    log.write_text("")
    assert remote.fetch(project, task, "main").wip is None
    assert asked(log) == ["ls-remote", "update-ref"]  # the WIP ref here goes with the remote's
    assert not git(repo, "for-each-ref", f"refs/corral/remote-wip/{task.ref}")


def test_a_branch_push_reads_its_tip_from_the_files_and_a_packed_one_from_git(shared, repo):
    project, task, bare, log = shared
    main = git(repo, "rev-parse", "main")
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # the task has none yet
    tip = work_on_branch(repo, task.branch)
    log.write_text("")
    assert remote.push_branch(project, task, main) == tip
    assert git(bare, "rev-parse", f"refs/heads/{task.branch}") == tip
    assert git(repo, "rev-parse", f"refs/remotes/origin/{task.branch}") == tip
    assert asked(log) == ["push"]  # the push set the tracking ref itself (the remote's fetch refspec maps it)
    git(repo, "gc", "-q")  # the branch and its commit packed away: git says which commit it names
    log.write_text("")
    assert remote.push_branch(project, task, tip) == tip
    assert asked(log) == ["rev-parse", "rev-parse"]  # the branch, then its tracking ref: both there already


def test_a_branch_push_sets_the_tracking_ref_where_the_remotes_refspec_does_not_map_it(shared, repo):
    project, task, bare, log = shared
    main = git(repo, "rev-parse", "main")
    git(repo, "config", "remote.origin.fetch", "+refs/heads/main:refs/remotes/origin/main")  # main alone
    tip = work_on_branch(repo, task.branch)
    log.write_text("")
    assert remote.push_branch(project, task, main) == tip
    assert git(bare, "rev-parse", f"refs/heads/{task.branch}") == tip
    assert git(repo, "rev-parse", f"refs/remotes/origin/{task.branch}") == tip
    assert asked(log) == ["remote", "push", "update-ref"]  # the configuration changed: the remote listed again


def test_a_snapshot_reads_head_and_its_tree_from_the_files_and_still_sees_every_change(shared, repo):
    project, task, _bare, log = shared
    wt = repo.parent / "snap-wt"
    git(repo, "worktree", "add", "-q", str(wt), task.branch)
    head = commit_in(wt, "work.txt")  # a loose commit, as an agent's turn leaves it
    log.write_text("")
    assert remote.snapshot(project, wt, "wip") is None  # clean
    assert asked(log) == ["read-tree", "add", "write-tree"]
    (wt / "work.txt").write_text("changed\n")
    (wt / "new.txt").write_text("untracked\n")
    sha = remote.snapshot(project, wt, "wip")
    assert sha is not None and git(wt, "rev-parse", f"{sha}^") == head
    assert git(wt, "show", f"{sha}:new.txt") == "untracked"
    git(wt, "checkout", "-q", "--", "work.txt")
    (wt / "new.txt").unlink()
    git(repo, "gc", "-q")  # HEAD's commit packed: git reads it
    log.write_text("")
    assert remote.snapshot(project, wt, "wip") is None
    assert asked(log) == ["rev-parse", "read-tree", "add", "write-tree", "rev-parse"]


def would_prune(repo: Path) -> str:
    """What ``git worktree prune`` would remove, as it says."""
    said = subprocess.run(
        ["git", "worktree", "prune", "--dry-run", "--verbose"], cwd=repo, capture_output=True, text=True
    )
    assert said.returncode == 0, said.stderr
    return said.stdout + said.stderr


def test_worktree_prune_runs_whenever_git_would_prune_anything(repo, tmp_path):
    assert not remote._prune_finds_any(repo) and not would_prune(repo)  # no linked worktree
    for name in ("a", "b", "c"):
        git(repo, "worktree", "add", "-q", "-b", f"w-{name}", str(tmp_path / name))
    assert not remote._prune_finds_any(repo) and not would_prune(repo)  # every one there
    admin = repo / ".git" / "worktrees"
    shutil.rmtree(tmp_path / "a")  # gone by hand: registered, not there
    assert remote._prune_finds_any(repo) and would_prune(repo)
    (admin / "a" / "locked").write_text("kept on purpose\n")
    assert not remote._prune_finds_any(repo) and not would_prune(repo)  # a locked one is never pruned
    (admin / "b" / "gitdir").write_text("\n")  # a gitdir file naming nothing
    assert remote._prune_finds_any(repo) and would_prune(repo)
    (admin / "b" / "gitdir").unlink()
    assert remote._prune_finds_any(repo) and would_prune(repo)
    git(repo, "worktree", "prune")
    assert not remote._prune_finds_any(repo)
    shutil.copytree(admin / "c", admin / "c2")  # a second entry of the same worktree
    assert remote._prune_finds_any(repo) and would_prune(repo)
    git(repo, "worktree", "prune")
    (admin / "stray").write_text("not a directory\n")
    assert remote._prune_finds_any(repo) and would_prune(repo)


def test_a_turns_worktree_is_made_without_a_prune_unless_one_is_owed(shared, repo):
    project, task, _bare, log = shared
    path, fetched = remote.worktree_for_turn(project, task, "main", 1)
    assert git(path, "rev-parse", "HEAD") == fetched.branch
    # Added: nothing to prune, the branch read from files (at the target's tip here: its tracking ref set, not fetched).
    assert asked(log) == ["ls-remote", "update-ref", "worktree"]
    git(repo, "worktree", "remove", "--force", str(path))
    git(repo, "worktree", "add", "-q", "--detach", str(path), "main")
    shutil.rmtree(path)  # the turn's worktree gone by hand, still registered: git refuses to add it again
    log.write_text("")
    again, _ = remote.worktree_for_turn(project, task, "main", 2)
    assert again == path and git(path, "rev-parse", "HEAD") == fetched.branch
    assert asked(log) == ["ls-remote", "worktree", "worktree"]  # pruned first, then added


def test_a_fetch_that_fails_once_is_tried_again_and_one_that_fails_twice_says_git_s_error(shared, repo, tmp_path):
    """A moment's failure (another turn's objects settling as the fetch looked) does not fail a claim."""
    project, task, bare, log = shared
    # The remote's branch holds a commit this host has never seen: it must be fetched.
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "--branch", task.branch, str(bare), str(other))
    commit_in(other, "elsewhere.txt")
    git(other, "push", "-q", "origin", f"HEAD:refs/heads/{task.branch}")
    count = tmp_path / "upload-pack.count"
    flaky = tmp_path / "flaky-upload-pack"
    # The remote's side of each ls-remote and fetch: its second run (the first fetch) fails.
    flaky.write_text(
        "#!/bin/sh\n"
        f'n=$(($(cat "{count}" 2>/dev/null || echo 0) + 1)); echo "$n" > "{count}"\n'
        f'if [ "$n" = "{{fail}}" ]; then echo "fatal: a moment" >&2; exit 1; fi\n'
        'exec git-upload-pack "$@"\n'
    )
    template = flaky.read_text()
    flaky.write_text(template.replace("{fail}", "2"))
    flaky.chmod(0o755)
    git(repo, "config", "remote.origin.uploadpack", str(flaky))
    fetched = remote.fetch(project, task, "main")
    assert fetched.branch == git(repo, "rev-parse", f"refs/remotes/origin/{task.branch}")
    assert asked(log) == ["remote", "ls-remote", "fetch", "fetch"]  # the configuration changed: listed again
    git(repo, "update-ref", "-d", f"refs/remotes/origin/{task.branch}")
    count.unlink()
    flaky.write_text(template.replace('[ "$n" = "{fail}" ]', '[ "$n" -ge 2 ]'))
    with pytest.raises(GitError) as failed:
        remote.fetch(project, task, "main")
    assert failed.value.message.startswith("git fetch failed") and failed.value.hint
