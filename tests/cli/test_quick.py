"""The ways in that skip click — ``--version`` and the group's help (corral.cli.early), the plain ``list``,
``show`` and ``failures --log`` (corral.cli.reads) — answer exactly as click does, only sooner."""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from corral.cli import early, failure_pages, help_texts, main, reads
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
        ["--active", "list"],
        ["--details", "show", "a"],
        ["--bogus", "list"],
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


def both_ways(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """(exit code, stdout, stderr) of ``args`` the quick way and through click (no quick path at all)."""
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
    quick, slow = both_ways(args, capsys, monkeypatch)
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


def test_show_reads_incidents_without_the_scan_or_openssl(corral: CLI, repo: Path) -> None:
    # A task's incidents are its journal, read: the log scanner and hashlib (OpenSSL, ~2 ms) are a scan's.
    corral.ok("create", "First task", "--ref", "first-task")
    scan_only = ["corral.engine.runtime.journal_scan", "corral.domain.collector", "hashlib", "_hashlib"]
    probe = (
        "import sys; from corral.cli import main; code = main(['show', 'first-task']); "
        f"print('corral.engine.read.incident_views' in sys.modules, [m for m in {scan_only!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True []"


def test_the_plain_list_loads_no_dispatch_engine_nor_database_driver(corral: CLI, repo: Path) -> None:
    # The workers' queue and PostgreSQL's driver load where a turn is queued or the store is shared, a
    # host's name and token where a host is named: on SQLite, a list never pays for them (asyncio alone
    # is ~25 ms of start-up; secrets, with hashlib and random, ~3.5 ms; socket ~1 ms).
    corral.ok("create", "First task")
    heavy = ["corral.adapters.jobs", "asyncio", "procrastinate", "psycopg", "secrets", "hashlib", "random", "socket"]
    heavy += ["corral.engine.operations.forge_sync", "corral.adapters.gh_forge"]  # a project with no forge
    probe = (
        "import sys; from corral.cli import main; code = main(['list', '--active']); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


# -- failures --log PATH --harness H ----------------------------------------------------------------------


def test_failures_switches_and_values_are_the_click_commands_own() -> None:
    options = _options("failures")
    assert {opt: options[opt].name for opt in reads.FAILURES_SWITCHES} == reads.FAILURES_SWITCHES
    assert all(options[opt].is_flag for opt in reads.FAILURES_SWITCHES)
    assert {opt: options[opt].name for opt in reads.FAILURES_VALUES} == reads.FAILURES_VALUES
    assert not any(options[opt].is_flag or options[opt].multiple for opt in reads.FAILURES_VALUES)
    harness = options["--harness"].type
    assert isinstance(harness, click.Choice) and harness.case_sensitive
    assert tuple(harness.choices) == failure_pages.HARNESSES


@pytest.mark.parametrize(
    "args",
    [
        ["failures", "--log", "x.log"],
        ["failures", "--harness", "pi"],
        ["failures", "t", "--log", "x.log", "--harness", "pi"],
        ["failures", "--log", "x.log", "--harness", "PI"],
        ["failures", "--log", "x.log", "--harness", "gemini"],
        ["failures", "--log", "x.log", "--harness", "pi", "--max-bytes", "10"],
        ["failures", "--log", "x.log", "--harness", "pi", "--cursor", "i1"],
        ["failures", "--log", "x.log", "--harness", "pi", "--session", "s"],
        ["failures", "--log", "x.log", "--harness", "pi", "--dismiss", "a", "-m", "why"],
        ["failures", "--log", "x.log", "--harness", "pi", "--history", "--history"],
        ["failures", "--log", "x.log", "--harness", "pi", "--help"],
        ["failures", "--log", "--harness", "pi"],
        ["failures", "--log=", "--harness", "pi"],
        ["failures", "--log", "-x.log", "--harness", "pi"],
        ["failures", "--log", "a.log", "--log", "b.log", "--harness", "pi"],
        ["failures", "--log", "x.log", "--harness"],
        ["failures", "--log", "x.log", "--harness", "pi", "--bogus"],
        ["list", "--log", "x.log"],
        ["--log", "x.log", "--harness", "pi", "failures"],
        ["--history", "failures", "--log", "x.log", "--harness", "pi"],
        ["show", "t", "--harness", "pi"],
    ],
)
def test_every_other_failures_form_goes_through_click(args: list[str]) -> None:
    assert reads.quick(App(), args) is None


def _pi_log(path: Path) -> Path:
    """A Pi log with a command that failed and was retried, and one that failed three times (needs action)."""
    events = []
    for n, (command, failed) in enumerate(
        [("make test", True), ("make test", False), ("make lint", True), ("make lint", True), ("make lint", True)]
    ):
        events.append({"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "bash",
                       "args": {"command": command}})  # fmt: skip
        result = {"content": [{"type": "text", "text": f"{command}: {'FAILED' if failed else 'ok'} \x1b[31m{n}"}]}
        events.append({"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result,
                       "isError": failed})  # fmt: skip
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["failures", "--log", "{log}", "--harness", "pi"],
        ["failures", "--harness=pi", "--log={log}", "--json"],
        ["--json", "failures", "--log", "{log}", "--harness", "pi", "--history"],
        ["failures", "--raw", "--log", "{log}", "--harness", "pi", "--history"],
        ["failures", "--log", "{log}", "--harness", "pi", "--raw", "--json", "--repo", "{repo}"],
        ["failures", "--log", "{log}", "--harness", "codex"],
        ["failures", "--log", "{missing}", "--harness", "pi"],
        ["failures", "--log", "{missing}", "--harness", "pi", "--json"],
    ],
)
def test_failures_of_a_log_the_quick_way_answers_as_click_does(
    args: list[str],
    tmp_path: Path,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _pi_log(tmp_path / "output.log")
    given = [a.format(log=log, repo=repo, missing=tmp_path / "nothing.log") for a in args]
    assert reads.quick(App(), given) is not None
    monkeypatch.chdir(tmp_path)  # no project here: none is needed
    quick, slow = both_ways(given, capsys, monkeypatch)
    assert quick == slow
    if "--json" in args:
        json.loads(quick[1])  # one document, errors included
    if "{missing}" not in args and "codex" not in args:  # the incidents found, not an empty answer twice
        assert quick[0] == 0 and "make lint" in quick[1]


def test_failures_of_a_log_the_quick_way_never_imports_click(tmp_path: Path) -> None:
    # nor a project, its store or the daemon's watch: a log outside any task resumes nothing
    heavy = ("click", "corral.cli.commands", "corral.engine.project", "corral.store", "corral.engine.daemons")
    log = _pi_log(tmp_path / "output.log")
    probe = (
        "import sys; from corral.cli import main; "
        f"code = main(['failures', '--log', {str(log)!r}, '--harness', 'pi', '--json']); "
        f"print(code, [m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []"


# -- --version and the group's help, before click (corral.cli.early) ---------------------------------------

#: Set to rewrite corral/cli/help_texts.py after a change to the group's help or to a command's summary.
WRITE_HELP = "CORRAL_WRITE_HELP"
WRITING_HELP = bool(os.environ.get(WRITE_HELP))  # read at import: each test's environment drops CORRAL_*
#: The terminal widths whose help is kept: 80 columns (also a pipe's), and 100 or more.
KEPT_COLUMNS = (80, 120)
HELP_TEXTS = Path(early.__file__).with_name("help_texts.py")


def _clicks(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """(exit code, stdout, stderr) of ``args`` answered by click, with the early answers off."""
    with monkeypatch.context() as m:
        m.setattr(early, "answer", lambda args, stdout: None)
        code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _help_module(texts: dict[int, str], summaries: dict[str, str]) -> str:
    """The source of corral/cli/help_texts.py for ``texts`` (width -> text) and the commands' ``summaries``,
    in ruff's format."""
    parts = [
        '"""``corral --help`` as click writes it, at the widths a terminal mostly gives it, and each command\'s\n'
        "summary in it: generated, do not edit.\n"
        "\n"
        "corral.cli.early prints the help without loading click; at another width click writes it, from the\n"
        "summaries, without loading the commands. tests/cli/test_quick.py holds both equal to what click makes\n"
        f"from the command group and its commands, and rewrites this file when run with {WRITE_HELP}=1.\n"
        '"""\n'
        "\n"
        "# ruff: noqa: E501  (a summary is one line, as click shows it)\n"
        "\n"
        "from __future__ import annotations\n"
    ]
    for width, text in sorted(texts.items()):
        lines = "".join(f"    {_literal(line)},\n" for line in text.split("\n"))
        parts.append(f"\n_WIDTH_{width} = (\n{lines})\n")
    table = "".join(f'    {width}: "\\n".join(_WIDTH_{width}),\n' for width in sorted(texts))
    parts.append(f"\n#: The help formatter's width -> the text click writes at it.\nROOT_HELP = {{\n{table}}}\n")
    rows = "".join(f"    {_literal(name)}: {_literal(summary)},\n" for name, summary in summaries.items())
    parts.append(f"\n#: Each command the help shows -> its summary there, in its order.\nSUMMARIES = {{\n{rows}}}\n")
    return "".join(parts)


def _literal(line: str) -> str:
    """A Python literal of ``line`` as ruff writes it: double quotes, unless the line holds only double quotes."""
    text = json.dumps(line, ensure_ascii=False)
    if '"' in line and "'" not in line:
        text = "'" + text[1:-1].replace('\\"', '"') + "'"
    return text


def _summaries() -> dict[str, str]:
    """Each command the help shows, loaded, and the summary click gives it there."""
    from corral.cli.root import COMMANDS, cli

    ctx = click.Context(cli)
    loaded = {name: cli.get_command(ctx, name) for name in COMMANDS}
    return {name: c.get_short_help_str(limit=1_000) for name, c in loaded.items() if c is not None and not c.hidden}


def test_the_kept_help_is_what_click_writes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(help_texts, "SUMMARIES", {})  # click's help from the commands themselves, each loaded
    texts = {}
    for columns in KEPT_COLUMNS:
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, _err = _clicks(["--help"], capsys, monkeypatch)
        assert code == 0 and out.endswith("\n")
        texts[early.help_width()] = out.removesuffix("\n")
    assert set(texts) == {78, 98}
    summaries = _summaries()
    source = _help_module(texts, summaries)
    if WRITING_HELP:
        HELP_TEXTS.write_text(source, encoding="utf-8")
    assert HELP_TEXTS.read_text(encoding="utf-8") == source, (
        f"the group's help or a command's summary changed: rewrite corral/cli/help_texts.py with {WRITE_HELP}=1 "
        "and this test"
    )
    monkeypatch.undo()
    kept = importlib.reload(help_texts)
    assert (texts, summaries) == (kept.ROOT_HELP, kept.SUMMARIES)


@pytest.mark.parametrize("columns", ["90", "60"])
def test_help_at_another_width_is_the_one_the_commands_give(
    columns: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    kept = _clicks(["--help"], capsys, monkeypatch)
    monkeypatch.setattr(help_texts, "SUMMARIES", {})
    assert kept == _clicks(["--help"], capsys, monkeypatch)
    assert "  create  " in kept[1] or "  create " in kept[1]


@pytest.mark.parametrize("args", [["--help"], ["-h"], [], ["--version"]])
@pytest.mark.parametrize("columns", ["80", "120", "100", "101", "99", "90", "40", "0", "-3", "wide", None])
def test_the_early_answers_are_clicks(
    args: list[str],
    columns: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code = main(args)
    out, err = capsys.readouterr()
    assert (code, out, err) == _clicks(args, capsys, monkeypatch)


def test_the_help_width_is_the_groups() -> None:
    from corral.cli.root import cli

    assert cli.context_settings["max_content_width"] == early.MAX_CONTENT_WIDTH
    assert click.formatting.FORCED_WIDTH is None  # click takes the terminal's width, as early.help_width does


@pytest.mark.parametrize("columns", ["80", "120", "100", "1", "0", "-3", "wide", "", None])
def test_the_terminal_width_is_shutils(columns: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert early.terminal_columns() == shutil.get_terminal_size().columns


@pytest.mark.parametrize(
    "args",
    [
        ["--version", "--json"],
        ["--json", "--help"],
        ["--help", "list"],
        ["list", "--help"],
        ["--version", "--version"],
        ["--Help"],
        ["--json"],
        ["list"],
    ],
)
def test_only_the_exact_forms_are_answered_early(args: list[str]) -> None:
    assert early.answer(args, io.StringIO()) is None


def test_help_for_a_width_with_no_kept_text_is_clicks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "90")
    assert early.answer(["--help"], io.StringIO()) is None


def test_completion_is_never_answered_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_CORRAL_COMPLETE", "bash_source")
    monkeypatch.setenv("COLUMNS", "120")
    assert early.answer([], io.StringIO()) is None


@pytest.mark.parametrize("args", [["--version"], ["--help"], []])
def test_version_and_help_load_neither_click_nor_the_engine(args: list[str], tmp_path: Path) -> None:
    heavy = ("click", "corral.cli.app", "corral.cli.commands", "corral.engine", "corral.store", "corral.adapters")
    probe = (
        f"import sys; from corral.cli import main; code = main({args!r}); "
        f"print(code, sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    env = {**os.environ, "COLUMNS": "120"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []"


def test_help_at_another_width_loads_no_command(tmp_path: Path) -> None:
    probe = (
        "import sys; from corral.cli import main; code = main(['--help']); "
        "print(code, 'click' in sys.modules, sorted(m for m in sys.modules if m.startswith('corral.cli.commands.')))"
    )
    env = {**os.environ, "COLUMNS": "90"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "0 True []"


@pytest.mark.parametrize("args", [["--help"], ["-h"], [], ["--version"]])
@pytest.mark.parametrize("encoding", ["ascii", "utf-8", "latin-1"])
def test_the_early_answers_are_clicks_bytes_in_any_encoding(args: list[str], encoding: str, tmp_path: Path) -> None:
    """On an ASCII stdout click writes its --help as UTF-8, and ``corral`` alone its help escaped."""
    run = "from corral.cli import main; raise SystemExit(main({args!r}))"
    off = "import corral.cli.early as early; early.answer = lambda args, stdout: None; " + run
    env = {**os.environ, "COLUMNS": "120", "PYTHONIOENCODING": encoding}
    got = [
        subprocess.run([sys.executable, "-c", probe.format(args=args)], cwd=tmp_path, env=env, capture_output=True)
        for probe in (run, off)
    ]
    early_way, clicks_way = ((g.returncode, g.stdout, g.stderr) for g in got)
    assert early_way == clicks_way
    assert early_way[0] == 0 and early_way[1]
