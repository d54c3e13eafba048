"""The real Pi binary in corral's bubblewrap sandbox: Pi has no sandbox of its own, corral's holds it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import git
from tests.seams.test_corral_pi import make_rig  # noqa: F401  (the fixture)
from tests.support.model_server import Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_sandboxed_pi_turn_commits_in_its_worktree_and_is_refused_outside(make_rig: Any) -> None:  # noqa: F811
    rig = make_rig([], sandbox="bwrap")
    commit = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt'"
    outside = f'echo x > {rig.repo}/evil.txt; echo x > "$HOME/evil.txt"; echo done'
    rig.server.steps.extend(
        [ToolUse("bash", {"command": commit}), ToolUse("bash", {"command": outside}), Text("Done.")]
    )
    ref = rig.create("Add a greeting", "-m", "Write hello.txt and commit it.")
    # corral's tools on, as a user has them: the confined Pi turn's bash is corral's, through its Pi extension
    rig.corral.ok("start", ref, env={**rig.env, "CORRAL_AGENT_TOOLS": "1"})
    waited = rig.run("wait", ref, "--timeout", "60")
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout, rig.run("logs", ref).stdout)
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    assert shown["sandbox"] == {"mode": "bwrap", "reason": "sandbox = bwrap in the settings"}
    assert shown["failure_rule"] == {"rule": "intents", "why": None}
    assert "Rule:     tool failures judged with the agent's intents and dispositions" in rig.run("show", ref).stdout
    assert git(rig.repo, "log", "-1", "--format=%s", f"corral/{ref}") == "Add hello.txt"
    committed, refused = rig.server.script_requests[-1].tool_results()
    assert not committed.get("is_error"), committed
    assert json.dumps(refused["content"]).count("Read-only file system") == 2, refused
    assert not (rig.repo / "evil.txt").exists()
