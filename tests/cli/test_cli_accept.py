"""accept, diff, delete and reopen through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_turns import calls, fake_env
from tests.conftest import git

WORK = [
    {"init": True},
    {"write": {"path": "feature.py", "content": "FEATURE = True\n"}},
    {"commit": "add feature"},
    {"write": {"path": "notes.txt", "content": "uncommitted\n"}},
    {"result": "Feature added."},
]


def test_diff_accept_reopen_delete(corral, tmp_path, repo):
    env = fake_env(tmp_path, WORK, [{"init": True}, {"commit": "tidy"}, {"result": "tidy"}])
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    shown = corral.json("diff", "feat", env=env)
    assert len(shown["commits"]) == 1 and "add feature" in shown["commits"][0]
    assert "+FEATURE = True" in shown["diff"] and "uncommitted" not in shown["diff"]  # the commits only
    assert shown["uncommitted"] == ["notes.txt"]  # named apart: accept does not merge it
    stat = corral.ok("diff", "feat", "--stat", env=env).stdout
    assert "feature.py" in stat and "not part of what accept merges (1 path(s)): notes.txt" in stat
    refused = corral("accept", "feat", env=env)
    assert refused.returncode == 3 and "notes.txt" in refused.stderr  # uncommitted changes named
    wt = Path(corral.json("show", "feat", env=env)["task"]["worktree"])
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "commit the notes")
    moved = corral("accept", "feat", env=env)  # a commit nobody saw in a diff: named, not merged
    assert moved.returncode == 3 and "commit the notes" in moved.stderr and "--tip" in moved.stderr
    accepted = corral("accept", "feat", "--json", "--yes", env=env)
    assert accepted.returncode == 0, accepted.stderr
    lines = [json.loads(line) for line in accepted.stdout.splitlines()]
    assert lines[0]["event"] == "phase" and lines[0]["id"] == "preflight"
    assert lines[-1]["event"] == "result" and lines[-1]["task"]["status"] == "complete"
    assert any(e.get("event") == "plan" for e in lines)
    assert (repo / "feature.py").read_text() == "FEATURE = True\n"
    again = corral("accept", "feat", env=env)  # a second accept: already accepted, nothing merged
    assert again.returncode == 0 and "already accepted" in again.stdout
    assert git(repo, "rev-list", "--count", "HEAD") == "2"
    no_reason = corral("reopen", "feat", env=env)
    assert no_reason.returncode == 2 and "reason" in no_reason.stderr
    reopened = corral.json("reopen", "feat", "--reason", "It broke the build", env=env)
    assert reopened["task"]["status"] == "blocked"
    assert corral.json("show", "feat", env=env)["task"]["worktree"]
    assert corral("delete", "feat", env=env).returncode == 3  # not terminal
    corral.ok("close", "feat", "-m", "superseded", env=env)
    deleted = corral.json("delete", "feat", "--yes", env=env)
    assert deleted["deleted"]["ref"] == "feat"
    assert corral("show", "feat", env=env).returncode == 4
    assert git(repo, "for-each-ref", "refs/corral/") == ""
    assert calls(tmp_path)


def test_accept_json_errors_are_one_more_json_line(corral):
    """accept streams JSON Lines, so its failure is an event line, not a separate document."""
    refused = corral("accept", "nope", "--json")
    assert refused.returncode == 4
    assert refused.stdout.count("\n") == 1
    doc = json.loads(refused.stdout)
    assert set(doc) == {"event", "error"} and doc["event"] == "error"
    assert doc["error"]["code"] == "task-not-found"
    corral.ok("create", "Never started", "--ref", "idle")
    refused = corral("accept", "idle", "--json")
    assert refused.returncode == 3
    assert json.loads(refused.stdout.splitlines()[-1])["event"] == "error"
    refused = corral("accept", "idl", "--json")  # a prefix: refused by the gate, before accept runs
    assert refused.returncode == 2 and refused.stdout.count("\n") == 1
    doc = json.loads(refused.stdout)
    assert doc["event"] == "error" and doc["error"]["code"] == "prefix-refused"
