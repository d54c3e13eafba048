"""Every git call runs under a time limit: a hook or merge driver that hangs is a GitTimeout, not a hung corral."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.adapters.git import SLOW_COMMANDS, Git
from corral.domain.actors import Actor
from corral.domain.settings import default
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.errors import GitError, GitTimeout
from tests.conftest import git

#: Long enough that a test waiting for it instead of the limit would fail its own assertions.
HANG_SECONDS = 120


@pytest.fixture
def pid_files(tmp_path: Path) -> Iterator[list[Path]]:
    """Files a hanging hook writes its pid to: the test ends each such process it started."""
    files: list[Path] = []
    yield files
    for path in files:
        for line in path.read_text().split() if path.exists() else []:
            pid = int(line)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"sleep" not in fh.read():
                        continue  # gone, and the pid reused: not ours
                os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


def _hanging_hook(repo: Path, pid_file: Path, ref: str = "refs/heads/main") -> Path:
    """A reference-transaction hook that hangs when ``ref`` is about to move (git runs it on every ref update)."""
    hook = repo / ".git" / "hooks" / "reference-transaction"
    hook.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = prepared ] && grep -q " {ref}$"; then\n'
        f"  echo $$ >> {pid_file}\n"
        f"  exec sleep {HANG_SECONDS}\n"
        "fi\n"
    )
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    return hook


def _locks(repo: Path) -> list[Path]:
    return sorted([*(repo / ".git").glob("*.lock"), *(repo / ".git" / "refs").rglob("*.lock")])


def test_the_limits_are_settings_and_a_command_that_runs_hooks_gets_the_longer_one() -> None:
    plain = Git()
    assert (plain.timeout, plain.hook_timeout) == (default("git_timeout", float), default("git_hook_timeout", float))
    assert plain.timeout < plain.hook_timeout
    git_ = Git(timeout=5, hook_timeout=50)
    assert git_.limit_for(["rev-parse", "HEAD"]) == 5
    assert git_.limit_for(["merge-tree", "--write-tree", "a", "b"]) == 5
    assert git_.limit_for(["-c", "user.name=corral", "-c", "user.email=x", "commit", "-m", "m"]) == 50
    assert git_.limit_for(["update-ref", "refs/heads/main", "abc"]) == 50  # runs reference-transaction
    assert {"commit", "merge", "push", "worktree", "stash", "read-tree", "status"} <= SLOW_COMMANDS


def test_a_hanging_hook_is_a_git_timeout_naming_the_command_the_limit_and_the_hook(
    repo: Path, tmp_path: Path, pid_files: list[Path]
) -> None:
    pids = tmp_path / "hook.pids"
    pid_files.append(pids)
    g = Git(timeout=30, hook_timeout=1)
    old = g.out("rev-parse", "HEAD", cwd=repo)
    new = g.commit_tree(g.tree_of(old, cwd=repo), [old], "next", cwd=repo)
    hook = _hanging_hook(repo, pids)
    g.update_ref("refs/heads/elsewhere", new, cwd=repo)  # other refs move: the hook hangs only on main
    with pytest.raises(GitTimeout) as caught:
        g.update_ref("refs/heads/main", new, cwd=repo, old=old)
    err = caught.value
    assert isinstance(err, GitError) and err.code == "git-timeout" and err.exit_code == 1
    assert err.message == f"git update-ref ran past its 1 s limit in {repo}; corral stopped it."
    assert err.hint is not None
    assert f"reference-transaction in {hook.parent}" in err.hint
    assert "git config core.hooksPath" in err.hint and "git_hook_timeout" in err.hint
    assert pids.read_text().split()  # the hook really ran and hung
    assert git(repo, "rev-parse", "main") == old  # the ref did not move
    # git may be stopped holding its locks (SIGKILL leaves them): the hint names each one it left
    assert all(str(lock) in err.hint for lock in _locks(repo))


def test_a_plumbing_command_gets_the_shorter_limit(repo: Path, tmp_path: Path, pid_files: list[Path]) -> None:
    """merge-tree is plumbing, but runs a repository's merge driver: one that hangs is stopped at git_timeout."""
    pids = tmp_path / "driver.pids"
    pid_files.append(pids)
    (repo / ".gitattributes").write_text("*.txt merge=hang\n")
    (repo / "a.txt").write_text("base\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "config", "merge.hang.driver", f"echo $$ >> {pids}; exec sleep {HANG_SECONDS}")
    git(repo, "checkout", "-q", "-b", "theirs")
    (repo / "a.txt").write_text("theirs\n")
    git(repo, "commit", "-q", "-am", "theirs")
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text("ours\n")
    git(repo, "commit", "-q", "-am", "ours")
    g = Git(timeout=1, hook_timeout=HANG_SECONDS * 2)
    with pytest.raises(GitTimeout) as caught:
        g.merge_tree("main", "theirs", cwd=repo)
    assert caught.value.message == f"git merge-tree ran past its 1 s limit in {repo}; corral stopped it."
    assert caught.value.hint is not None
    assert "merge driver" in caught.value.hint and "git_timeout" in caught.value.hint
    assert pids.read_text().split()


def test_accept_under_a_hanging_hook_fails_with_the_coded_error_and_restores_the_task(
    agent, repo: Path, tmp_path: Path, pid_files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    proj = Project.open(repo, git=Git(hook_timeout=2))
    try:
        agent.script(
            [{"init": True}, {"write": {"path": "a.txt", "content": "a\n"}}, {"commit": "add a"}, {"result": "ok"}]
        )
        task = tasks.create(proj, "Hung accept", actor=Actor.HUMAN, ref="hung")
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
        before = git(repo, "rev-parse", "main")
        pids = tmp_path / "hook.pids"
        pid_files.append(pids)
        hook = _hanging_hook(repo, pids)

        with pytest.raises(GitTimeout) as caught:
            accepting.accept(proj, task.ref, actor=Actor.HUMAN)
        assert caught.value.message.startswith("git update-ref ran past its 2 s limit")
        assert pids.read_text().split()
        assert git(repo, "rev-parse", "main") == before
        with proj.store.read() as tx:
            again = tx.task_by_ref("hung")
        assert again is not None and again.status is Status.BLOCKED  # not left merging

        # the person follows the hint: the hook fixed, the locks git left removed; the accept goes through
        hook.unlink()
        for lock in _locks(repo):
            assert str(lock) in (caught.value.hint or "")
            lock.unlink()
        done = accepting.accept(proj, task.ref, actor=Actor.HUMAN)
        assert done.task.status is Status.COMPLETE
        assert git(repo, "show", "main:a.txt") == "a"
    finally:
        proj.close()
