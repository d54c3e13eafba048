"""The click-free way into ``list`` and ``show`` (corral.cli.reads) is the click command, only faster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from corral.cli import main, reads
from corral.cli.app import App
from tests.conftest import CLI


def _options(name: str) -> dict[str, click.Option]:
    from corral.cli.root import cli

    ctx = click.Context(cli)
    command = cli.get_command(ctx, name)
    assert command is not None
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def test_list_filters_are_the_click_commands_own() -> None:
    options = _options("list")
    flags = {opt: p.flag_value for opt, p in options.items() if p.name == "which"}
    assert flags == reads.LIST_FILTERS


def test_show_switches_are_the_click_commands_own() -> None:
    options = _options("show")
    switches = {opt: p.name for opt, p in options.items() if p.is_flag and opt not in ("--json",)}
    assert switches == reads.SHOW_SWITCHES


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--help"],
        ["list", "-h"],
        ["list", "--active", "--blocked"],
        ["list", "--active", "--active"],
        ["list", "--bogus"],
        ["list", "extra"],
        ["show"],
        ["show", "a", "b"],
        ["show", "a", "--bogus"],
        ["show", "--", "a"],
        ["list", "--repo"],
        ["create", "x"],
        ["--version"],
        [],
    ],
)
def test_anything_but_the_plain_forms_goes_through_click(args: list[str]) -> None:
    assert reads.quick(App(), args) is None


def test_completion_goes_through_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_CORRAL_COMPLETE", "bash_complete")
    assert reads.quick(App(), ["list"]) is None


@pytest.mark.parametrize(
    ("args", "repo"),
    [
        (["--repo", "/r/one", "list"], "/r/one"),
        (["list", "--repo=/r/two"], "/r/two"),
        (["show", "x", "--repo", "/r/three", "--details"], "/r/three"),
    ],
)
def test_repo_given_either_way_is_taken(args: list[str], repo: str) -> None:
    app = App()
    assert reads.quick(app, args) is not None
    assert app.repo == repo


def _both(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(exit code, stdout, stderr) of ``args`` the quick way and through click."""
    got = []
    for quick in (True, False):
        if not quick:
            monkeypatch.setattr(reads, "quick", lambda app, args: None)
        code = main(args)
        out, err = capsys.readouterr()
        got.append((code, out, err))
    return got


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "--all"],
        ["list", "--blocked", "--json"],
        ["--json", "list", "--active"],
        ["show", "first-task"],
        ["show", "first", "--details"],
        ["show", "first-task", "--all", "--json"],
        ["show", "no-such-task"],
        ["show", "no-such-task", "--json"],
    ],
)
def test_the_quick_way_answers_as_click_does(
    args: list[str],
    corral: CLI,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corral.ok("create", "First task", "--ref", "first-task")
    corral.ok("create", "Second task")
    monkeypatch.chdir(repo)
    quick, slow = _both(args, capsys, monkeypatch)
    assert quick == slow
    if "--json" in args:
        json.loads(quick[1])  # one document, errors included


def test_the_plain_list_never_imports_click(corral: CLI, repo: Path) -> None:
    corral.ok("create", "First task")
    probe = "import sys; from corral.cli import main; code = main(['list', '--json']); print('click' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
    probe_help = probe.replace("'--json'", "'--help'")
    out = subprocess.run([sys.executable, "-c", probe_help], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_the_plain_list_loads_nothing_only_one_task_s_read_needs(corral: CLI, repo: Path) -> None:
    corral.ok("create", "First task")
    show_only = [
        "corral.engine.read.incident_views",  # incidents and their journal: show and failures
        "corral.engine.runtime.journal",
        "corral.engine.runtime.journal_scan",
        "corral.engine.read.diagnostics",  # evidence's diagnostics: show
        "corral.engine.read.diagnostic_retention",
        "corral.domain.incidents",
    ]
    probe = (
        "import sys; from corral.cli import main; code = main(['list', '--active']); "
        f"print([m for m in {show_only!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    probe_show = probe.replace("'list', '--active'", "'show', 'first-task'")
    out = subprocess.run([sys.executable, "-c", probe_show], cwd=repo, capture_output=True, text=True, check=True)
    assert "corral.engine.read.incident_views" in out.stdout.strip().splitlines()[-1]


def test_the_plain_list_loads_no_dispatch_engine_nor_database_driver(corral: CLI, repo: Path) -> None:
    # The workers' queue and PostgreSQL's driver load where a turn is queued or the store is shared, a
    # host's name and token where a host is named: on SQLite, a list never pays for them (asyncio alone
    # is ~25 ms of start-up; secrets, with hashlib and random, ~3.5 ms; socket ~1 ms).
    corral.ok("create", "First task")
    heavy = ["corral.adapters.jobs", "asyncio", "procrastinate", "psycopg", "secrets", "hashlib", "random", "socket"]
    probe = (
        "import sys; from corral.cli import main; code = main(['list', '--active']); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
