"""A repository that moves keeps its tasks; a copy is told apart; state whose repository is gone is
found by ``doctor`` and archived. Everything through the real CLI, with real git and real turns."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import json_error
from tests.cli.test_cli_turns import fake_env
from tests.conftest import CLI, git

WORK = [
    {"init": True},
    {"write": {"path": "feature.py", "content": "FEATURE = True\n"}},
    {"commit": "add feature"},
    {"result": "Feature added."},
]
MORE = [
    {"init": True},
    {"write": {"path": "more.py", "content": "MORE = 1\n"}},
    {"commit": "add more"},
    {"result": "More added."},
]


def _commits(path: str, message: str) -> list[dict[str, object]]:
    return [{"init": True}, {"write": {"path": path, "content": f"{message}\n"}}, {"commit": message}, {"result": "ok"}]


def _refs(cli: CLI, env: dict[str, str]) -> list[tuple[str, str]]:
    return sorted((t["ref"], t["status"]) for t in cli.json("list", "--all", env=env)["tasks"])


def _state(cli: CLI, env: dict[str, str] | None = None) -> str:
    return str(cli.json("paths", env=env)["paths"]["state"])


def _doctor_projects(cli: CLI, env: dict[str, str] | None = None, *args: str) -> list[dict[str, str]]:
    result = cli("doctor", *args, "--json", env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return [c for c in result.json()["checks"] if c["name"] == "project"]


@pytest.mark.slow
def test_a_moved_repository_keeps_its_tasks_and_an_old_task_still_accepts_and_unblocks(corral, repo, tmp_path):
    env = fake_env(tmp_path, WORK, MORE, _commits("more.py", "more"), _commits("later.py", "later"))
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("create", "Add more", "--ref", "more", env=env)
    corral.ok("create", "Later", "--ref", "later", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    corral.ok("start", "more", "--wait", env=env)
    before = _refs(corral, env)
    assert before == [("feat", "blocked"), ("later", "backlog"), ("more", "blocked")]
    state = _state(corral, env)
    worktree = Path(corral.json("show", "feat", env=env)["task"]["worktree"])

    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    os.rename(repo, moved)
    cli = CLI(moved)
    listed = cli("list", "--all", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert sorted((t["ref"], t["status"]) for t in listed.json()["tasks"]) == before
    assert f"moved from {repo}" in listed.stderr  # said once, on stderr
    assert _state(cli, env) == state  # the same state directory, not a new empty one
    assert "moved from" not in cli.ok("list", env=env).stderr  # the move was recorded: not said again
    # the worktree's link to the repository's git directory followed the move
    assert git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir") == str(moved / ".git")
    assert [c["status"] for c in _doctor_projects(cli, env)] == ["ok"]

    unblocked = cli("unblock", "more", "-m", "once more", "--wait", env=env)
    assert unblocked.returncode == 0, unblocked.stderr
    accepted = cli("accept", "feat", "--json", env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout.splitlines()[-1])["task"]["status"] == "complete"
    assert (moved / "feature.py").read_text() == "FEATURE = True\n"
    assert cli.json("show", "feat", env=env)["task"]["status"] == "complete"
    assert cli.json("diff", "more", env=env)["commits"][-1].endswith("more")  # the unblocked turn committed
    started = cli("start", "later", "--wait", env=env)
    assert started.returncode == 0, started.stderr
    later_wt = Path(cli.json("show", "later", env=env)["task"]["worktree"])
    assert git(later_wt, "rev-parse", "--path-format=absolute", "--git-common-dir") == str(moved / ".git")


@pytest.mark.slow
def test_a_repository_of_an_older_corral_is_adopted_where_its_state_is(corral, repo, tmp_path):
    """State keyed by the path (an older corral's) is adopted in place: nothing renamed, nothing lost."""
    corral.ok("create", "Old task", "--ref", "old")
    state = Path(_state(corral))
    (state / "repository.json").unlink()  # as an older corral left it: no record …
    shutil.rmtree(repo / ".git" / "corral")  # … and no cache in the repository
    assert [t["ref"] for t in corral.json("list")["tasks"]] == ["old"]
    assert _state(corral) == str(state)
    record = json.loads((state / "repository.json").read_text())
    assert record["path"] == str(repo) and record["root_commit"] == git(repo, "rev-list", "--max-parents=0", "HEAD")
    moved = tmp_path / "moved"
    os.rename(repo, moved)
    assert [t["ref"] for t in CLI(moved).json("list")["tasks"]] == ["old"]


@pytest.mark.slow
def test_an_older_corrals_state_is_found_even_when_the_repository_moved_before_the_upgrade(corral, repo, tmp_path):
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    state = Path(_state(corral, env))
    worktree = Path(corral.json("show", "feat", env=env)["task"]["worktree"])
    (state / "repository.json").unlink()  # as an older corral left it
    shutil.rmtree(repo / ".git" / "corral")
    moved = tmp_path / "moved"
    os.rename(repo, moved)
    cli = CLI(moved)
    assert [(t["ref"], t["status"]) for t in cli.json("list", env=env)["tasks"]] == [("feat", "blocked")]
    assert _state(cli, env) == str(state)
    assert git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir") == str(moved / ".git")
    accepted = cli("accept", "feat", env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert (moved / "feature.py").read_text() == "FEATURE = True\n"


@pytest.mark.slow
def test_a_copy_is_told_apart_and_chooses_fresh_or_attach(corral, repo, tmp_path):
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    worktree = Path(corral.json("show", "feat", env=env)["task"]["worktree"])
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    twin = CLI(copy)

    err = json_error(twin("list", "--json", env=env), 3, "repository-copied")
    assert str(repo) in err["message"] and "project attach" in err["hint"] and "project fresh" in err["hint"]
    plain = twin("list", env=env)  # not a terminal: the coded error, never a question
    assert plain.returncode == 3 and "project fresh" in plain.stderr
    assert [t["ref"] for t in corral.json("list", env=env)["tasks"]] == ["feat"]  # the original is untouched
    json_error(corral("project", "fresh", "--json", env=env), 3, "not-a-copy")

    fresh = twin.json("project", "fresh", env=env)["project"]
    assert fresh["state"] != _state(corral, env) and fresh["identity"]["instance"]
    assert fresh["identity"]["project"] == corral.json("project", "show", env=env)["project"]["identity"]["project"]
    assert twin.json("list", env=env)["tasks"] == []
    assert str(worktree) not in git(copy, "worktree", "list")  # git in the copy forgets the original's worktrees
    assert str(worktree) in git(repo, "worktree", "list")
    twin.ok("create", "Copy's own", "--ref", "own", env=env)
    assert [t["ref"] for t in twin.json("list", env=env)["tasks"]] == ["own"]
    assert [t["ref"] for t in corral.json("list", env=env)["tasks"]] == ["feat"]

    # a second copy takes the tasks over instead: the worktree follows it, the original is then the copy
    other = tmp_path / "other"
    shutil.copytree(repo, other, symlinks=True)
    taker = CLI(other)
    taken = taker.json("project", "attach", env=env)["project"]
    assert taken["state"] == _state(CLI(other), env) and taken["moved_from"] == str(repo)
    assert [t["ref"] for t in taker.json("list", env=env)["tasks"]] == ["feat"]
    assert git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir") == str(other / ".git")
    json_error(corral("list", "--json", env=env), 3, "repository-copied")


@pytest.mark.slow
def test_a_copy_asks_on_a_terminal(corral, repo, tmp_path):
    corral.ok("create", "Original's", "--ref", "orig")
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    pid, fd = pty.fork()
    if pid == 0:  # the child: corral on a terminal, in the copy
        try:
            os.chdir(copy)
            os.execv(sys.executable, [sys.executable, "-m", "corral", "list"])
        finally:
            os._exit(127)
    seen = b""
    answered = False
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"Share the tasks or start fresh?" in seen:
            os.write(fd, b"f\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    assert answered, seen
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"No tasks" in seen  # the copy started fresh
    assert [t["ref"] for t in CLI(copy).json("list")["tasks"]] == []
    assert [t["ref"] for t in corral.json("list")["tasks"]] == ["orig"]


@pytest.mark.slow
def test_a_repository_that_is_gone_is_reported_by_doctor_elsewhere_and_archived(corral, repo, tmp_path):
    corral.ok("create", "Doomed", "--ref", "doomed")
    state = Path(_state(corral))
    assert [c["status"] for c in _doctor_projects(corral)] == ["ok"]
    shutil.rmtree(repo)
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    git(other, "commit", "-q", "--allow-empty", "-m", "other's first")
    cli = CLI(other)
    found = [c for c in _doctor_projects(cli) if c["status"] != "ok"]
    assert len(found) == 1 and found[0]["status"] == "warn"
    assert state.name in found[0]["message"] and str(repo) in found[0]["message"] and "gone" in found[0]["message"]
    assert f"project archive {state.name}" in found[0]["hint"] and "project attach" in found[0]["hint"]
    human = cli("doctor")
    assert "gone" in human.stdout and f"project archive {state.name}" in human.stdout
    listed = {p["name"]: p for p in cli.json("project", "list")["projects"]}
    assert listed[state.name]["reason"] == "gone" and listed[state.name]["repository"] == str(repo)
    json_error(cli("project", "archive", "no-such-state", "--json"), 4, "state-not-found")
    mine = cli.json("project", "show")["project"]["state"]
    json_error(cli("project", "archive", Path(mine).name, "--json"), 3, "state-attached")

    archived = cli.json("project", "archive", state.name)["archived"]
    assert not state.exists() and (Path(archived["path"]) / "corral.db").is_file()  # kept, not deleted
    assert [c for c in _doctor_projects(cli) if c["status"] != "ok"] == []


@pytest.mark.slow
def test_a_reclone_can_take_its_old_state_back(corral, repo, tmp_path):
    """A repository removed and cloned again from its remote: doctor offers the old state, attach takes it."""
    upstream = tmp_path / "upstream.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(upstream))
    git(repo, "remote", "add", "origin", f"file://{upstream}")
    git(repo, "fetch", "-q", "origin")
    corral.ok("create", "Survivor", "--ref", "survivor")
    shown = corral.json("project", "show")["project"]
    assert shown["identity"]["remote"] == str(upstream)[: -len(".git")]
    old_state = Path(shown["state"])
    shutil.rmtree(repo)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream), str(clone)], check=True)
    cli = CLI(clone)
    assert cli.json("list")["tasks"] == []  # a new clone starts its own list …
    gone = [c for c in _doctor_projects(cli) if c["status"] == "warn"]
    assert len(gone) == 1 and old_state.name in gone[0]["message"]  # … and doctor offers the old one
    taken = cli.json("project", "attach", "--state", old_state.name)["project"]
    assert taken["state"] == str(old_state)
    assert [t["ref"] for t in cli.json("list")["tasks"]] == ["survivor"]
    assert [c["status"] for c in _doctor_projects(cli)] == ["ok"]  # the empty list it had started is put aside
    json_error(cli("project", "attach", "--state", "nope", "--json"), 4, "state-not-found")


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("git@GitHub.com:Owner/Repo.git", "github.com/Owner/Repo"),
        ("https://github.com/Owner/Repo/", "github.com/Owner/Repo"),
        ("ssh://git@github.com:22/Owner/Repo.git", "github.com/Owner/Repo"),
        ("https://me:token@GITHUB.com/Owner/Repo.git/", "github.com/Owner/Repo"),
        ("git://example.org//srv//x.git", "example.org/srv/x"),
        ("file:///srv/git/x.git", "/srv/git/x"),
        ("/srv/git/x.git/", "/srv/git/x"),
        ("  ", None),
    ],
)
def test_remote_urls_are_normalized_so_every_spelling_of_one_remote_agrees(url, normal):
    from corral.engine.identity import normalize_remote

    assert normalize_remote(url) == normal


@pytest.mark.slow
def test_a_second_clone_spelling_the_remote_otherwise_is_the_same_project(corral, repo, tmp_path):
    git(repo, "remote", "add", "origin", "git@GitHub.com:Owner/Repo.git")
    corral.ok("create", "Shared", "--ref", "shared")
    first = corral.json("project", "show")["project"]["identity"]
    assert first["remote"] == "github.com/Owner/Repo"
    second = tmp_path / "second"
    shutil.copytree(repo, second, symlinks=True)
    shutil.rmtree(second / ".git" / "corral")  # a clone of its own: no cache, it computes the identity
    git(second, "remote", "set-url", "origin", "https://github.com/Owner/Repo")
    err = json_error(CLI(second)("list", "--json"), 3, "repository-copied")
    assert str(repo) in err["message"]
    own = CLI(second).json("project", "fresh")["project"]["identity"]
    assert own["project"] == first["project"] and own["key"] != first["key"]  # one project, two task lists


def test_settings_kept_for_a_repository_follow_it_when_it_moves(corral, repo, tmp_path):
    corral.ok("config", "set", "watchdog_timeout", "7", "--scope", "local")
    user_file = Path(os.environ["CORRAL_CONFIG_FILE"])
    with user_file.open("a") as fh:
        fh.write("# a note of the person's\n")
    corral.ok("create", "Keep me", "--ref", "kept")
    moved = tmp_path / "moved-here"
    os.rename(repo, moved)
    cli = CLI(moved)
    got = cli.json("config", "get", "watchdog_timeout")
    assert got["value"] == 7.0  # the table now names the new path
    text = user_file.read_text()
    assert f'[projects."{moved.resolve()}"]' in text and str(repo.resolve()) not in text
    assert "# a note of the person's" in text  # the rest of the file is as the person left it
    assert [t["ref"] for t in cli.json("list")["tasks"]] == ["kept"]
