"""The docs a newcomer reads say what the code does: the lifecycle's tables are the code's tables,
and nothing in the repository points at documents outside it."""

from __future__ import annotations

import re
from pathlib import Path

from corral.domain import status as st
from corral.domain.operations_table import OPERATIONS

ROOT = Path(__file__).resolve().parents[1]
LIFECYCLE = ROOT / "docs" / "lifecycle.md"


def _rows(section: str) -> list[list[str]]:
    """The table rows under a ``## section`` heading of docs/lifecycle.md, cells stripped."""
    text = LIFECYCLE.read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # past the header


def _statuses(cell: str) -> list[str]:
    return re.findall(r"`([a-z-]+)`", cell)


def test_the_transition_table_in_the_docs_is_the_codes() -> None:
    documented = {(r[0].strip("`"), r[1].strip("`"), r[2]) for r in _rows("Transition table")}
    code = {(a.value, b.value, by) for (a, b), by in st._EDGES.items()}
    assert documented == code


def test_the_operations_table_in_the_docs_is_the_codes() -> None:
    documented = {r[0].strip("`"): set(_statuses(r[1])) for r in _rows("Operations table")}
    code = {op.value: {s.value for s in statuses} for op, statuses in OPERATIONS.items()}
    assert documented == code


def test_nothing_cites_documents_outside_the_repository() -> None:
    pattern = re.compile(r"DESIGN\.md|\bseeds?\b(?! ?=|\.sql)|shared/", re.I)
    found = []
    for path in [*ROOT.joinpath("src").rglob("*.py"), *ROOT.glob("*.md"), *ROOT.joinpath("docs").glob("*.md")]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


README = ROOT / "README.md"
#: Commands that read and change nothing: the README may suggest them from any status.
READS = {"show", "diff", "logs", "wait", "list", "failures", "watch"}


def _readme_rows(heading: str) -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line)
    ]
    return rows[1:]


def test_the_readmes_status_table_is_every_status_with_its_meaning() -> None:
    rows = {r[0].strip("`"): r for r in _readme_rows("Statuses")}
    assert set(rows) == {s.value for s in st.Status}
    for status in st.Status:
        assert rows[status.value][1] == st.MEANING[status], status


def test_what_the_readme_says_to_do_next_is_what_each_status_allows() -> None:
    from corral.domain.operations_table import Op, allowed_operations

    for row in _readme_rows("Statuses"):
        status = st.Status(row[0].strip("`"))
        allowed = {op.value for op in allowed_operations(status)}
        for command in re.findall(r"`corral (\w+)", row[2]):
            assert command in allowed | READS, f"{status}: the README suggests `corral {command}`"
        if status in st.PAUSED:  # waiting for you: the row names a way on
            assert {Op.UNBLOCK.value} & set(re.findall(r"`corral (\w+)", row[2]))


def test_the_readmes_two_commands_come_first_and_ci_reads_the_test_one() -> None:
    import subprocess

    text = README.read_text(encoding="utf-8")
    before = text.split("<!-- main-command -->", 1)[0]
    assert "```" not in before and "\n## " not in before  # nothing before the first command but the title
    between = text.split("<!-- main-command -->", 1)[1].split("<!-- test-command -->", 1)[0]
    assert "contributors" in between and "\n## " not in between
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    awk = re.search(r"test_command=\$\(awk '([^']+)' README\.md\)", run)
    assert awk is not None
    read = subprocess.run(["awk", awk.group(1), str(README)], capture_output=True, text=True, check=True).stdout
    assert read.strip().startswith("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test,team]'")
    assert ".venv/bin/pip install -q -e '.[test,team]'" in run  # CI installs the team's engine too


def test_the_team_extra_is_apart_from_a_single_users_install() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {re.split(r"[\[<>=,; ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    team = {re.split(r"[\[<>=,; ]", d, maxsplit=1)[0] for d in project["optional-dependencies"]["team"]}
    assert team == {"psycopg", "psycopg-pool", "procrastinate"}
    assert not names & team
    for page in (README, ROOT / "docs" / "workers.md"):
        assert "'.[team]'" in page.read_text(encoding="utf-8"), page


def test_what_the_docs_say_takes_json_is_what_the_commands_take() -> None:
    import click

    from corral.cli.root import COMMANDS, cli

    ctx = click.Context(cli)
    without = set()
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        leaves = list(command.commands.values()) if isinstance(command, click.Group) else [command]
        if not all(any("--json" in p.opts for p in leaf.params) for leaf in leaves):
            without.add(name)
    assert without == {"mcp"}
    readme = README.read_text(encoding="utf-8")
    assert "every\n  command but `mcp`" in readme or "every command but `mcp`" in readme
    assert "Every command takes it but\n`corral mcp`" in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_the_readme_says_what_ask_and_the_daemon_really_do() -> None:
    from corral.domain.operations_table import OP_TARGET, Op

    readme = README.read_text(encoding="utf-8")
    assert "status unchanged" not in readme
    assert OP_TARGET[Op.ASK] is st.Status.WORKING
    ask = readme.split("`corral ask` is read-only", 1)[1].split("\n\n", 1)[0]
    assert "`working`" in ask
    daemon = readme.split("## The daemon", 1)[1].split("\n## ", 1)[0]
    for starts_it in ("`corral start`", "`unblock`", "`resume`", "`corral dashboard`", "starts it"):
        assert starts_it in daemon


def test_every_local_link_and_benchmark_the_docs_name_is_there() -> None:
    for page in (README, ROOT / "docs" / "development.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), f"{page.name} links to {target}"
        for script in re.findall(r"bench/(\w+\.py)", text):
            assert (ROOT / "bench" / script).exists(), f"{page.name} names bench/{script}"
    assert "## Benchmarks" not in README.read_text(encoding="utf-8")  # they live in docs/development.md
    assert "## Layout" not in README.read_text(encoding="utf-8")
