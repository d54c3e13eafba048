"""accept's plain forms run without click (corral.cli.accept_way): the same grammar as the click command,
the same answers, the same gate, and click for everything else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from corral.cli import accept_way, reads
from corral.cli.app import App
from corral.domain.agent_tools import TOKEN_ENV
from tests.cli.test_cli_turns import fake_env
from tests.cli.test_quick import both_ways
from tests.conftest import CLI, git

WORK = [
    {"init": True},
    {"write": {"path": "feature.py", "content": "FEATURE = True\n"}},
    {"commit": "add feature"},
    {"result": "Feature added."},
]


def _options() -> dict[str, click.Option]:
    from corral.cli.root import cli

    command = cli.get_command(click.Context(cli), "accept")
    assert command is not None
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def test_the_switches_and_the_value_are_the_click_commands_own() -> None:
    options = _options()
    assert {opt: options[opt].name for opt in accept_way.SWITCHES} == accept_way.SWITCHES
    assert all(options[opt].is_flag for opt in accept_way.SWITCHES)
    assert {opt: options[opt].name for opt in accept_way.VALUES} == accept_way.VALUES
    assert not any(options[opt].is_flag or options[opt].multiple for opt in accept_way.VALUES)
    own = {opt for opt, p in options.items() if p.name not in ("as_json",) and opt != "--help"}
    assert own - {"--repo"} == set(accept_way.SWITCHES) | set(accept_way.VALUES)  # nothing click takes is missed


@pytest.mark.parametrize(
    "args",
    [
        ["accept"],
        ["accept", "a", "b"],
        ["accept", "a", "--help"],
        ["accept", "a", "-h"],
        ["accept", "a", "--bogus"],
        ["accept", "a", "--tip"],
        ["accept", "a", "--tip="],
        ["accept", "a", "--tip", "-x"],
        ["accept", "a", "--tip", "abc", "--tip", "abc"],
        ["accept", "a", "--yes", "--yes"],
        ["accept", "a", "-y", "--yes"],
        ["accept", "a", "-yh"],
        ["accept", "--", "a"],
        ["accept", "a", "--repo"],
        ["--yes", "accept", "a"],
        ["--tip", "abc", "accept", "a"],
        ["show", "accept"],
        ["diff", "accept"],
    ],
)
def test_anything_but_the_plain_forms_goes_through_click(args: list[str]) -> None:
    assert accept_way.quick(App(), args) is None
    if args[:1] == ["accept"] or args[:1] == ["--yes"] or args[:1] == ["--tip"]:
        assert reads.quick(App(), args) is None


def test_completion_and_an_agent_go_through_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_CORRAL_COMPLETE", "bash_complete")
    assert reads.quick(App(), ["accept", "a"]) is None
    monkeypatch.delenv("_CORRAL_COMPLETE")
    monkeypatch.setenv(TOKEN_ENV, "t0ken")  # a turn's agent: its gates are click's commands'
    assert reads.quick(App(), ["accept", "a"]) is None


@pytest.mark.parametrize(
    ("args", "repo"),
    [
        (["accept", "a"], None),
        (["--repo", "/r/one", "accept", "a", "--yes"], "/r/one"),
        (["accept", "a", "--repo=/r/two", "--tip=abc1234"], "/r/two"),
        (["--json", "accept", "a", "--allow-markers", "--repo", "/r/three", "-y"], "/r/three"),
    ],
)
def test_the_plain_forms_are_taken(args: list[str], repo: str | None) -> None:
    app = App()
    found = reads.quick(app, args)
    assert found is not None and found.settles  # a pre-accept turn may start the daemon: watched for
    assert app.repo == repo


def _both(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(exit code, stdout, stderr) of ``args`` the quick way (accept's own) and through click."""
    assert accept_way.quick(App(), args) is not None
    return both_ways(args, capsys, monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        ["accept", "first-task"],  # in backlog: refused for its state
        ["accept", "first-task", "--json"],
        ["accept", "first"],  # a prefix: refused for a command that merges a task
        ["--json", "accept", "first"],
        ["accept", "no-such-task", "--json"],
        ["accept", "first-task", "--tip", "abc1234", "--yes"],  # two answers to one question
        ["accept", "first-task", "--tip=zzz", "--json"],  # no commit's id
    ],
)
def test_the_quick_way_answers_as_click_does(
    args: list[str], corral: CLI, repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    corral.ok("create", "First task", "--ref", "first-task")
    monkeypatch.chdir(repo)
    quick, slow = _both(args, capsys, monkeypatch)
    assert quick == slow
    assert quick[0] != 0
    if "--json" in args:
        assert [json.loads(line)["event"] for line in quick[1].splitlines()][-1] == "error"  # JSON Lines


def test_a_plain_accept_merges_without_click(corral: CLI, tmp_path: Path, repo: Path) -> None:
    env = fake_env(tmp_path, WORK)
    corral.ok("create", "Add the feature", "--ref", "feat", env=env)
    corral.ok("start", "feat", "--wait", env=env)
    probe = (
        "import sys, json; from corral.cli import main; code = main(['accept', 'feat', '--json']); "
        "print(json.dumps([code, 'click' in sys.modules, 'corral.cli.commands.review' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo, env={**os.environ, **env}, capture_output=True, text=True
    )
    lines = out.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == [0, False, False], out.stderr
    events = [json.loads(line) for line in lines[:-1]]
    assert [e["id"] for e in events if e["event"] == "phase" and e["state"] == "done"] == [
        "preflight", "merge", "verify", "destination", "cleanup"
    ]  # fmt: skip
    assert events[-1]["event"] == "result" and events[-1]["task"] == {"ref": "feat", "status": "complete"}
    assert (repo / "feature.py").read_text() == "FEATURE = True\n"
    assert git(repo, "log", "-1", "--format=%s") == "Add the feature"
