"""``doctor T`` takes an interrupted task whose failed upstream merge was resolved by hand to blocked.

The conflict is real (tests/recovery/test_hand_merged.py makes it: the agent and the target edit
one file, ``unblock``'s upstream merge conflicts, the agent leaves it); ``doctor`` runs as the CLI.
"""

from __future__ import annotations

import pytest

from tests.conftest import git
from tests.recovery.test_hand_merged import conflicted

pytestmark = pytest.mark.slow  # each runs real turns or real harness probes: seconds, not milliseconds


def test_doctor_t_says_what_keeps_it_interrupted_then_takes_it_to_blocked(proj, agent, repo, corral):
    worktree = conflicted(proj, agent, repo, "by-hand")
    waiting = corral.json("doctor", "by-hand")["checks"]
    assert [(c["name"], c["status"]) for c in waiting] == [("merge", "warn")]
    assert "conflicted paths" in waiting[0]["message"] and "README.md" in waiting[0]["message"]
    assert "corral doctor by-hand" in waiting[0]["hint"]
    (worktree / "README.md").write_text("merged by the person\n")
    git(worktree, "add", "README.md")
    uncommitted = corral.json("doctor", "by-hand")["checks"]
    assert uncommitted[0]["status"] == "warn" and "not committed" in uncommitted[0]["message"]
    git(worktree, "commit", "-q", "--no-edit")

    fixed = corral.json("doctor", "by-hand")["checks"]
    assert [(c["name"], c["status"]) for c in fixed] == [("merge", "fixed")]
    assert "now blocked: merge resolved by hand" in fixed[0]["message"]
    shown = corral.json("show", "by-hand")
    assert shown["task"]["status"] == "blocked"
    last = shown["status_changes"][-1]
    assert (last["from"], last["to"], last["actor"], last["reason"]) == (
        "interrupted",
        "blocked",
        "system",
        "merge resolved by hand",
    )
    again = corral.json("doctor", "by-hand")["checks"]  # blocked now: the label re-derivation, nothing to do
    assert [(c["name"], c["status"]) for c in again] == [("park", "ok")]
    accepted = corral("accept", "by-hand", "--json")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert git(repo, "show", "main:README.md") == "merged by the person"
