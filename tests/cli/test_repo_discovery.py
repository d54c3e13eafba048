"""Finding the repository a command runs in: read from the file system for the plain layouts, git's
answer (and git's refusals) for everything else.

``adapters.git.read_main_root`` spares every command a ``git rev-parse`` process at start-up; it must
agree with git wherever it answers, and hand every other layout back to git.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from corral.adapters.git import Git, read_main_root
from corral.errors import NotARepository
from corral.testing.fake_runner import FakeRunner
from tests.conftest import CLI, git


def gits_answer(where: Path) -> Path:
    common = git(where, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(common).parent.resolve()


@pytest.fixture
def layouts(repo: Path, tmp_path: Path) -> dict[str, Path]:
    (repo / "src" / "deep").mkdir(parents=True)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "sub").mkdir()
    return {
        "checkout": repo,
        "a directory inside it": repo / "src" / "deep",
        "a linked worktree": linked,
        "a directory inside a linked worktree": linked / "sub",
    }


def test_it_agrees_with_git_for_a_checkout_and_a_linked_worktree(layouts: dict[str, Path]) -> None:
    for name, where in layouts.items():
        assert read_main_root(where) == gits_answer(where), name


def test_a_plain_checkout_is_found_without_a_process(repo: Path) -> None:
    runner = FakeRunner()  # any git process would be refused as a missing program
    assert Git(runner).main_root(repo / ".") == repo.resolve()
    assert runner.calls == []


def test_with_the_discovery_environment_set_git_is_asked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.setenv(name, str(repo / ".git"))
        assert read_main_root(repo) is None, name
        monkeypatch.delenv(name)
    assert read_main_root(repo) == repo.resolve()


def test_a_symlinked_git_directory_is_left_to_git(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "store.git"
    (repo / ".git").rename(elsewhere)
    (repo / ".git").symlink_to(elsewhere)
    assert read_main_root(repo) is None
    with pytest.raises(NotARepository, match="bare repository"):  # git's answer (the link resolved), as before
        Git().main_root(repo)


def test_a_gitdir_file_without_a_commondir_is_left_to_git(repo: Path, tmp_path: Path) -> None:
    # a submodule's layout: .git is a file naming a git directory that is not a worktree's
    outer = tmp_path / "outer"
    moved = tmp_path / "modules" / "inner"
    moved.parent.mkdir()
    repo.rename(outer)
    (outer / ".git").rename(moved)
    (outer / ".git").write_text(f"gitdir: {moved}\n")
    assert read_main_root(outer) is None


def test_a_checkout_owned_by_another_user_is_left_to_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_main_root(repo) == repo.resolve()
    # corral run as another user than the checkout's owner (safe.directory is git's call)
    monkeypatch.setattr(os, "geteuid", lambda: repo.stat().st_uid + 1)
    assert read_main_root(repo) is None


def test_a_git_directory_missing_its_objects_is_left_to_git(repo: Path) -> None:
    (repo / ".git" / "objects").rename(repo / ".git" / "objects-gone")
    assert read_main_root(repo) is None


def test_outside_any_repository_and_in_a_bare_one_the_refusal_is_gits(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert read_main_root(plain) is None and gits_root_or_none(plain) is None
    result = CLI(plain)("list")
    assert result.returncode != 0
    assert "is not inside a git repository" in result.stderr
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    assert read_main_root(bare) is None
    result = CLI(bare)("list")
    assert result.returncode != 0
    assert "is a bare repository" in result.stderr


def gits_root_or_none(where: Path) -> Path | None:
    found = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=where, capture_output=True, text=True
    )
    return Path(found.stdout.strip()).parent.resolve() if found.returncode == 0 else None
