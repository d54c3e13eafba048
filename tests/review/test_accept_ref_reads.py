"""accept reads the task's branch and its target from their files (tests/review/test_accept_loose_reads.py), else
with one ``for-each-ref``, when both are plain: anything else
(a symbolic ref, a branch holding no commit, a target that is a tag) takes the one-ref-at-a-time path, which
puts a symbolic branch back at its verified tip and never follows it. The checked-out target comes along,
and a person's local change the merge touches is stashed and popped, as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec
import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import control, tasks, turns
from corral.errors import AcceptRefused
from tests.conftest import git


def blocked(proj, agent, ref: str, path: str, content: str):  # type: ignore[no-untyped-def]
    agent.script([{"init": True}, {"write": {"path": path, "content": content}}, {"commit": "work"}, {"result": "ok"}])
    task = tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert control.wait(proj, task.ref, timeout=30).task.status is Status.BLOCKED
    return task


def write_ref(repo: Path, ref: str, value: str) -> None:
    """A ref's file written as a hand (or an agent) would, past git's own checks."""
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    path = (common if common.is_absolute() else repo / common) / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def test_one_listing_gives_the_tip_and_the_target(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "plain", "plain.txt", "plain\n")
    tip = git(repo, "rev-parse", "corral/plain")
    assert accepting._tips(proj, "corral/plain", "main") == (tip, True)
    assert accepting._tips(proj, "corral/plain", "nowhere") == (tip, False)
    assert accepting._tips(proj, "corral/gone", "main") == (None, True)
    # a branch below the task's name is not the task's branch (a pattern of for-each-ref matches it)
    git(repo, "branch", "corral/plain-not/x", "main")
    assert accepting._tips(proj, "corral/plain", None) == (tip, True)


def test_a_branch_made_symbolic_after_its_turn_is_put_back_never_followed(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "sym", "sym.txt", "work\n")
    verified = git(repo, "rev-parse", "corral/sym")
    git(repo, "branch", "other", "main")
    other = git(repo, "rev-parse", "other")
    git(repo, "symbolic-ref", "refs/heads/corral/sym", "refs/heads/other")
    assert accepting._tips(proj, "corral/sym", "main") == (verified, True)  # the verified tip, not other's
    assert subprocess.run(["git", "symbolic-ref", "-q", "refs/heads/corral/sym"], cwd=repo).returncode != 0
    assert git(repo, "rev-parse", "corral/sym") == verified and git(repo, "rev-parse", "other") == other
    result = accepting.accept(proj, "sym", actor=Actor.HUMAN)  # put back, its checkout is clean again
    assert result.task.status is Status.COMPLETE and git(repo, "show", "main:sym.txt") == "work"


def test_a_branch_holding_a_tree_is_put_back_at_its_verified_tip(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "tree", "tree.txt", "tree\n")
    verified = git(repo, "rev-parse", "corral/tree")
    tree = git(repo, "rev-parse", "corral/tree^{tree}")
    write_ref(repo, "refs/heads/corral/tree", tree)
    assert accepting._tips(proj, "corral/tree", "main") == (verified, True)
    assert git(repo, "rev-parse", "corral/tree") == verified


def test_a_target_that_is_a_tag_still_counts_as_there(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "tagged", "t.txt", "t\n")
    git(repo, "tag", "-a", "-m", "annotated", "v1", "main")
    tag = git(repo, "rev-parse", "v1")
    write_ref(repo, "refs/heads/release", tag)  # a branch holding a tag object (git refuses to make one): peeled
    tip, there = accepting._tips(proj, "corral/tagged", "release")
    assert there and tip == git(repo, "rev-parse", "corral/tagged")


def test_a_missing_target_is_refused_before_anything_moves(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    task = blocked(proj, agent, "lost", "lost.txt", "x\n")
    with proj.store.write() as tx:
        tx.update_task(task.id, target_branch="nowhere")
    with pytest.raises(AcceptRefused, match="target branch nowhere"):
        accepting.accept(proj, "lost", actor=Actor.HUMAN)
    with proj.store.read() as tx:
        assert tx.task_by_ref("lost").status is Status.BLOCKED


def test_a_local_change_the_merge_touches_is_stashed_and_given_back(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    (repo / "shared.txt").write_text("base\n")
    git(repo, "add", "shared.txt")
    git(repo, "commit", "-q", "-m", "shared")
    blocked(proj, agent, "touch", "other.txt", "theirs\n")
    (repo / "other.txt").write_text("mine, untracked\n")  # the merge adds this path: stashed, then given back
    (repo / "untouched.txt").write_text("left alone\n")
    result = accepting.accept(proj, "touch", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert git(repo, "rev-parse", "main") == result.commit
    assert (repo / "untouched.txt").read_text() == "left alone\n"
    listed = subprocess.run(["git", "stash", "list"], cwd=repo, capture_output=True, text=True).stdout
    content = (repo / "other.txt").read_text()
    # either popped onto the new tip, or kept in the stash and said: never lost
    assert content == "mine, untracked\n" or "corral accept touch" in listed


IDENTITY_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def squash_identity(repo: Path) -> str:
    return git(repo, "log", "-1", "--format=%an <%ae> / %cn <%ce>", "main")


def test_the_squash_is_made_with_the_repositorys_identity(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "own", "own.txt", "own\n")
    for name in IDENTITY_ENV:
        monkeypatch.delenv(name, raising=False)
    git(repo, "config", "user.name", "Pat Person")
    git(repo, "config", "user.email", "pat@example.com")
    accepting.accept(proj, "own", actor=Actor.HUMAN)
    assert squash_identity(repo) == "Pat Person <pat@example.com> / Pat Person <pat@example.com>"


def test_a_repository_with_no_identity_gets_corrals_never_a_guessed_one(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "none", "none.txt", "none\n")
    for name in IDENTITY_ENV:
        monkeypatch.delenv(name, raising=False)
    subprocess.run(["git", "config", "--unset-all", "user.email"], cwd=repo)
    subprocess.run(["git", "config", "--global", "--unset-all", "user.email"], cwd=repo)
    assert subprocess.run(["git", "config", "user.email"], cwd=repo, capture_output=True).stdout == b""
    result = accepting.accept(proj, "none", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE
    assert squash_identity(repo) == "corral <corral@localhost> / corral <corral@localhost>"


def test_an_email_in_the_environment_alone_is_used_as_git_uses_it(proj, agent, repo: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "env", "env.txt", "env\n")
    subprocess.run(["git", "config", "--unset-all", "user.email"], cwd=repo)
    subprocess.run(["git", "config", "--global", "--unset-all", "user.email"], cwd=repo)
    accepting.accept(proj, "env", actor=Actor.HUMAN)  # the suite's GIT_AUTHOR_* and GIT_COMMITTER_* stay set
    assert squash_identity(repo) == "Test Author <author@example.com> / Test Committer <committer@example.com>"


def test_verify_reads_the_targets_commit_tree_and_trailers_and_says_what_is_wrong(proj, agent, repo: Path) -> None:  # type: ignore[no-untyped-def]
    blocked(proj, agent, "ver", "ver.txt", "ver\n")
    result = accepting.accept(proj, "ver", actor=Actor.HUMAN)
    commit = git(repo, "rev-parse", "main")
    tree = git(repo, "rev-parse", "main^{tree}")
    with proj.store.read() as tx:
        task = tx.task_by_ref("ver")
        session = tx.get_session(task.session_id)
    assert result.commit == commit
    assert accepting.verify(proj, "main", commit, tree, task, session) is None
    assert accepting.verify(proj, "main", commit, git(repo, "rev-parse", "main^^{tree}"), task, session) == (
        "the merge commit's tree is not the merge result"
    )
    assert accepting.verify(proj, "main", git(repo, "rev-parse", "main^"), tree, task, session) == (
        "main does not point at the merge commit"
    )
    stranger = msgspec.structs.replace(session, id="s-other")  # a session that did not make this merge
    assert accepting.verify(proj, "main", commit, tree, task, stranger) == (
        "the merge commit does not carry the Corral-Task trailer"
    )
    # a commit made by hand on the target, with no trailers: not corral's merge
    git(repo, "commit", "-q", "--allow-empty", "-m", "by hand")
    by_hand = git(repo, "rev-parse", "main")
    assert accepting.verify(proj, "main", by_hand, tree, task, session) == (
        "the merge commit does not carry the Corral-Task trailer"
    )


def test_the_plans_destination_is_read_from_the_worktrees_heads_as_git_lists_them(
    proj, repo: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    git(repo, "branch", "side", "main")
    git(repo, "branch", "elsewhere", "main")
    git(repo, "worktree", "add", "-q", str(tmp_path / "side-wt"), "side")
    listed = {wt.get("branch") for wt in proj.git.worktrees(cwd=repo)}
    for branch in ("main", "side", "elsewhere", "corral/none"):
        assert accepting._checked_out(proj, branch) == (f"refs/heads/{branch}" in listed), branch
    assert accepting._checked_out(proj, "main") and accepting._checked_out(proj, "side")
    assert not accepting._checked_out(proj, "elsewhere")
