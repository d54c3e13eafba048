"""What a new user met in a first hour, each through the real CLI: ``list``'s columns stay aligned under a
long status, ``show`` gives the agent's conclusion, ``diff`` after reopening an accepted task shows only
what is new, ``reopen`` takes ``-m``, ``pair`` says what is about to happen before the agent takes the
terminal, ``dashboard --open`` says when no browser opened, and the top-level help cuts no description."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.engine.project import Project
from corral.engine.runtime import progress_line
from corral.engine.runtime import protocol as proto
from tests.cli.helpers import create, to_working
from tests.cli.test_pair_terminal import Pty
from tests.conftest import CLI

#: A command-harness agent: it reports as it goes, and its last line is its conclusion.
TALKER = textwrap.dedent(
    """\
    import os, subprocess, sys
    from pathlib import Path
    n = len(list(Path(".").glob("work-*.txt"))) + 1
    if os.environ.get("CORRAL_TURN_KIND") in ("pair", "chat"):
        print("AGENT-IN-THE-TERMINAL", flush=True)
        sys.exit(0)
    print("Reading the code first.")
    print("Running the tests.")
    Path(f"work-{n}.txt").write_text(f"work {n}\\n")
    subprocess.run(["git", "add", f"work-{n}.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"work {n}"], check=True)
    print(f"Done: wrote work-{n}.txt and the tests pass.")
    """
)


@pytest.fixture
def talker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    agent = tmp_path / "talker.py"
    agent.write_text(TALKER)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {agent}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    return agent


@pytest.fixture
def project(repo: Path) -> Iterator[Project]:
    p = Project.open(repo)
    yield p
    p.close()


def test_list_keeps_its_columns_aligned_when_a_status_text_is_long(corral: CLI, project: Project) -> None:
    ids = {ref: create(corral, f"Goal of {ref}", "--ref", ref)["id"] for ref in ("short", "chatty", "idle")}
    for ref in ("short", "chatty"):
        to_working(corral, ref)
        protocol_dir = project.paths.protocol_dir(ids[ref])
        protocol_dir.mkdir(parents=True, exist_ok=True)
        proto.write(protocol_dir, proto.SupervisorStatus(command_id="c", pid=os.getpid(), phase="work"), durable=False)
    progress_line.post_progress(
        project, ids["chatty"], "running migration 3 of 7, then the slow integration suite " * 2
    )
    out = corral.ok("list", env={"COLUMNS": "160"}).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 3, out
    starts = {line.index(f"Goal of {line.split()[0]}") for line in lines}
    assert len(starts) == 1, out  # every goal starts in the same column


def test_show_gives_the_agents_conclusion_not_its_first_line(corral: CLI, talker: Path) -> None:
    corral.ok("create", "Write the work", "--ref", "talk")
    corral.ok("start", "talk", "--wait", "--timeout", "60")
    page = corral.ok("show", "talk").stdout
    assert "Done: wrote work-1.txt and the tests pass." in page, page
    assert "Reading the code first." not in page, page


def test_diff_after_reopening_an_accepted_task_shows_only_the_new_work(corral: CLI, repo: Path, talker: Path) -> None:
    corral.ok("create", "Write the work", "--ref", "again")
    corral.ok("start", "again", "--wait", "--timeout", "60")
    corral.ok("accept", "again", "--yes")
    assert (repo / "work-1.txt").read_text() == "work 1\n"  # on main now
    reopened = corral("reopen", "again", "-m", "One more file is needed.")
    assert reopened.returncode == 0, reopened.stderr
    before = corral.json("diff", "again")
    assert before["commits"] == [] and before["diff"] == "", before  # nothing new yet: the merged work is not
    corral.ok("unblock", "again", "-m", "Write the second file.", "--wait", "--timeout", "60")
    after = corral.json("diff", "again")
    assert "work-2.txt" in after["diff"] and "work-1.txt" not in after["diff"], after["diff"]
    assert len(after["commits"]) >= 1


def test_reopen_takes_m_like_close_and_reject_and_reason_stays(corral: CLI) -> None:
    for ref in ("one", "two"):
        corral.ok("create", f"Task {ref}", "--ref", ref)
        corral.ok("close", ref, "-m", "not now")
    assert corral.json("reopen", "one", "-m", "now after all")["task"]["status"] == "backlog"
    assert corral.json("reopen", "two", "--reason", "now after all")["task"]["status"] == "backlog"
    help_text = corral.ok("reopen", "--help").stdout
    assert "-m, --message" in help_text


def test_pair_prints_a_banner_before_handing_over_the_terminal(corral: CLI, repo: Path, talker: Path) -> None:
    corral.ok("create", "Write the work", "--ref", "duo")
    corral.ok("start", "duo", "--wait", "--timeout", "60")
    session = Pty([sys.executable, "-m", "corral", "pair", "duo"], repo)
    out = session.read_until("AGENT-IN-THE-TERMINAL", timeout=60)
    before = out.split("AGENT-IN-THE-TERMINAL", 1)[0]
    assert "Pairing on duo" in before, out
    assert "exit the agent" in before, out
    assert session.finish() == 0, session.out


def test_dashboard_open_says_so_when_no_browser_opens(corral: CLI, tmp_path: Path) -> None:
    env = {"BROWSER": "false", "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    try:
        result = corral.process("dashboard", "--open", env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "No browser opened" in result.stderr, result.stderr
        assert result.stdout.startswith("http://127.0.0.1:")
        doc = corral.process("dashboard", "--open", "--json", env=env, timeout=60).json()
        assert doc["opened"] is False
    finally:
        corral.process("daemon", "stop", timeout=60)


def test_top_level_help_cuts_no_description_mid_sentence(corral: CLI) -> None:
    text = corral.ok("--help", env={"COLUMNS": "100"}).stdout
    commands = text.split("Commands:", 1)[1].split("Start here:", 1)[0]
    assert "..." not in commands, commands
    joined = re.sub(r"\s+", " ", commands)
    assert "Start a backlog task: its branch and worktree are made" in joined
    epilog = text.split("Start here:", 1)[1]
    assert "Every command takes --json" not in epilog  # mcp does not
