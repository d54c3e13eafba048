"""The ``remote`` setting is checked against ``git remote`` once while the repository's configuration stays as
it was: a worker asks for it several times a turn, and a remote removed, renamed or added since is asked of git
again, so a removed one is refused as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.engine.git_remote import remote_name
from corral.engine.project import Project
from corral.errors import CorralError
from tests.conftest import git
from tests.runtime.test_gitfacts_one_scan import logging_git


@pytest.fixture
def counted(repo: Path, tmp_path: Path) -> Iterator[tuple[Project, Path]]:
    """A project on ``repo`` (with a remote ``origin``) whose git logs each subcommand it runs."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git_, log = logging_git(tmp_path)
    project = Project.open(repo, git=git_)
    log.write_text("")
    yield project, log
    project.close()


def asked(log: Path) -> int:
    return log.read_text().split().count("remote")


def test_a_remote_listed_once_is_not_listed_again_while_the_configuration_is_unchanged(counted):
    project, log = counted
    assert [remote_name(project) for _ in range(5)] == ["origin"] * 5
    assert asked(log) == 1


def test_a_removed_remote_is_refused_after_it_was_remembered(counted, repo):
    project, log = counted
    assert remote_name(project) == "origin"
    git(repo, "remote", "remove", "origin")
    with pytest.raises(CorralError) as caught:
        remote_name(project)
    assert caught.value.code == "no-remote" and "no remote named origin" in caught.value.message
    assert asked(log) == 2
    with pytest.raises(CorralError):  # a refusal is never remembered: asked again, refused again
        remote_name(project)
    assert asked(log) == 3


def test_a_renamed_remote_is_refused_and_one_added_back_is_found(counted, repo, tmp_path):
    project, log = counted
    assert remote_name(project) == "origin"
    git(repo, "remote", "rename", "origin", "upstream")
    with pytest.raises(CorralError) as caught:
        remote_name(project)
    assert caught.value.code == "no-remote"
    git(repo, "remote", "add", "origin", str(tmp_path / "origin.git"))
    assert remote_name(project) == "origin"
    assert remote_name(project) == "origin"
    assert asked(log) == 3  # the first, the refusal, the one added back; then remembered again


def test_a_remote_removed_from_the_user_configuration_is_refused(counted, repo, tmp_path):
    """A remote git finds in the person's own configuration (``GIT_CONFIG_GLOBAL``) is forgotten when it goes."""
    project, log = counted
    git(repo, "remote", "remove", "origin")
    git(repo, "config", "--global", "remote.origin.url", str(tmp_path / "origin.git"))
    assert remote_name(project) == "origin"
    assert remote_name(project) == "origin"
    assert asked(log) == 1
    git(repo, "config", "--global", "--remove-section", "remote.origin")
    with pytest.raises(CorralError) as caught:
        remote_name(project)
    assert caught.value.code == "no-remote"


def test_a_configuration_that_includes_another_file_is_asked_of_git_every_time(counted, repo, tmp_path):
    """An included file's change would not show in the repository's own: nothing is remembered then."""
    project, log = counted
    included = tmp_path / "remotes.inc"
    included.write_text(f'[remote "mirror"]\n\turl = {tmp_path / "origin.git"}\n')
    git(repo, "config", "include.path", str(included))
    project.config.values["remote"] = type(project.config.values["remote"])("mirror", "user", "a test")
    assert remote_name(project) == "mirror"
    assert remote_name(project) == "mirror"
    assert asked(log) == 2
    included.write_text("")  # the remote gone, the repository's own config untouched
    with pytest.raises(CorralError) as caught:
        remote_name(project)
    assert caught.value.code == "no-remote"


def test_configuration_given_in_the_environment_is_asked_of_git_every_time(counted, monkeypatch):
    project, log = counted
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "remote.extra.url")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "/nowhere")
    assert remote_name(project) == "origin"
    assert remote_name(project) == "origin"
    assert asked(log) == 2
