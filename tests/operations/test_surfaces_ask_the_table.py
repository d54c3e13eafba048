"""Every surface offers what the operations table allows, and nothing else (docs/lifecycle.md).

For every status, a real task is put in it and each surface's actions are rendered as a person
or a builder meets them: the dashboard's buttons (its task page's HTML), ``watch``'s keys (its
key line, on the board and on a task's page, and what a key does on the live board), the
"Next:" hint every surface prints (the ``show`` document's ``next``), ``show``'s offer to confirm
a held task's retry, and the MCP tools' descriptions. Each is compared with
:data:`corral.domain.operations_table.OPERATIONS`: a button, key or hint for an operation the engine
refuses fails here, and so does one the table allows that the surface hides. A surface that
spells out a set of statuses of its own fails too: it would decide instead of asking.
"""

from __future__ import annotations

import ast
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from corral.cli import board_keys as view
from corral.cli.app import App
from corral.cli.render import show_lines
from corral.dashboard import task_actions, task_page
from corral.dashboard.html import Markup
from corral.domain import explain
from corral.domain.actors import Actor
from corral.domain.operations_table import Op, allowed_from, allowed_operations, may
from corral.domain.records import RestingCause
from corral.domain.status import Status
from corral.engine.operations import queries, tasks
from corral.engine.project import Project
from corral.engine.read.incident_views import Hold
from corral.mcp.tools import TOOLS
from tests.cli.test_watch import Pane, agented, row_line
from tests.conftest import CLI
from tests.operations.test_operations_table import force_status
from tests.support.polling import until

__all__ = ["agented"]  # a fixture of the watch tests, taken by the live board's test below

H = Actor.HUMAN
STATUSES = list(Status)
IDS = [s.value for s in STATUSES]
OP_NAMES = {o.value for o in Op}


def shown_in(proj: Project, status: Status) -> dict[str, Any]:
    """``show``'s document of a real task put in ``status`` (read unsettled, as the dashboard reads it)."""
    task = tasks.create(proj, f"Offered while {status.value}", actor=H)
    force_status(proj, task.ref, status)
    doc: dict[str, Any] = queries.show_task(proj, task.ref, settle=False).doc
    assert doc["task"]["status"] == status.value
    return doc


def test_the_helper_reads_the_table() -> None:
    for status in Status:
        assert set(allowed_operations(status)) == {op for op in Op if status in allowed_from(op)}


# -- the dashboard ------------------------------------------------------------------------------------


def buttons(html: str) -> list[str]:
    """The actions a rendered piece of the task page offers: its buttons' values."""
    return re.findall(r'<button\b[^>]*\bname="action"[^>]*\bvalue="([a-z-]+)"', html)


def test_every_dashboard_action_is_an_operation_of_the_table() -> None:
    assert task_actions.ACTIONS and {Op(a) for a in task_actions.ACTIONS} <= set(Op)


@pytest.mark.parametrize("status", STATUSES, ids=IDS)
def test_the_dashboard_shows_the_buttons_the_table_allows(status: Status, proj: Project) -> None:
    doc = shown_in(proj, status)
    parts = task_page.task_parts(doc, proj.paths.root.name)
    offered = buttons(parts["actions"])
    assert len(offered) == len(set(offered)), offered
    # Of every action the dashboard can post, a button for exactly those the table allows here.
    expected = {a for a in task_actions.ACTIONS if may(Op(a), status)}
    assert set(offered) == expected, (status, offered)
    # And the whole page says the same (the buttons are nowhere else).
    page = task_page.task_page(
        views_keys(),
        proj.paths.root.name,
        doc["task"]["id"],
        "t",
        {**parts, "narration": Markup(""), "diff": Markup("")},
    )
    assert set(buttons(page)) == expected


def views_keys() -> Any:
    class Keys:
        csrf = "c"
        prefix = "/k"

    return Keys()


# -- watch --------------------------------------------------------------------------------------------


def offered_keys(line: str) -> set[Op]:
    """The operations a key line of ``watch`` offers: ``u unblock`` offers unblock."""
    return {op for key, op in view.ACTION_KEYS.items() if re.search(rf"(^|· ){re.escape(key)} {op.value}\b", line)}


def test_every_watch_key_that_acts_is_an_operation_of_the_table() -> None:
    assert view.ACTION_KEYS and all(isinstance(op, Op) for op in view.ACTION_KEYS.values())


@pytest.mark.parametrize("status", STATUSES, ids=IDS)
def test_watch_offers_the_keys_the_table_allows(status: Status) -> None:
    expected = {op for op in view.ACTION_KEYS.values() if may(op, status)}
    assert offered_keys(view.keys_line(status)) == expected
    assert offered_keys(view.keys_line(status, detail=True)) == expected
    assert offered_keys(view.keys_line(None)) == set()  # nothing selected: no key acts


@pytest.mark.slow
def test_the_live_board_offers_the_selected_tasks_keys_and_refuses_the_others(
    corral: CLI, agented: Path, repo: Path
) -> None:
    agented.touch()  # the turn ends at once: the task is blocked
    corral.ok("create", "Read the parser", "--ref", "rp")
    corral.ok("start", "rp", "--wait", "--timeout", "60")
    corral.ok("create", "Later work", "--ref", "later")
    assert corral.json("show", "rp")["task"]["status"] == "blocked"
    p = Pane(f"{shlex.quote(sys.executable)} -m corral watch; echo EXITED $?; sleep 600", repo)
    try:
        screen = p.shows("rp ", "later ")
        assert row_line(screen, "rp").startswith("›"), screen
        blocked = {op for op in view.ACTION_KEYS.values() if may(op, Status.BLOCKED)}
        assert offered_keys(screen.rstrip().splitlines()[-1]) == blocked, screen
        p.keys("j")
        until(lambda: row_line(p.screen(), "later").startswith("›"), timeout=5, what="later selected")
        backlog = {op for op in view.ACTION_KEYS.values() if may(op, Status.BACKLOG)}
        screen = p.when(lambda s: offered_keys(s.rstrip().splitlines()[-1]) == backlog, what="backlog's keys")
        p.keys("u")  # not offered, and refused as the table says, naming what unblock takes
        p.shows("it is backlog", "blocked, conflict, interrupted or submitted")
        p.keys("q")
        p.shows("EXITED 0")
    finally:
        p.close()


# -- the "Next:" hint ---------------------------------------------------------------------------------

_OP_WORD = re.compile(r"\b(" + "|".join(sorted((re.escape(o.value) for o in Op), key=len, reverse=True)) + r")\b")


def named_ops(hint: str, ref: str) -> set[Op]:
    """The operations a hint names, as commands or in words (the task's ref aside: it may hold such a word)."""
    return {Op(w) for w in _OP_WORD.findall(hint.lower().replace(ref, " "))}


def worded_codes() -> list[str]:
    """Every resting cause's code that has wording of its own (the cases of ``explain``'s matches)."""
    tree = ast.parse(Path(explain.__file__).read_text(encoding="utf-8"))
    return sorted(
        {
            case.pattern.value.value
            for case in ast.walk(tree)
            if isinstance(case, ast.match_case)
            and isinstance(case.pattern, ast.MatchValue)
            and isinstance(case.pattern.value, ast.Constant)
            and isinstance(case.pattern.value.value, str)
        }
    )


@pytest.mark.parametrize("status", STATUSES, ids=IDS)
def test_the_next_hint_names_only_operations_the_table_allows(status: Status, proj: Project) -> None:
    """``show``'s ``next``, which the CLI, ``watch``'s task page, the dashboard and MCP's ``show`` print; then
    every worded cause, with protected files pending or not, the breaker tripped or not, on a task whose ref
    is itself an operation's name."""
    doc = shown_in(proj, status)
    if status is Status.COMPLETE:
        assert doc["next"] is None
    else:
        assert all(may(op, status) for op in named_ops(doc["next"], doc["task"]["ref"])), (status, doc["next"])
    codes = worded_codes()
    assert "harness-exited" in codes and "turn-lost" in codes  # the cases were found
    task = tasks.create(proj, "A task named as an operation", ref="start-page", actor=H)
    for code in [None, *codes]:
        cause = RestingCause(code, at=task.created_at, actor=Actor.SYSTEM) if code else None
        shaped = replace(task, status=status, resting_cause=cause)
        for pending in (0, 2):
            for breaker in (False, True):
                hint = explain.next_step(shaped, pending_violations=pending, breaker=breaker)
                if status is Status.COMPLETE:
                    assert hint is None
                    continue
                assert hint, (status, code)
                refused = {op for op in named_ops(hint, task.ref) if not may(op, status)}
                assert not refused, (status, code, pending, breaker, hint)


@pytest.mark.parametrize("status", STATUSES, ids=IDS)
def test_the_show_page_offers_a_held_tasks_retry_only_where_unblock_runs(status: Status, proj: Project) -> None:
    """``corral show`` (and ``watch``'s task page) of a task a permission blocker holds: the hold is said in
    every status, and the command that confirms its retry (an unblock) only where the table lets unblock run."""
    doc = shown_in(proj, status)
    doc["permission_hold"] = Hold("i-1", "network", "a push to the remote").as_view()
    page = "\n".join(show_lines(App(), doc))
    assert "Held:" in page and "a push to the remote" in page
    assert ("--retry-blocked" in page) is may(Op.UNBLOCK, status), page


# -- MCP ----------------------------------------------------------------------------------------------

_TAKES = re.compile(r"Takes a task that is ([a-z, ]+?)\.$")


def takes_in(description: str) -> set[Status]:
    """The statuses a tool's description says it takes (its last sentence, from the table)."""
    found = _TAKES.search(description)
    assert found, description
    return {Status(w) for w in re.split(r", | or ", found.group(1))}


def test_every_lifecycle_tool_says_the_statuses_it_takes() -> None:
    lifecycle = [name for name in TOOLS if name in OP_NAMES]
    assert lifecycle
    for name in lifecycle:
        assert takes_in(TOOLS[name].description) == set(allowed_from(Op(name))), name


@pytest.mark.parametrize("status", STATUSES, ids=IDS)
def test_the_mcp_tools_offered_for_a_status_are_the_tables(status: Status) -> None:
    offered = {Op(n) for n, t in TOOLS.items() if n in OP_NAMES and status in takes_in(t.description)}
    assert offered == {Op(n) for n in TOOLS if n in OP_NAMES and may(Op(n), status)}


# -- no surface decides on its own --------------------------------------------------------------------

SRC = Path(__file__).resolve().parents[2] / "src" / "corral"
SURFACES = [SRC / "cli", SRC / "dashboard", SRC / "mcp"]
NAMES = {s.value for s in Status}
#: Surfaces whose set of statuses decides no action: shell completion lists finished tasks' refs last.
DECIDES_NO_ACTION = {"cli/commands/completion.py"}


def _status_member(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "Status":
        return True
    return isinstance(node, ast.Constant) and node.value in NAMES


def test_no_surface_keeps_a_set_of_statuses_of_its_own() -> None:
    """A tuple, set or list of two or more statuses in a surface is a rule with a second home."""
    found = []
    for root in SURFACES:
        for path in root.rglob("*.py"):
            if path.relative_to(SRC).as_posix() in DECIDES_NO_ACTION:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Tuple | ast.Set | ast.List) and sum(map(_status_member, node.elts)) >= 2:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, "status sets outside the domain: " + ", ".join(found)
