"""accept asks git each fact once: one status scan of the task's worktree, the checked-out target brought along
by one two-tree read-tree before the swap (a stash only where it refuses), the tips and the destination read
from git's own files (refs, loose objects, the worktrees' HEAD files) as git reads them, the verification read
from the squash's object, the branch's retirement one git process. What it still refuses, it refuses as before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from corral.adapters.git import subcommand
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.accept_phases import worktree_on
from corral.engine.recovery import removals
from corral.errors import GitError
from tests.conftest import git


def blocked(proj, agent, ref: str, files: dict[str, str]):  # type: ignore[no-untyped-def]
    steps: list[dict[str, object]] = [{"init": True}]
    steps += [{"write": {"path": path, "content": content}} for path, content in files.items()]
    agent.script([*steps, {"commit": "work"}, {"result": "ok"}])
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    return task


def recorded(proj, monkeypatch) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """Every git command the project's git runs from now on (each still runs as it would)."""
    calls: list[list[str]] = []
    real = proj.git.run

    def run(*args: str, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(list(args))
        return real(*args, **kwargs)

    monkeypatch.setattr(proj.git, "run", run)
    return calls


def commit_file(repo: Path, path: str, content: str) -> None:
    (repo / path).write_text(content)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", f"add {path}")


def test_an_accept_into_a_checked_out_target_scans_once_and_stashes_nothing_it_need_not(  # type: ignore[no-untyped-def]
    proj, agent, repo: Path, monkeypatch
) -> None:
    commit_file(repo, "kept.txt", "base\n")
    commit_file(repo, "merged.txt", "base\n")
    blocked(proj, agent, "once", {"merged.txt": "theirs\n", "added.txt": "added\n"})
    (repo / "kept.txt").write_text("my unstaged edit\n")  # a path the merge does not touch
    (repo / "mine.txt").write_text("my untracked file\n")
    calls = recorded(proj, monkeypatch)
    result = accepting.accept(proj, "once", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE and result.conflict is None and result.warning is None
    names = [subcommand(args) for args in calls]
    assert names.count("status") == 1  # the task's worktree, found clean at pre-flight: the one scan
    assert "for-each-ref" not in names  # the branch and the target, from their files and loose commits
    assert names.count("read-tree") == 1  # brought along before the swap, as merge --squash before commit
    assert not {"stash", "diff-index", "symbolic-ref", "rev-parse"} & set(names)  # nothing asked twice
    assert "worktree" not in names  # the checkouts read, and the removed one forgotten, through git's own files
    assert ["log" in names, names.count("update-ref")] == [False, 2]  # verified from its object; swap, retirement
    assert len(names) == 7  # status, merge-tree, diff (markers), commit-tree, read-tree, update-ref twice
    # the checkout is at the merge, the person's own changes where they were
    assert (repo / "merged.txt").read_text() == "theirs\n" and (repo / "added.txt").read_text() == "added\n"
    assert (repo / "kept.txt").read_text() == "my unstaged edit\n"
    assert (repo / "mine.txt").read_text() == "my untracked file\n"
    assert git(repo, "stash", "list") == ""
    status = git(repo, "status", "--porcelain=v1", "--untracked-files=all")
    assert sorted(line.strip() for line in status.splitlines()) == ["?? mine.txt", "M kept.txt"]


def test_a_file_touched_but_unchanged_where_the_merge_writes_is_still_brought_along(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    commit_file(repo, "touched.txt", "base\n")
    blocked(proj, agent, "touch", {"touched.txt": "theirs\n"})
    os.utime(repo / "touched.txt", (1_000_000_000, 1_000_000_000))  # its stat differs from the index's, not its bytes
    result = accepting.accept(proj, "touch", actor=Actor.HUMAN)
    assert result.conflict is None and result.warning is None
    assert (repo / "touched.txt").read_text() == "theirs\n"
    assert git(repo, "stash", "list") == ""
    assert git(repo, "status", "--porcelain=v1", "--untracked-files=all") == ""


def test_a_local_change_where_the_merge_writes_is_stashed_and_given_back(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    commit_file(repo, "both.txt", "one\ntwo\nthree\nfour\nfive\n")
    blocked(proj, agent, "both", {"both.txt": "ONE\ntwo\nthree\nfour\nfive\n"})
    (repo / "both.txt").write_text("one\ntwo\nthree\nfour\nFIVE, mine\n")
    result = accepting.accept(proj, "both", actor=Actor.HUMAN)
    assert result.conflict is None
    assert (repo / "both.txt").read_text() == "ONE\ntwo\nthree\nfour\nFIVE, mine\n"  # theirs, with mine on top
    assert git(repo, "stash", "list") == ""
    assert git(repo, "status", "--porcelain=v1").strip() == "M both.txt"


def test_the_checkout_of_a_branch_is_found_as_git_lists_it(proj, repo: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for branch in ("side", "far", "detached", "gone"):
        git(repo, "branch", branch, "main")
    git(repo, "worktree", "add", "-q", str(tmp_path / "side wt"), "side")
    git(repo, "worktree", "add", "-q", str(tmp_path / "nested" / "far"), "far")
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "detached-wt"), "detached")
    git(repo, "worktree", "add", "-q", str(tmp_path / "gone-wt"), "gone")
    common = repo / ".git"
    [gone_admin] = [d for d in (common / "worktrees").iterdir() if d.name.startswith("gone")]
    (gone_admin / "gitdir").unlink()  # git cannot tell where it is: it lists it no more
    listed = {
        wt["branch"].removeprefix("refs/heads/"): Path(wt["worktree"])
        for wt in proj.git.worktrees(cwd=repo)
        if "branch" in wt
    }
    assert set(listed) == {"main", "side", "far"}
    for branch in ("main", "side", "far", "detached", "gone", "nowhere"):
        assert worktree_on(proj, branch) == listed.get(branch), branch
    assert worktree_on(proj, "side") == tmp_path / "side wt"


def test_a_branch_that_moved_after_its_removal_was_written_down_is_kept_and_said(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    task = blocked(proj, agent, "late", {"late.txt": "late\n"})
    tip = git(repo, "rev-parse", "refs/heads/corral/late")
    with proj.store.read() as tx:
        worktree = tx.get_session(tx.get_task(task.id).session_id).worktree
    removals.record(proj, task, worktree, "corral/late", tip)
    later = git(repo, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", "made after the note")
    git(repo, "update-ref", "refs/heads/corral/late", later)
    with pytest.raises(GitError) as raised:
        removals.finish(proj, task.id)
    assert raised.value.code == "branch-moved"
    assert git(repo, "rev-parse", "refs/heads/corral/late") == later  # its new commit is never lost
    assert git(repo, "rev-parse", "refs/corral/archive/late") == tip  # what was reviewed is archived
    assert not (proj.paths.root / "removals" / f"{task.id}.json").exists()  # nothing left to finish


def test_the_retirement_is_one_transaction_and_leaves_nothing_of_the_branch(  # type: ignore[no-untyped-def]
    proj, agent, repo: Path, monkeypatch
) -> None:
    task = blocked(proj, agent, "whole", {"whole.txt": "whole\n"})
    tip = git(repo, "rev-parse", "refs/heads/corral/whole")
    git(repo, "update-ref", "refs/corral/verified/whole", tip)
    with proj.store.read() as tx:
        worktree = tx.get_session(tx.get_task(task.id).session_id).worktree
    removals.record(proj, task, worktree, "corral/whole", tip)
    calls = recorded(proj, monkeypatch)
    assert removals.finish(proj, task.id)
    assert [subcommand(args) for args in calls] == ["update-ref"]
    assert str(worktree) not in git(repo, "worktree", "list", "--porcelain")
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)"], cwd=repo, capture_output=True, text=True)
    assert "refs/heads/corral/whole" not in refs.stdout and "refs/corral/verified/whole" not in refs.stdout
    assert git(repo, "rev-parse", "refs/corral/archive/whole") == tip
    assert "archived before accept" in git(repo, "reflog", "-1", "--format=%gs", "refs/corral/archive/whole")
    assert not Path(worktree).exists()


def test_a_worktree_that_names_another_tasks_records_makes_its_removal_forget_only_itself(  # type: ignore[no-untyped-def]
    proj, agent, repo: Path
) -> None:
    first = blocked(proj, agent, "first", {"first.txt": "first\n"})
    second = blocked(proj, agent, "second", {"second.txt": "second\n"})
    with proj.store.read() as tx:
        worktrees = {
            t.ref: Path(tx.get_session(t.session_id).worktree) for t in (tx.get_task(first.id), tx.get_task(second.id))
        }
    # the first worktree's .git, which its agent could write, names the second's administrative directory
    (worktrees["first"] / ".git").write_text((worktrees["second"] / ".git").read_text())
    tip = git(repo, "rev-parse", "refs/heads/corral/first")
    removals.record(proj, first, str(worktrees["first"]), "corral/first", tip)
    assert removals.finish(proj, first.id)
    listed = git(repo, "worktree", "list", "--porcelain")
    assert str(worktrees["first"]) not in listed and str(worktrees["second"]) in listed
    assert git(repo, "-C", str(worktrees["second"]), "status", "--porcelain") == ""  # its records intact
    assert git(repo, "-C", str(worktrees["second"]), "rev-parse", "HEAD") == git(
        repo, "rev-parse", "refs/heads/corral/second"
    )


def test_the_target_under_its_lock_is_pre_flights_read_only_while_its_ref_still_holds_it(
    proj, agent, repo: Path
) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "late", {"late.txt": "late\n"})
    ready = accepting.preflight(proj, "late", Actor.HUMAN)
    assert not isinstance(ready, accepting.Accepted)
    seen = (git(repo, "rev-parse", "main"), git(repo, "rev-parse", "main^{tree}"))
    assert ready.target_seen == seen
    assert accepting._target_now(proj, "main", seen) == seen
    commit_file(repo, "meanwhile.txt", "landed after pre-flight\n")  # the target moves before the lock
    now = (git(repo, "rev-parse", "main"), git(repo, "rev-parse", "main^{tree}"))
    assert accepting._target_now(proj, "main", seen) == now
    git(repo, "pack-refs", "--all")  # a packed ref is read as git reads it
    assert accepting._target_now(proj, "main", seen) == now
    result = accepting.accept(proj, "late", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "rev-parse", "main^") == now[0]  # merged onto the target as it is, nothing of it lost
    assert (repo / "meanwhile.txt").read_text() == "landed after pre-flight\n"
    assert (repo / "late.txt").read_text() == "late\n"


def test_a_repository_on_another_filesystem_than_corrals_state_has_its_worktree_forgotten_all_the_same(  # type: ignore[no-untyped-def]
    agent, repo: Path, monkeypatch
) -> None:
    """git's record of a worktree lives in the repository's ``.git``, the trash in corral's state: on two
    filesystems the record cannot be renamed into the trash, and git is asked to forget the worktree."""
    import shutil
    import tempfile

    from corral.engine.project import Project

    far = Path(tempfile.mkdtemp(prefix="corral-far-", dir="/dev/shm"))
    try:
        moved = far / "repo"
        shutil.copytree(repo, moved, symlinks=True)
        monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
        proj = Project.open(moved)
        try:
            assert os.stat(moved).st_dev != os.stat(proj.paths.worktrees.parent).st_dev
            blocked(proj, agent, "far", {"far.txt": "far\n"})
            result = accepting.accept(proj, "far", actor=Actor.HUMAN)
            assert result.task.status is Status.COMPLETE and result.warning is None
            assert (moved / "far.txt").read_text() == "far\n"
            listed = git(moved, "worktree", "list", "--porcelain")
            assert [line for line in listed.splitlines() if line.startswith("worktree ")] == [f"worktree {moved}"]
            assert removals.sweep(proj) == 0  # nothing left half removed
        finally:
            proj.close()
    finally:
        shutil.rmtree(far, ignore_errors=True)
