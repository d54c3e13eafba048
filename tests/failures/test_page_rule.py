"""The page rule of seed 000: a page never exceeds its budget, incident rows go before the notes, and the
correctness note is kept whole whenever it fits — over every budget from 0 to 4 KB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.cli.failure_pages import lines
from corral.domain.incidents import CORRECTNESS_NOTE, cursor_index, fit_page, text_bytes
from corral.engine.read import incident_views
from tests.conftest import CLI

pytestmark = pytest.mark.timeout(120)

NOTE_BYTES = len(CORRECTNESS_NOTE.encode()) + 1


def _pi_log(path: Path, commands: list[str]) -> Path:
    """A Pi log in which every command fails once (tool errors: many incidents, history)."""
    out = []
    for n, command in enumerate(commands):
        out.append(
            {"type": "tool_execution_start", "toolCallId": f"t{n}", "toolName": "bash", "args": {"command": command}}
        )
        result = {"content": [{"type": "text", "text": f"{command}: FAILED — {'é' * (n % 7)} détail {n}"}]}
        out.append(
            {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result, "isError": True}
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in out))
    return path


@pytest.fixture
def many(tmp_path: Path) -> Path:
    commands = [f"make step{n} {'--flag ' * (n % 5)}" for n in range(40)]
    commands += ["make thrice"] * 3  # one that needs action
    return _pi_log(tmp_path / "output.log", commands)


def _every(log: Path, history: bool) -> dict[str, Any]:
    state = incident_views.scan_log(log, "pi")
    return {**incident_views.summary(state), "rows": incident_views.rows(state, history=history)}


@pytest.mark.parametrize("history", [True, False])
def test_no_page_from_0_to_4kb_exceeds_its_budget_and_the_note_stays_whole_when_it_fits(
    many: Path, history: bool
) -> None:
    every = _every(many, history)
    assert len(every["rows"]) >= (41 if history else 1)
    again = f"corral failures --log {many} --harness pi" + (" --history" if history else "")
    for first in (0, 3):
        for budget in range(0, 4097):
            for render in (incident_views.page_lines, lambda d, a=f"{again} --max-bytes {budget}": lines(d, a)):
                page = fit_page(every, first, budget, render)
                used = text_bytes(render(page))
                assert used <= budget, (budget, first, used)
                if budget >= NOTE_BYTES:
                    assert page["note"] == CORRECTNESS_NOTE, (budget, first)  # whole, never cut
                else:
                    assert page["note"] == ""
                if page["rows"]:  # a row is shown only with the note beside it
                    assert page["note"] == CORRECTNESS_NOTE and page["line"] == every["line"]
                shown = len(page["rows"])
                if page["next_cursor"] is not None:  # the next page begins where this one ended
                    assert cursor_index(page["next_cursor"], len(every["rows"])) == first + shown


def test_the_command_line_page_never_exceeds_its_budget(corral: CLI, many: Path) -> None:
    args = ["failures", "--log", str(many), "--harness", "pi", "--history"]
    for budget in [0, 1, 30, 56, 57, 60, 100, 150, 189, 250, 400, 700, 1500, 4096]:
        out = corral.ok(*args, "--max-bytes", str(budget)).stdout
        assert len(out.encode()) <= budget, (budget, out)
        if budget >= NOTE_BYTES:
            assert CORRECTNESS_NOTE in out.splitlines(), (budget, out)


def test_a_60_byte_page_keeps_the_note_and_no_row(corral: CLI, many: Path) -> None:
    out = corral.ok("failures", "--log", str(many), "--harness", "pi", "--max-bytes", "60").stdout
    assert out == CORRECTNESS_NOTE + "\n"
    page = corral.json("failures", "--log", str(many), "--harness", "pi", "--max-bytes", "60")["failures"]
    assert page["rows"] == [] and page["note"] == CORRECTNESS_NOTE


def test_a_small_page_gives_the_short_account_of_unclassified_failures(corral: CLI, many: Path) -> None:
    """Seed 000's small page: ``8 earlier tool failures remain unclassified.`` above the note."""
    budget = NOTE_BYTES + len(b"40 earlier tool failures remain unclassified.\n")
    out = corral.ok("failures", "--log", str(many), "--harness", "pi", "--max-bytes", str(budget)).stdout
    assert out.splitlines() == ["40 earlier tool failures remain unclassified.", CORRECTNESS_NOTE]


def test_paging_on_shows_every_row_once(corral: CLI, many: Path) -> None:
    args = ["failures", "--log", str(many), "--harness", "pi", "--history"]
    whole = [r["id"] for r in corral.json(*args)["failures"]["rows"]]
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        page = corral.json(*args, "--max-bytes", "700", *(["--cursor", cursor] if cursor else []))["failures"]
        assert page["rows"], page  # 700 bytes hold a row and the notes: every page moves on
        seen += [r["id"] for r in page["rows"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == whole
