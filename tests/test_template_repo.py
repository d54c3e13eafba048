"""The ``repo`` fixture's copy is the repository ``git init``, ``add`` and ``commit`` make, to git too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import template_repo


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def test_a_copy_is_clean_to_git_without_a_refresh(repo_template: Path, tmp_path: Path) -> None:
    copy = template_repo.copy(repo_template, tmp_path / "copy")
    index = (copy / ".git" / "index").read_bytes()

    # diff-index trusts the index's stat data as it is: a copy whose index still described the
    # template's files (another inode, another change time) would show README.md as changed here.
    assert git(copy, "diff-index", "--exit-code", "HEAD").returncode == 0
    assert git(copy, "diff-files", "--exit-code").returncode == 0
    assert git(copy, "status", "--porcelain", "--untracked-files=all").stdout == ""
    assert git(copy, "update-index", "--refresh").returncode == 0
    assert (copy / ".git" / "index").read_bytes() == index, "a refresh found stat data to write"
    assert git(copy, "fsck", "--strict").returncode == 0


def test_a_plain_copy_would_not_be_clean_to_git(repo_template: Path, tmp_path: Path) -> None:
    """Why the copy writes its index: a copy alone has stale stat data that diff-index reports."""
    plain = Path(shutil.copytree(repo_template, tmp_path / "plain", symlinks=True))
    shown = git(plain, "diff-index", "--name-only", "HEAD").stdout.split()
    assert shown == ["README.md"]


def test_the_repo_fixture_is_main_with_one_commit_of_the_readme(repo: Path) -> None:
    assert git(repo, "symbolic-ref", "--short", "HEAD").stdout.strip() == "main"
    assert git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert git(repo, "ls-files").stdout.split() == ["README.md"]
    assert (repo / "README.md").read_text() == "# demo\n"
    author = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s").stdout.strip()
    assert author == "Test Author <author@example.com>|Test Committer <committer@example.com>|initial"
    assert git(repo, "diff-index", "--exit-code", "HEAD").returncode == 0
    assert git(repo, "remote").stdout == ""
