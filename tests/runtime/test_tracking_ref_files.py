"""Any ref a worker's turn asks after (a branch, a remote-tracking ref) read from the files gives git's own answer,
a ref that is not there at all included: with no git process in the plain layout, and by asking git wherever it
is not plain."""

from __future__ import annotations

from pathlib import Path

from corral.adapters.git import Git
from corral.adapters.tip_files import ref_absent, ref_commit
from tests.conftest import git
from tests.runtime.test_gitfacts_one_scan import logging_git


def asked(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_a_remote_tracking_ref_and_an_absent_one_are_read_with_no_git_process(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/corral/t-1", tip)
    assert ref_commit(logged, repo, "refs/remotes/origin/corral/t-1") == tip
    for absent in ("refs/remotes/origin/corral/t-2", "refs/remotes/elsewhere/main", "refs/heads/corral/none"):
        assert ref_commit(logged, repo, absent) is None
        assert ref_absent(repo, absent)
        assert Git().rev_parse(absent, cwd=repo) is None  # git's own answer
    assert not ref_absent(repo, "refs/remotes/origin/corral/t-1")
    assert asked(log) == []


def test_a_packed_tracking_ref_is_there_and_its_packed_commit_is_asked_of_git(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    tip = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/main", tip)
    git(repo, "gc", "-q")  # the ref into packed-refs, the commit into a pack
    assert not (repo / ".git" / "refs" / "remotes" / "origin" / "main").exists()
    assert not ref_absent(repo, "refs/remotes/origin/main")
    assert asked(log) == []
    assert ref_commit(logged, repo, "refs/remotes/origin/main") == tip
    assert asked(log) == ["rev-parse"]  # a packed commit: git says it is one


def test_what_is_not_plain_goes_to_git_and_is_never_taken_for_absent(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    real = Git()
    tip = git(repo, "rev-parse", "HEAD")
    remotes = repo / ".git" / "refs" / "remotes"
    remotes.mkdir(parents=True, exist_ok=True)
    (remotes / "blocked").write_text(f"{tip}\n")  # a file where a directory of the name would be
    (remotes / "symbolic").write_text("ref: refs/heads/main\n")
    (remotes / "garbage").write_text("not an object name\n")
    (remotes / "linked").symlink_to(repo / ".git" / "refs" / "heads" / "main")
    git(repo, "tag", "-a", "-m", "a tag", "v1")
    git(repo, "update-ref", "refs/remotes/tagged", git(repo, "rev-parse", "v1"))
    for ref in (
        "refs/remotes/blocked/main",
        "refs/remotes/symbolic",
        "refs/remotes/garbage",
        "refs/remotes/linked",
        "refs/remotes/tagged",  # a tag: ``^{commit}`` peels it, git's to say
        "refs/tags/v1",  # outside the namespaces read
        "refs/remotes/origin/x.lock",  # a name git would refuse
    ):
        log.write_text("")
        assert ref_commit(logged, repo, ref) == real.rev_parse(ref, cwd=repo), ref
        assert asked(log) == ["rev-parse"], ref
        assert not ref_absent(repo, ref), ref


def test_a_reftable_repository_is_asked_of_git(repo: Path, tmp_path: Path) -> None:
    logged, log = logging_git(tmp_path)
    (repo / ".git" / "reftable").mkdir()  # git reads refs from there, not from the files read here
    assert not ref_absent(repo, "refs/remotes/origin/none")
    assert ref_commit(logged, repo, "refs/remotes/origin/none") is None
    assert asked(log) == ["rev-parse"]
