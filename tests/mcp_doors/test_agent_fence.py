"""The fence of a worker's turn at the agent door (docs/mcp.md#on-worker-hosts): its grant carries the lease the
turn runs under, and every write its agent makes holds that lease in the write's own transaction.

The end-to-end case (a real worker, its daemon, a takeover in the shared store) is
tests/workers/test_agent_tools.py; here the rule itself, on the embedded store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.domain.actors import Actor
from corral.engine.operations import gates, tasks, turn_fence
from corral.engine.project import Project
from corral.engine.runtime import agent_tokens
from corral.engine.runtime.protocol import Fence
from corral.errors import LeaseLost


@pytest.fixture
def project(repo: Path) -> Iterator[Project]:
    opened = Project.open(repo)
    try:
        yield opened
    finally:
        opened.close()


def claimed(project: Project, worker: str) -> tuple[str, Fence]:
    """A task whose turn ``worker`` claimed, and that claim's fence."""
    task = tasks.create(project, "Fenced work", actor=Actor.HUMAN, ref="fenced")
    with project.store.write() as tx:
        tx.queue_turn(task.id, "cmd-1", {})
        lease = tx.claim_turn(task.id, "cmd-1", worker, "build-b")
    assert lease is not None
    return task.id, Fence(lease.epoch, worker, "build-b")


def refs(project: Project) -> list[str]:
    with project.store.read() as tx:
        return sorted(tx.refs())


def test_an_agents_writes_hold_its_turns_lease_in_their_own_transaction(project: Project) -> None:
    task_id, fence = claimed(project, "w-b")
    caller = gates.Caller(Actor.AGENT, task_id, "fenced", "cmd-1", fence)
    acting = turn_fence.fenced(project, caller)
    turn_fence.hold_fence(project, caller)
    kid = tasks.create(acting, "While it holds", actor=Actor.AGENT, ref="kid", parent=task_id)
    assert kid.parent_id == task_id
    # Another host fences the turn off after the door's look: the write itself is refused, and rolled back.
    with project.store.write() as tx:
        assert tx.fence_off(task_id, fence.epoch)
    before = refs(project)
    with pytest.raises(LeaseLost) as refused:
        tasks.create(acting, "Too late", actor=Actor.AGENT, ref="late", parent=task_id)
    assert refused.value.code == "lease-lost" and "nothing was written" in refused.value.message
    assert refused.value.hint and "corral show fenced" in refused.value.hint
    with pytest.raises(LeaseLost):
        tasks.comment(acting, "fenced", "after the takeover", actor=Actor.AGENT)
    with pytest.raises(LeaseLost):
        turn_fence.hold_fence(project, caller)
    assert refs(project) == before
    with project.store.read() as tx:
        assert tx.comments(task_id) == []


def test_a_lease_claimed_again_by_another_worker_is_not_the_agents(project: Project) -> None:
    task_id, fence = claimed(project, "w-b")
    with project.store.write() as tx:
        assert tx.fence_off(task_id, fence.epoch)
        tx.queue_turn(task_id, "cmd-2", {})
        taken = tx.claim_turn(task_id, "cmd-2", "w-c", "build-c")
    assert taken is not None
    for stale in (fence, Fence(taken.epoch, "w-b", "build-b")):  # its old epoch; the new one, not its worker's
        caller = gates.Caller(Actor.AGENT, task_id, "fenced", "cmd-1", stale)
        with pytest.raises(LeaseLost):
            tasks.comment(turn_fence.fenced(project, caller), "fenced", "not mine", actor=Actor.AGENT)
    # The new holder's agent writes; a local turn's agent, a person and a builder are never fenced.
    holder = gates.Caller(Actor.AGENT, task_id, "fenced", "cmd-2", Fence(taken.epoch, "w-c", "build-c"))
    tasks.comment(turn_fence.fenced(project, holder), "fenced", "mine now", actor=Actor.AGENT)
    local = gates.Caller(Actor.AGENT, task_id, "fenced", "cmd-2")
    assert turn_fence.fenced(project, local) is project
    assert turn_fence.fenced(project, gates.person(Actor.HUMAN)) is project


def test_a_grant_carries_its_turns_fence_and_one_unreadable_is_no_grant(project: Project) -> None:
    home = project.paths.home
    token, grant = agent_tokens.mint(
        home,
        task_id="t1",
        task_ref="fenced",
        command_id="cmd-1",
        state=project.paths.root,
        repo=project.repo,
        fence=Fence(3, "w-b", "build-b"),
    )
    found = agent_tokens.find(home, token)
    assert found is not None and found.fence == Fence(3, "w-b", "build-b")
    local, _ = agent_tokens.mint(
        home, task_id="t2", task_ref="local", command_id="cmd-2", state=project.paths.root, repo=project.repo
    )
    unfenced = agent_tokens.find(home, local)
    assert unfenced is not None and unfenced.fence is None
    path = agent_tokens.grant_file(home, grant.token_hash)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "fence": {"epoch": "three", "worker_id": "w-b", "host": "build-b"}}))
    assert agent_tokens.find(home, token) is None
