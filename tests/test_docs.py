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
