"""A pull request the forge merged by rebase: the merged result carries exactly the reviewed change, compared as
the change ``base..tip`` made against the change the rebased range made on the target."""

from __future__ import annotations

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import accept as accepting
from corral.engine.operations import forge_sync
from tests.conftest import git
from tests.forge.test_forge_accept import blocked_with, task_of


def three_commits() -> list[dict]:
    """Three commits that each rewrite one file (so no single commit of the range is the whole change)."""
    steps: list[dict] = [{"init": True}]
    for n in (1, 2, 3):
        steps += [{"write": {"path": "part.py", "content": f"p = {n}\n"}}, {"commit": f"part {n}"}]
    return [*steps, {"result": "Wrote three parts."}]


def advance_main(forge, repo) -> None:
    """Someone else's commit lands on the forge's main meanwhile: the rebased range starts past the task's base."""
    git(repo, "fetch", "-q", "origin", "main")
    other = repo.parent / "other-clone"
    git(repo.parent, "clone", "-q", str(forge.bare), str(other))
    (other / "other.py").write_text("o = 1\n")
    git(other, "add", "other.py")
    git(other, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "-m", "other")
    git(other, "push", "-q", "origin", "main")


def test_a_rebase_merge_of_several_commits_is_verified_and_completes(fproj, agent, repo):
    proj, forge = fproj(merge_method="rebase")
    blocked_with(proj, agent, "reb", three_commits())
    advance_main(forge, repo)
    result = accepting.accept(proj, "reb", actor=Actor.HUMAN)
    assert result.task.status is Status.COMPLETE, result
    pr = forge.pull()
    assert pr.state == "MERGED" and result.commit == pr.merge_commit
    subjects = git(forge.bare, "log", "--format=%s", "-4", "main").splitlines()
    assert subjects == ["part 3", "part 2", "part 1", "other"]  # rebased one by one, not squashed
    assert git(repo, "rev-parse", "main") == pr.merge_commit


def test_a_rebase_merge_carrying_more_than_the_reviewed_change_blocks_naming_the_paths(fproj, agent, repo):
    proj, forge = fproj(required_checks=("ci",))
    blocked_with(proj, agent, "rebx", three_commits())
    accepting.accept(proj, "rebx", actor=Actor.HUMAN)
    number = forge.pull().number
    forge.push_outside(number, "sneaked.py", "s = 1\n")  # pushed after the review
    forge.merge_outside(number, "rebase")
    before = git(repo, "rev-parse", "main")
    forge_sync.sync(proj, force=True)
    task = task_of(proj, "rebx")
    assert task.status is Status.BLOCKED
    with proj.store.read() as tx:
        reason = tx.status_changes(task.id)[-1].reason
    assert "not the reviewed change" in reason and "sneaked.py" in reason
    assert git(repo, "rev-parse", "main") == before
