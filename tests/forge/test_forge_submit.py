"""submit on a forge project: the branch pushed, a pull request opened through the real gh (a draft with --draft),
and a later accept merges that same pull request."""

from __future__ import annotations

import json

from corral.domain.status import Status
from tests.conftest import git
from tests.forge.test_forge_accept import blocked_with, task_of, work


def test_submit_pushes_and_opens_a_draft_pull_request_that_accept_then_merges(fproj, agent, repo, corral):
    proj, forge = fproj()
    blocked_with(proj, agent, "sb", work("s.txt", "s\n"))
    said = corral.json("submit", "sb", "--draft")
    pr = forge.pull()
    assert said["pull_request"].endswith(f"/pull/{pr.number}") and pr.draft and pr.base == "main"
    assert pr.head == "corral/sb" and pr.head_oid == git(repo, "rev-parse", "corral/sb")
    assert git(forge.bare, "rev-parse", "corral/sb") == pr.head_oid
    task = task_of(proj, "sb")
    assert task.status is Status.SUBMITTED and task.metadata["forge"]["number"] == pr.number
    pending = corral.ok("accept", "sb")  # a draft does not merge: the accept waits on the forge
    assert "the draft to be marked ready" in pending.stdout and len(forge.pulls) == 1
    forge.mark_ready(pr.number)
    lines = [json.loads(line) for line in corral.ok("accept", "sb", "--json").stdout.splitlines()]
    assert next(e for e in lines if e.get("event") == "result")["task"]["status"] == "complete"
    assert forge.pull().state == "MERGED"


def test_a_submitted_pull_request_merged_or_closed_outside_moves_its_task(fproj, agent, repo):
    from corral.domain.actors import Actor
    from corral.engine.operations import forge_sync
    from corral.engine.operations.submit import submit

    proj, forge = fproj()
    blocked_with(proj, agent, "m", work("m.txt", "m\n"))
    blocked_with(proj, agent, "c", work("c.txt", "c\n"))
    submit(proj, "m", actor=Actor.HUMAN)
    submit(proj, "c", actor=Actor.HUMAN)
    merged, closed = (p.number for p in forge.pulls.values())
    forge.merge_outside(merged)
    forge.close_outside(closed)
    assert forge_sync.sync(proj, force=True) == []
    m, c = task_of(proj, "m"), task_of(proj, "c")
    assert m.status is Status.COMPLETE and c.status is Status.BLOCKED
    with proj.store.read() as tx:
        assert [x.to_status for x in tx.status_changes(m.id)][-2:] == [Status.ZOMBIE, Status.COMPLETE]
        assert "closed on the forge without merging" in tx.status_changes(c.id)[-1].reason
    assert git(repo, "rev-parse", "main") == forge.pull(merged).merge_commit  # the clean target followed
    assert not proj.paths.worktree("m").exists() and proj.paths.worktree("c").exists()


def test_mcp_submit_opens_a_draft_as_the_cli_does(fproj, agent, repo):
    from tests.mcp_doors.test_builder_stdio import ok, session

    proj, forge = fproj()
    blocked_with(proj, agent, "md", work("md.txt", "m\n"))
    (said,) = session(repo, ("submit", {"task": "md", "draft": True}))
    pr = forge.pull()
    assert ok(said)["submitted"]["pull_request"].endswith(f"/pull/{pr.number}") and pr.draft
    assert task_of(proj, "md").status is Status.SUBMITTED
