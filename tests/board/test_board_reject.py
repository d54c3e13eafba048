"""``r`` on the board: a task's reviewed work rejected with the person's reason, as ``corral reject`` does it.
A real turn on the ``command`` harness leaves work to review; Textual's pilot presses the keys."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from tests.board.test_board_app import board, message, shows, when
from tests.conftest import CLI, git

pytestmark = pytest.mark.slow  # a real turn

#: The agent: commits one file and ends, so the task waits for review with work on its branch.
AGENT = textwrap.dedent(
    """\
    import subprocess
    open("draft.txt", "w").write("a first try\\n")
    subprocess.run(["git", "add", "draft.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "A first try"], check=True)
    print("done", flush=True)
    """
)


def test_reject_from_the_board_abandons_the_task_with_the_persons_reason(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    corral.ok("create", "Try the cache", "--ref", "cache")
    corral.ok("start", "cache", "--wait", "--timeout", "60")
    assert corral.json("show", "cache")["task"]["status"] == "blocked"

    async def drive() -> None:
        app = board(repo)
        async with app.run_test(size=(160, 30)) as pilot:
            shown = await shows(pilot, "Waiting for review (1)", "cache")
            assert "r reject" in shown  # the table offers it to a task waiting for review
            await pilot.press("r")
            await shows(pilot, "Why reject cache?")
            await pilot.press("escape")  # backed out: nothing is done
            await when(pilot, lambda _s: message(app) == "Nothing written: nothing was done.", what="backed out")
            assert corral.json("show", "cache")["task"]["status"] == "blocked"
            await pilot.press("r")
            await shows(pilot, "Why reject cache?")
            await pilot.press(*"Wrong approach: the cache hides stale reads", "enter")
            await shows(pilot, "cache is abandoned (rejected).", "Nothing unfinished.", timeout=20)
            assert "Its work is kept under " in message(app)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())
    doc = corral.json("show", "cache")
    assert doc["task"]["status"] == "abandoned"
    last = doc["status_changes"][-1]
    assert (last["from"], last["to"], last["actor"], last["reason"]) == (
        "blocked",
        "abandoned",
        "human",
        "Wrong approach: the cache hides stale reads",
    )
    # The rejected work is kept, not merged: the target has no trace of it.
    assert "draft.txt" not in git(repo, "ls-tree", "--name-only", "main")
