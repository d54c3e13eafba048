"""The task agents' door end to end: a real daemon, a real minted token, a scripted agent using the official MCP client.

The agent (tests/support/mcp_agent.py, run by the ``command`` harness) creates a subtask,
starts it, waits on it (its own task reads ``waiting on kid`` meanwhile), posts progress,
accepts the subtask into its own branch, and is refused what its gates forbid. Then the
person accepts the parent, and the subtask's work is on the target.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.conftest import git


def results(out: Path, ref: str) -> list[dict[str, Any]]:
    path = out / f"{ref}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def calls(out: Path, ref: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for doc in results(out, ref):
        if "tool" in doc:
            found.setdefault(doc["tool"], []).append(doc)
    return found


def test_an_agent_drives_its_own_subtask_through_the_daemon(door: Any, repo: Path) -> None:
    corral = door.cli
    corral.ok("create", "Parent work", "--ref", "parent")
    corral.ok("create", "Someone else's", "--ref", "other")
    door.script(
        {
            "parent": [
                {"tool": "create", "args": {"goal": "Child work", "ref": "kid"}},
                {"tool": "start", "args": {"task": "kid"}},
                {"tool": "wait", "args": {"task": "kid"}},
                {"tool": "update_progress", "args": {"message": "merging   kid\n" + "x" * 200}},
                {"tool": "accept", "args": {"task": "kid"}},
                {"tool": "accept", "args": {"task": "parent"}},
                {"tool": "show", "args": {"task": "other"}},
                {"tool": "create", "args": {"goal": "Sneaky", "parent": "other"}},
                {"tool": "show", "args": {"task": "kid"}},
            ],
            "kid": [
                {"sleep": 2.5},
                {"write": ["kid.txt", "from the kid\n"]},
                {"commit": "kid work"},
            ],
        }
    )
    corral.ok("start", "parent")
    saw_waiting = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        doc = corral.json("show", "parent")
        sub = doc["task"]["substate"] or ""
        if "waiting on kid" in sub:
            saw_waiting = sub
        if doc["task"]["status"] != "working":
            break
        time.sleep(0.2)
    assert saw_waiting is not None, "the parent never read waiting on kid"
    done = corral.json("show", "parent")
    assert done["task"]["status"] == "blocked", done
    got = calls(door.out, "parent")
    assert [d["is_error"] for d in got["create"]] == [False, True]
    assert got["create"][0]["result"]["task"]["parent"] == "parent"  # an agent's tasks are its subtasks
    assert got["create"][1]["result"]["error"]["code"] == "agent-out-of-scope"
    assert got["start"][0]["is_error"] is False
    waited = got["wait"][0]["result"]
    assert waited["rests"] is True and waited["task"]["status"] == "blocked", waited
    progress = got["update_progress"][0]["result"]
    assert progress["truncated"] is True and progress["message"].startswith("merging kid x")
    assert len(progress["message"]) <= 120
    accepts = got["accept"]
    assert accepts[0]["is_error"] is False, accepts[0]
    assert accepts[0]["result"]["task"]["status"] == "complete"
    assert accepts[1]["is_error"] is True and accepts[1]["result"]["error"]["code"] == "agent-out-of-scope"
    assert got["show"][0]["result"]["error"]["code"] == "agent-out-of-scope"
    assert got["show"][1]["result"]["task"]["ref"] == "kid"
    # Recorded with actor agent: the subtask's creation, start and accept.
    kid = corral.json("show", "kid")
    actors = {(c["to"], c["actor"]) for c in kid["status_changes"]}
    assert ("backlog", "agent") in actors and ("working", "agent") in actors and ("complete", "agent") in actors
    human_turns = [t for t in kid["turns"] if t["role"] == "human"]
    assert human_turns and all(t["actor"] == "agent" for t in human_turns)
    # Waited time is not the agent's: the parent's agent turn reports both, apart.
    (turn,) = [t for t in done["turns"] if t["role"] == "agent"]
    assert turn["waited_s"] >= 2.0 and turn["agent_s"] is not None, turn
    assert done["agent_tools"] == {"mcp": True, "absent": None}
    # The kid's work landed on the parent's branch; the person accepts the parent onto main.
    parent_branch = done["task"]["branch"]
    assert "kid.txt" in git(repo, "ls-tree", "-r", "--name-only", parent_branch).split()
    corral.ok("accept", "parent")
    assert "kid.txt" in git(repo, "ls-tree", "-r", "--name-only", "main").split()
    # The turn's token died with it: no grant file is left.
    tokens = Path(corral.json("paths")["paths"]["home"]) / "agent-tokens"
    assert not tokens.exists() or list(tokens.iterdir()) == []


def test_without_its_tools_the_turn_still_runs_and_show_says_why(door: Any, repo: Path) -> None:
    corral = door.cli
    door.script({"*": [{"write": ["x.txt", "x\n"]}, {"commit": "x"}]})
    corral.ok("create", "Quietly", "--ref", "off")
    corral.ok("start", "off", "--wait", env={"CORRAL_AGENT_TOOLS": "0"})
    shown = corral.json("show", "off")
    assert shown["task"]["status"] == "blocked" and shown["agent_tools"] == {
        "mcp": False,
        "absent": "agent_tools is off in the settings",
    }
    assert (
        "Tools:    the agent had no corral tools (agent_tools is off in the settings)"
        in corral.ok("show", "off").stdout
    )
    # The daemon cannot start (its directory is a file): the turn runs without the endpoint.
    home = Path(corral.json("paths")["paths"]["home"])
    (home / "daemon").write_text("not a directory")
    corral.ok("create", "Without a daemon", "--ref", "nodaemon")
    corral.ok("start", "nodaemon", "--wait")
    shown = corral.json("show", "nodaemon")
    assert shown["task"]["status"] == "blocked"
    assert shown["agent_tools"]["mcp"] is False and "daemon" in shown["agent_tools"]["absent"], shown["agent_tools"]
    (home / "daemon").unlink()
