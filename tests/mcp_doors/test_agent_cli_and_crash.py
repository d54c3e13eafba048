"""An agent's corral CLI inside its turn, a daemon SIGKILLed mid-wait, and progress torn down with the turn."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from corral.engine.project import Project
from corral.engine.runtime import wait_intervals, wait_markers
from tests.mcp_doors.conftest import Door
from tests.support.polling import until


def entries(door: Door, ref: str) -> list[dict[str, Any]]:
    path = door.out / f"{ref}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_cli_inside_a_turn_is_the_agent(door: Door) -> None:
    corral = door.cli
    corral.ok("create", "Parent work", "--ref", "parent")
    corral.ok("create", "Someone else's", "--ref", "other")
    door.script(
        {
            "parent": [
                {"cli": ["create", "Made with the CLI", "--ref", "cli-kid"]},
                {"cli": ["comment", "cli-kid", "-m", "noted by the agent"]},
                {"cli": ["show", "other"]},
                {"cli": ["close", "other", "-m", "not mine to close"]},
                {"cli": ["create", "Elsewhere", "--parent", "other"]},
            ]
        }
    )
    corral.ok("start", "parent")
    until(lambda: corral.json("show", "parent")["task"]["status"] != "working", what="the turn's end")
    made, commented, shown, closed, elsewhere = (e for e in entries(door, "parent") if "cli" in e)
    assert made["exit"] == 0 and made["result"]["task"]["parent"] == "parent"
    assert commented["exit"] == 0
    for refused in (shown, closed, elsewhere):
        assert refused["exit"] == 3 and refused["result"]["error"]["code"] == "agent-out-of-scope", refused
    kid = corral.json("show", "cli-kid")
    assert [(c["to"], c["actor"]) for c in kid["status_changes"]] == [("backlog", "agent")]
    assert [(n["actor"], n["body"]) for n in kid["comments"]] == [("agent", "noted by the agent")]
    assert corral.json("show", "other")["task"]["status"] == "backlog"
    # Outside the turn the token is dead: a CLI that still carries it is refused, not taken for a person.
    stale = corral("show", "parent", "--json", env={"CORRAL_AGENT_TOKEN": "crl_not-a-live-token"})
    assert stale.returncode == 3 and json.loads(stale.stdout)["error"]["code"] == "agent-token-invalid"


def test_a_daemon_killed_mid_wait_leaves_no_waiting_and_an_open_interval(door: Door, tmp_path: Path) -> None:
    corral = door.cli
    corral.ok("create", "Parent work", "--ref", "parent")
    kid_hold = tmp_path / "kid-hold"
    door.script(
        {
            "parent": [
                {"tool": "create", "args": {"goal": "Slow child", "ref": "kid"}},
                {"tool": "start", "args": {"task": "kid"}},
                {"tool": "update_progress", "args": {"message": "waiting for the kid"}},
                {"tool": "wait", "args": {"task": "kid"}},
                {"hold": str(tmp_path / "parent-hold")},
            ],
            "kid": [{"hold": str(kid_hold)}],
        }
    )
    corral.ok("start", "parent")
    sub = until(
        lambda: "waiting on kid" in (s := corral.json("show", "parent")["task"]["substate"] or "") and s,
        what="waiting on kid",
    )
    assert sub.startswith("waiting on kid (") and sub.endswith("waiting for the kid"), sub
    daemon = corral.json("daemon", "status")["daemon"]
    os.kill(daemon["pid"], signal.SIGKILL)
    until(lambda: corral("daemon", "status").returncode == 1, what="the daemon's death")  # 1: not running
    # The markers' writer is dead: no surface reads waiting (nor its progress line) any more — the
    # task degrades to working(agent), never to a lie.
    after = corral.json("show", "parent")
    assert after["task"]["status"] == "working"
    assert after["task"]["substate"] == "agent"
    listed = {r["ref"]: r["substate"] for r in corral.json("list")["tasks"]}
    assert listed["parent"] == "agent"
    project = Project.open(corral.cwd)
    (interval,) = wait_intervals.intervals(project, after["task"]["id"])
    assert interval.ended_at is None and interval.outcome is None
    # The turn ends: its progress line and its markers go with it.
    corral.ok("stop", "parent")
    until(lambda: corral.json("show", "parent")["task"]["status"] != "working", what="the parent's turn end")
    protocol = Path(corral.json("paths")["paths"]["tasks"]) / after["task"]["id"] / "protocol"
    assert not (protocol / "progress.json").exists() and not (protocol / wait_markers.WAITING).exists()
    assert corral.json("show", "parent")["task"]["substate"] is None
    kid_hold.unlink()
