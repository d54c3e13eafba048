"""A permission blocker the agent reported holds its task until a person confirms one retry.

The blocker is what a trusted run's ``failure_disposition(open, permissionResource=…)`` leaves in
the session's journal: here the journal gets those events directly (the tool and its replay are
tested in tests/domain/test_dispositions.py and tests/mcp_doors/).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.engine.runtime.journal import Journal
from tests.conftest import CLI


@pytest.fixture
def held(corral: CLI, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", "echo done")
    corral.ok("create", "Deploy it", "--ref", "deploy")
    corral.ok("start", "deploy", "--wait")
    doc = corral.json("show", "deploy")
    where = Path(corral.json("paths")["paths"]["tasks"]) / doc["task"]["id"] / "sessions" / doc["session"]["id"]
    failed = "tool:output.log:toolu_7"
    Journal(where).append(
        [
            {
                "kind": "failure",
                "id": failed,
                "operation": "op:deploy",
                "category": "tool",
                "summary": "bash failed: cannot read ~/.aws/credentials",
                "at": "2026-12-01T10:00:00Z",
            },
            {
                "kind": "disposition",
                "id": "disposition:output.log:toolu_8",
                "disposition": "open",
                "targets": [failed],
                "reason": "the deploy needs the credential cache",
                "permission_resource": "credential-files",
                "at": "2026-12-01T10:00:01Z",
            },
        ]
    )
    return {"incident": failed}


def test_the_hold_is_shown_and_only_a_confirmed_retry_releases_it(corral: CLI, held: dict[str, str]) -> None:
    doc = corral.json("show", "deploy")
    assert doc["permission_hold"] == {
        "incident": held["incident"],
        "permission_resource": "credential-files",
        "summary": f"a failed bash call ({held['incident']})",  # never the tool's output (its paths)
        "reported_by": "agent",
        "remote_outcome": "unknown",
    }
    text = corral.ok("show", "deploy").stdout
    assert "Held:     the agent reported that a permission (credential-files) blocked" in text
    held_line = next(line for line in text.splitlines() if line.startswith("Held:"))
    assert ".aws/credentials" not in held_line and "credential cache" not in held_line
    assert "agent-reported; the remote outcome is unknown" in text
    assert "corral unblock deploy --retry-blocked" in text
    # ordinary feedback does not run it
    refused = corral("unblock", "deploy", "-m", "just go on", "--json")
    assert refused.returncode == 3 and json.loads(refused.stdout)["error"]["code"] == "permission-hold"
    # a question does not release it
    corral.ok("ask", "deploy", "-m", "What happened?")
    assert corral.json("show", "deploy")["permission_hold"] is not None
    # an agent cannot confirm its own retry
    agent = corral("unblock", "deploy", "--retry-blocked", "--json", env={"CORRAL_ACTOR": "agent"})
    assert agent.returncode == 3 and json.loads(agent.stdout)["error"]["code"] == "agent-out-of-scope"
    # the person confirms one retry: the agent is told exactly what was confirmed
    corral.ok("unblock", "deploy", "--retry-blocked", "--wait")
    after = corral.json("show", "deploy")
    assert after["permission_hold"] is None and after["task"]["status"] == "blocked"
    (confirmed,) = [t for t in after["turns"] if t["role"] == "human" and t["kind"] == "unblock"]
    assert "confirmed ONE retry" in confirmed["content"] and "credential-files" in confirmed["content"]
    assert "Nothing more is granted" in confirmed["content"]
    # one retry was granted, and only one: there is nothing left to confirm
    again = corral("unblock", "deploy", "--retry-blocked", "--json")
    assert again.returncode == 2 and json.loads(again.stdout)["error"]["code"] == "no-permission-hold"
