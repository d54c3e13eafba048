"""A branch's commit and a worktree's HEAD read from the files give git's own answer: with no git process
in the plain layout, and by asking git wherever the layout is not plain (what an agent could have written
included) — never an answer git would not give."""

from __future__ import annotations

import os
from pathlib import Path

from corral.adapters.git import Git
from corral.adapters.tip_files import branch_commit, commits_of, head_commit, reaches
from tests.conftest import git
from tests.runtime.test_gitfacts_one_scan import logging_git


def asked(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_a_plain_branch_and_head_are_read_with_no_git_process(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "corral/t-1")
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(wt), "corral/t-1")
    (wt / "f.txt").write_text("work\n")
    git(wt, "add", "f.txt")
    git(wt, "commit", "-q", "-m", "work")
    moved = git(wt, "rev-parse", "HEAD")
    assert moved != tip
    assert branch_commit(logged, repo, "corral/t-1") == moved
    assert branch_commit(logged, wt, "corral/t-1") == moved
    assert head_commit(logged, wt) == moved
    assert head_commit(logged, repo) == tip
    git(wt, "checkout", "-q", "--detach", tip)  # a detached HEAD holds the commit's name itself
    assert head_commit(logged, wt) == tip
    assert asked(log) == []


def test_a_packed_branch_is_read_from_packed_refs_and_a_loose_file_shadows_it(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "corral/t-1")
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "corral" / "t-1").exists()
    assert branch_commit(logged, repo, "corral/t-1") == tip
    (repo / "g.txt").write_text("more\n")
    git(repo, "add", "g.txt")
    git(repo, "commit", "-q", "-m", "more")
    newer = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/heads/corral/t-1", newer)  # loose again, packed line still the old commit
    assert branch_commit(logged, repo, "corral/t-1") == newer == Git().rev_parse("refs/heads/corral/t-1", cwd=repo)
    assert asked(log) == []


def test_what_is_not_plain_goes_to_git_and_gets_its_answer(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    real = Git()
    tip = git(repo, "rev-parse", "HEAD")
    heads = repo / ".git" / "refs" / "heads"
    blob = git(repo, "hash-object", "-w", "--stdin")  # an empty blob: a branch that names no commit
    (heads / "corral").mkdir(exist_ok=True)
    (heads / "corral" / "blob").write_text(f"{blob}\n")
    (heads / "corral" / "sym").write_text("ref: refs/heads/main\n")  # a symbolic ref an agent wrote
    (heads / "corral" / "junk").write_text("not an object name\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t-2").write_text(f"{tip}\n")
    os.symlink(elsewhere, heads / "linked")  # a linked directory among the refs
    cases = ["corral/blob", "corral/sym", "corral/junk", "linked/t-2", "corral/none", "corral/../main"]
    for name in cases:
        assert branch_commit(logged, repo, name) == real.rev_parse(f"refs/heads/{name}", cwd=repo), name
    assert asked(log) == ["rev-parse"] * len(cases)


def test_a_head_that_is_not_plain_goes_to_git(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    real = Git()
    head = repo / ".git" / "HEAD"
    blob = git(repo, "hash-object", "-w", "--stdin")
    for text in (f"{blob}\n", "ref: refs/remotes/origin/main\n", "ref:  refs/heads/main \n\n"):
        head.write_text(text)
        assert head_commit(logged, repo) == real.rev_parse("HEAD", cwd=repo), text
    assert asked(log) == ["rev-parse"] * 3


def test_a_loose_commit_that_is_packed_away_is_asked_of_git(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    git(repo, "branch", "corral/t-1")
    git(repo, "gc", "-q")  # the commit is packed now: only git reads packs
    assert branch_commit(logged, repo, "corral/t-1") == git(repo, "rev-parse", "HEAD")
    assert asked(log) == ["rev-parse"]


def test_an_ancestor_found_down_the_loose_commits_needs_no_git_and_a_no_is_git_s(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    real = Git()
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "corral/t-1")
    for n in range(3):
        (repo / f"n{n}.txt").write_text(f"{n}\n")
        git(repo, "add", f"n{n}.txt")
        git(repo, "commit", "-q", "-m", f"n{n}")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/heads/corral/t-1", tip)
    git(repo, "update-ref", "refs/heads/old", base)
    assert reaches(logged, repo, "refs/heads/old", tip) is True  # three commits down
    assert reaches(logged, repo, "refs/heads/corral/t-1", tip) is True  # the very commit
    assert asked(log) == []
    git(repo, "update-ref", "refs/heads/newer", tip)
    assert reaches(logged, repo, "refs/heads/newer", base) is real.is_ancestor("refs/heads/newer", base, cwd=repo)
    assert asked(log) == ["merge-base"]  # a "no" is never taken from the walk


def test_history_git_could_see_otherwise_is_asked_of_git(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    real = Git()
    base = git(repo, "rev-parse", "HEAD")
    (repo / "x.txt").write_text("x\n")
    git(repo, "add", "x.txt")
    git(repo, "commit", "-q", "-m", "x")
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/heads/old", base)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "grafts").write_text(f"{tip}\n")  # tip has no parent, as git reads it now
    assert reaches(logged, repo, "refs/heads/old", tip) is real.is_ancestor("refs/heads/old", tip, cwd=repo)
    (repo / ".git" / "info" / "grafts").unlink()
    git(repo, "replace", "--graft", tip)  # the same by a replace ref
    assert reaches(logged, repo, "refs/heads/old", tip) is real.is_ancestor("refs/heads/old", tip, cwd=repo) is False
    git(repo, "replace", "-d", tip)
    git(repo, "gc", "-q")  # packed commits: only git reads them
    assert reaches(logged, repo, "refs/heads/old", tip) is True
    assert asked(log) == ["merge-base"] * 3


def test_a_branch_and_its_verified_tip_are_read_together_or_both_asked_of_git(repo: Path, tmp_path: Path) -> None:
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "corral/t-1")
    names = ["refs/heads/corral/t-1", "refs/corral/verified/t-1"]
    assert commits_of(repo, names) is None  # no verified tip yet (a first turn): git lists what there is
    git(repo, "update-ref", "refs/corral/verified/t-1", tip)
    assert commits_of(repo, names) == dict.fromkeys(names, tip)
    (repo / ".git" / "refs" / "heads" / "corral" / "t-1").write_text("ref: refs/heads/main\n")
    assert commits_of(repo, names) is None  # a symbolic ref: git says what it is (and the check puts it back)
    assert commits_of(repo, ["refs/remotes/origin/main"]) is None  # only branches and verified tips are read
