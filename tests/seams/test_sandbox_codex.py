"""The real Codex binary in corral's bubblewrap sandbox, scripted by the Responses server.

Codex's own sandbox is bubblewrap too, and it cannot nest inside corral's: every command then
fails with "bwrap: setting up uid map: Operation not permitted". So a confined Codex turn runs
with ``-s danger-full-access`` and corral's sandbox holds it (docs/harnesses.md#sandbox): its
commands run, commit from the worktree, and are refused outside it; an ask's worktree is read-only.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import git
from tests.seams.test_corral_codex import make_rig  # noqa: F401  (the fixture)
from tests.support.responses_server import ExecCommand, Message

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def outputs(rig: Any) -> list[str]:
    """Each command's output, as Codex handed it back to the model (the last request holds them all)."""
    return [o["output"] for o in rig.server.script_requests[-1].function_call_outputs()]


def test_a_sandboxed_codex_turn_commits_in_its_worktree_and_is_refused_outside(make_rig: Any) -> None:  # noqa: F811
    commit = "printf 'hello\\n' > hello.txt && git add hello.txt && git commit -q -m 'Add hello.txt'"
    rig = make_rig([], sandbox="bwrap")
    outside = f'echo x > {rig.repo}/evil.txt; echo x > "$HOME/evil.txt"; echo done'
    rig.server.steps.extend([ExecCommand(commit), ExecCommand(outside), Message("Done.")])
    ref = rig.create("Add a greeting", "-m", "Write hello.txt and commit it.")
    rig.corral.ok("start", ref, env=rig.env)
    waited = rig.run("wait", ref, "--timeout", "60")
    assert waited.returncode == 0, (waited.stderr, rig.run("show", ref).stdout, rig.run("logs", ref).stdout)
    shown = rig.show(ref)
    assert shown["task"]["status"] == "blocked", shown
    assert shown["sandbox"] == {"mode": "bwrap", "reason": "sandbox = bwrap in the settings"}
    branch = f"corral/{ref}"
    assert git(rig.repo, "log", "-1", "--format=%s", branch) == "Add hello.txt"
    committed, refused = outputs(rig)
    assert "Process exited with code 0" in committed, committed
    assert refused.count("Read-only file system") == 2, refused
    assert not (rig.repo / "evil.txt").exists()


def test_a_sandboxed_codex_ask_reads_but_cannot_write_the_worktree(make_rig: Any) -> None:  # noqa: F811
    rig = make_rig([Message("Ready.")], sandbox="bwrap")
    ref = rig.create("Look around", "-m", "Say ready.")
    rig.corral.ok("start", ref, env=rig.env)
    assert rig.run("wait", ref, "--timeout", "60").returncode == 0
    rig.server.steps.extend([ExecCommand("cat README.md; echo x > written.txt"), Message("It is a demo.")])
    asked = rig.run("ask", ref, "-m", "What is this?", "--timeout", "60")
    assert asked.returncode == 0, (asked.stdout, asked.stderr)
    (said,) = outputs(rig)
    assert "# demo" in said and "written.txt: Read-only file system" in said, said
