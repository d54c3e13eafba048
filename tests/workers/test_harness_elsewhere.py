"""With ``dispatch = "workers"`` the agent runs on a worker's host: a harness this host lacks is neither a
warning at ``create`` nor a refusal at ``start`` (the worker that claims the turn checks its own)."""

from __future__ import annotations

from pathlib import Path

from tests.workers.conftest import Team


def test_a_harness_missing_here_is_no_warning_and_no_refusal_when_turns_go_to_the_workers(
    team: Team, tmp_path: Path
) -> None:
    laptop = team.laptop()
    laptop.extra_env["CORRAL_CLAUDE_BIN"] = str(tmp_path / "no-such-claude")
    made = laptop.corral("create", "Fix the login", "--ref", "login", "--harness", "claude")
    assert "warning:" not in made.stderr, made.stderr
    started = laptop.json("start", "login")
    assert started["task"]["status"] == "working", started
