"""A task agent's corral tools on a worker host (docs/mcp.md, docs/workers.md): that host's daemon serves them,
the token that host's launch minted says who the agent is, the shared store records what it does (read back on a
laptop that runs no worker), and every write it makes is fenced by its turn's lease.

The agent is tests/support/mcp_agent.py, run by the ``command`` harness of a real ``corral worker``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from corral.engine.project import Project
from tests.support.polling import until
from tests.workers.conftest import Team
from tests.workers.team import Host

pytestmark = pytest.mark.slow

AGENT = Path(__file__).resolve().parents[1] / "support" / "mcp_agent.py"


class Agents:
    """What a worker host's scripted agents do (their plan) and what their tool calls answered."""

    def __init__(self, root: Path) -> None:
        self.plan, self.out = root / "plan.json", root / "out"

    def script(self, steps: dict[str, list[dict[str, Any]]]) -> None:
        self.plan.write_text(json.dumps(steps))

    def results(self, ref: str) -> list[dict[str, Any]]:
        path = self.out / f"{ref}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def answers(self, ref: str, tool: str) -> list[dict[str, Any]]:
        return [d for d in self.results(ref) if d.get("tool") == tool]


def mcp_laptop(team: Team) -> Host:
    """The reviewer's host, whose turns go to the workers with the ``command`` harness (run there with
    the worker's own ``command``)."""
    return team.host("laptop", dispatch="workers", harness="command", command=f"{sys.executable} {AGENT}")


def mcp_worker(team: Team, name: str) -> tuple[Host, Agents]:
    """A worker host whose agents are the scripted MCP agent with corral's tools, its worker started."""
    host = team.worker(name, harness="command", command=f"{sys.executable} {AGENT}")
    agents = Agents(host.root)
    agents.script({})
    host.start_worker(
        env={"CORRAL_AGENT_TOOLS": "1", "MCP_AGENT_PLAN": str(agents.plan), "MCP_AGENT_OUT": str(agents.out)}
    )
    host.wait_event("started")
    return host, agents


async def _post(url: str, token: str) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(url, headers={"Authorization": f"Bearer {token}"}, json={})


def post_as(url: str, token: str) -> httpx2.Response:
    return anyio.run(_post, url, token)


def test_an_agent_on_a_worker_host_drives_corral_through_that_hosts_daemon(team: Team, tmp_path: Path) -> None:
    laptop = mcp_laptop(team)
    worker, agents = mcp_worker(team, "build-b")
    laptop.corral("create", "Parent work", "--ref", "parent")
    laptop.corral("create", "Someone else's", "--ref", "other")
    minted, hold = tmp_path / "token.json", tmp_path / "hold"
    agents.script(
        {
            "parent": [
                {"tool": "update_progress", "args": {"message": "reading the code"}},
                {"tool": "create", "args": {"goal": "Child work", "ref": "kid"}},
                {"tool": "start", "args": {"task": "kid"}},
                {"tool": "wait", "args": {"task": "kid"}},
                {"tool": "show", "args": {"task": "other"}},
                {"tool": "edit", "args": {"task": "other", "goal": "Not mine to change"}},
                {"dump_token": str(minted)},
                {"hold": str(hold)},
            ],
            "kid": [{"write": ["kid.txt", "from the kid\n"]}, {"commit": "kid work"}],
        }
    )
    assert laptop.json("start", "parent")["queued"] is True
    until(hold.exists, timeout=90, poll=0.2, what="the agent on build-b holds its turn")
    # Its endpoint is build-b's daemon's, and its token was minted there (its grant kept in that home).
    doc = json.loads(minted.read_text())
    url, token = doc["url"], doc["token"]
    served = worker.json("daemon", "status")["daemon"]
    assert served["mcp_url"] == url
    assert len(list((worker.corral_home / "agent-tokens").iterdir())) == 1
    # (a) Its progress line reaches the laptop through the store, with the host that runs the turn.
    shown = until(
        lambda: (s := laptop.json("show", "parent"))["task"]["substate"] == "agent: reading the code" and s,
        timeout=30,
        poll=0.2,
        what="the laptop reads the agent's progress",
    )
    assert shown["lease"]["host"] == "build-b" and shown["lease"]["state"] == "claimed"
    rows = {r["ref"]: r for r in laptop.json("list", "--all")["tasks"]}
    assert rows["parent"]["host"] == "build-b" and rows["parent"]["substate"] == "agent: reading the code"
    # (b) Its subtask is in the shared store: a child of its task, made and started by the agent, and its
    # wait saw it rest (the worker's settle pass keeps build-b's project settled for the endpoint).
    (made,) = agents.answers("parent", "create")
    assert made["is_error"] is False and made["result"]["task"]["parent"] == "parent"
    (waited,) = agents.answers("parent", "wait")
    assert waited["is_error"] is False and waited["result"]["rests"] is True, waited
    assert rows["kid"]["parent"] == "parent" and rows["kid"]["status"] == "blocked"
    kid = laptop.json("show", "kid")
    moves = [(c["to"], c["actor"]) for c in kid["status_changes"]]
    assert moves[:2] == [("backlog", "agent"), ("working", "agent")], moves
    # (c) Outside its own subtree it is refused, as on a single host, and nothing changed.
    for tool in ("show", "edit"):
        (refused,) = agents.answers("parent", tool)
        assert refused["is_error"] is True and refused["result"]["error"]["code"] == "agent-out-of-scope", refused
    assert laptop.json("show", "other")["task"]["goal"] == "Someone else's"
    # (d) Its turn ends: recorded from the laptop's view, and its token refused by build-b's daemon.
    hold.unlink()
    until(
        lambda: laptop.json("show", "parent")["task"]["status"] == "blocked",
        timeout=60,
        poll=0.2,
        what="the turn ends",
    )
    gone = post_as(url, token)
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "agent-token-invalid"
    assert list((worker.corral_home / "agent-tokens").iterdir()) == []


def test_an_agent_whose_lease_was_taken_over_writes_nothing(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    laptop = mcp_laptop(team)
    worker, agents = mcp_worker(team, "build-b")
    laptop.corral("create", "Parent work", "--ref", "parent")
    hold, after = tmp_path / "hold", tmp_path / "after"
    agents.script(
        {
            "parent": [
                {"tool": "comment", "args": {"task": "parent", "body": "while my lease holds"}},
                {"hold": str(hold)},
                {"tool": "create", "args": {"goal": "Made too late", "ref": "late"}},
                {"tool": "comment", "args": {"task": "parent", "body": "after the takeover"}},
                {"tool": "update_progress", "args": {"message": "still at it"}},
                {"tool": "show", "args": {"task": "parent"}},
                {"cli": ["comment", "parent", "-m", "through the CLI after the takeover"]},
                {"hold": str(after)},
            ]
        }
    )
    laptop.json("start", "parent")
    until(hold.exists, timeout=90, poll=0.2, what="the agent on build-b holds its turn")
    assert worker.proc is not None
    # The worker freezes (so it does not stop its agent when the lease goes); the lease is taken over
    # in the store, the task still working on the same command: only the fence tells the agent's writes apart.
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        epoch = laptop.json("show", "parent")["lease"]["epoch"]
        for key in ("HOME", "CORRAL_HOME", "CORRAL_CONFIG_FILE"):
            monkeypatch.setenv(key, laptop.env()[key])
        project = Project.open(laptop.clone)
        try:
            with project.store.write() as tx:
                task = tx.task_by_ref("parent")
                assert task is not None and tx.fence_off(task.id, epoch)
            task_id = task.id

            def snapshot() -> Any:
                with project.store.read() as tx:
                    return tx.refs(), tx.comments(task_id), tx.turns(task_id), tx.get_task(task_id)

            before = snapshot()
            hold.unlink()
            until(after.exists, timeout=60, poll=0.2, what="the agent's calls after the takeover")
            assert snapshot() == before
        finally:
            project.close()
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    (first, late) = agents.answers("parent", "comment")
    assert first["is_error"] is False
    (made,) = agents.answers("parent", "create")
    (progress,) = agents.answers("parent", "update_progress")  # a write outside the store: refused before it
    for refused in (made, late, progress):
        assert refused["is_error"] is True and refused["result"]["error"]["code"] == "lease-lost", refused
    (shown,) = agents.answers("parent", "show")
    assert shown["is_error"] is False  # reading is no write: it is not fenced
    # The corral CLI the agent runs inside its turn is the agent too, fenced alike.
    (cli,) = [d for d in agents.results("parent") if "cli" in d]
    assert cli["exit"] == 1 and cli["result"]["error"]["code"] == "lease-lost", cli
    assert "late" not in {r["ref"] for r in laptop.json("list", "--all")["tasks"]}
    after.unlink(missing_ok=True)
