"""The ``command`` harness is a contract (docs/harnesses.md), proved through the real CLI.

A command unset, empty or blank is refused at ``create``, ``edit`` and ``start`` before anything
runs, so feedback can never become the program; option-like feedback never becomes an option
(argv is exactly the ``command`` setting); the prompt arrives the same way at every size — on
stdin and in ``CORRAL_PROMPT_FILE`` — with the turn's facts in ``CORRAL_*`` variables.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import Posture, TurnRequest
from corral.adapters.harness.command import CommandHarness
from corral.errors import ArgvError
from tests.cli.helpers import json_error
from tests.conftest import CLI

#: Records what it received (argv, stdin, the prompt file and its mode, the contract's variables).
RECORDER = r"""
import json, os, stat, sys
from pathlib import Path
stdin = sys.stdin.buffer.read().decode("utf-8")
path = os.environ.get("CORRAL_PROMPT_FILE")
entry = {
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "stdin": stdin,
    "file": Path(path).read_text(encoding="utf-8") if path else None,
    "file_mode": stat.S_IMODE(os.stat(path).st_mode) if path else None,
    "env": {k: v for k, v in os.environ.items() if k.startswith("CORRAL_") and k != "CORRAL_COMMAND_ID"},
}
with open(os.environ["RECORD_TO"], "a") as fh:
    fh.write(json.dumps(entry) + "\n")
print("recorded")
"""


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script} --fixed-flag")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("RECORD_TO", str(record))
    return record


def calls(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


@pytest.mark.parametrize("command", ["", "   "], ids=["empty", "blank"])
def test_create_refuses_a_command_harness_with_no_command(corral: CLI, command: str) -> None:
    result = corral("create", "Do it", "--harness", "command", "--json", env={"CORRAL_COMMAND": command})
    err = json_error(result, 1, "harness-command-unset")
    assert "docs/harnesses.md" in err["hint"]
    assert corral.json("list")["tasks"] == []


def test_create_refuses_it_when_the_setting_is_unset(corral: CLI) -> None:
    err = json_error(corral("create", "Do it", "--harness", "command", "--json"), 1, "harness-command-unset")
    assert "command" in err["message"]


def test_start_refuses_feedback_that_would_have_become_the_program(
    corral: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    program = tmp_path / "would-run.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    corral.ok("create", "Do it", "--ref", "prog", env={"CORRAL_COMMAND": "true"})
    started = corral("start", "prog", "-m", str(program), "--json", env={"CORRAL_COMMAND": ""})
    json_error(started, 1, "harness-command-unset")
    assert not marker.exists()
    assert corral.json("show", "prog")["task"]["status"] == "backlog"  # refused before anything ran
    edited = corral("edit", "prog", "--harness", "command", "--json", env={"CORRAL_COMMAND": " "})
    json_error(edited, 1, "harness-command-unset")


def test_start_refuses_a_command_not_on_path(corral: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", "no-such-agent-on-path --go")
    corral.ok("create", "Do it", "--ref", "absent")  # installing it before start is fine
    err = json_error(corral("start", "absent", "--json"), 1, "harness-missing")
    assert "docs/harnesses.md" in err["hint"]
    assert corral.json("show", "absent")["task"]["status"] == "backlog"


@pytest.mark.slow
def test_option_like_feedback_and_any_size_reach_the_command_as_the_prompt(corral: CLI, recorder: Path) -> None:
    corral.ok("create", "Read the prompt", "--ref", "contract")
    corral.ok("start", "contract", "--message=--version", "--wait", "--timeout", "60")
    big = "é" * (150 * 1024)  # 300 KiB of UTF-8: past where argv once gave way to stdin
    # On stdin: too big for corral's own argv; past the default cap, so the cap is raised for it.
    corral.ok("unblock", "contract", "--wait", "--timeout", "60", input=big, env={"CORRAL_TEXT_CAP": str(1 << 20)})
    corral.ok("ask", "contract", "-m", "--help")
    first, second, asked = calls(recorder)
    worktree = corral.json("show", "contract")["task"]["worktree"]
    for call in (first, second, asked):
        assert call["argv"] == ["--fixed-flag"]  # exactly the setting: nothing appended, ever
        assert call["stdin"] == call["file"] and call["file_mode"] == 0o600
        assert call["cwd"] == worktree and call["env"]["CORRAL_WORKTREE"] == worktree
        assert Path(call["env"]["CORRAL_PROMPT_FILE"]).parent != Path(worktree)
        assert "CORRAL_PROMPT_ON_STDIN" not in call["env"]
        assert call["env"]["CORRAL_TASK"] == "contract"
        assert call["env"]["CORRAL_TASK_ID"] == corral.json("show", "contract")["task"]["id"]
        assert (
            Path(call["env"]["CORRAL_PROMPT_FILE"]).name and ".git" not in Path(call["env"]["CORRAL_PROMPT_FILE"]).parts
        )
    assert first["env"]["CORRAL_TURN_TRIGGER"] == "start" and second["env"]["CORRAL_TURN_TRIGGER"] == "unblock"
    assert "--version" in first["stdin"] and first["env"]["CORRAL_TURN_KIND"] == "work"
    assert first["env"]["CORRAL_READ_ONLY"] == "0"
    assert big in second["stdin"] and second["env"]["CORRAL_TURN_KIND"] == "work"
    assert "--help" in asked["stdin"]
    assert asked["env"]["CORRAL_TURN_KIND"] == "ask" and asked["env"]["CORRAL_READ_ONLY"] == "1"


def test_the_adapter_gives_every_fact_of_the_turn(tmp_path: Path) -> None:
    h = CommandHarness("agent --x")
    req = TurnRequest(
        prompt="--version\n", cwd="/w", kind="auto-resume", task_ref="fix-it", task_id="t1", prompt_dir=str(tmp_path)
    )
    launch = h.work(req)
    assert launch.argv == ["agent", "--x"] and launch.stdin == b"--version\n"
    assert launch.env == {
        "CORRAL_TURN_KIND": "resume",
        "CORRAL_TURN_TRIGGER": "auto-resume",
        "CORRAL_WORKTREE": "/w",
        "CORRAL_READ_ONLY": "0",
        "CORRAL_TASK": "fix-it",
        "CORRAL_TASK_ID": "t1",
        "CORRAL_PROMPT_FILE": str(tmp_path / "prompt.txt"),
    }
    assert (tmp_path / "prompt.txt").read_bytes() == b"--version\n"
    asked = h.ask(TurnRequest(prompt="q", cwd="/w", posture=Posture(read_only=True), task_ref="fix-it"))
    assert asked.env["CORRAL_TURN_KIND"] == "ask" and asked.env["CORRAL_READ_ONLY"] == "1"
    pair = h.interactive(TurnRequest(prompt="", cwd="/w", kind="pair"))
    assert pair.stdin is None and "CORRAL_PROMPT_FILE" not in pair.env and pair.env["CORRAL_TURN_KIND"] == "pair"
    with pytest.raises(ArgvError):
        CommandHarness("").work(TurnRequest(prompt="id", cwd="/w"))  # never the prompt as the program


@pytest.mark.parametrize("name", ["claude", "pi", "codex"])
def test_no_agent_cli_takes_an_option_like_prompt_as_an_option(name: str) -> None:
    from corral.adapters.harness import make_harness

    h = make_harness(name, {})
    for launch in (h.work(TurnRequest(prompt="--version", cwd="/w")), h.ask(TurnRequest(prompt="-rf", cwd="/w"))):
        assert "--version" not in launch.argv and "-rf" not in launch.argv
        assert launch.stdin in (b"--version", b"-rf")
