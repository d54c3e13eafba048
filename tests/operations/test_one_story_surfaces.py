"""One story on every surface (issue 29, item 2): a crash loop, a watchdog kill and a lost turn read the
same on ``show --json``, ``list --json``, the ``failures`` journal, ``watch``'s lines, the dashboard's task
page and the MCP ``show`` tool — the same incidents needing action (their identities and counts) and the
same words for why the task stopped.

Real turns of the ``command`` harness (real processes, the real supervisor) with the short delays a test
may set; each surface is read as it reads itself: the CLI in-process, ``watch``'s board and its line
renderers, the dashboard's page renderer over the document its hub builds, the MCP handler.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any

from corral.cli import board_rows, watch_view
from corral.dashboard import board_page, task_page
from corral.domain.actors import Actor
from corral.domain.incidents import Label, row_text
from corral.domain.status import Status
from corral.engine.operations import board as boards
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.gates import Caller
from corral.mcp import handlers
from corral.mcp.calling import Args, Calling
from tests.conftest import CLI
from tests.turns.conftest import reopen
from tests.turns.test_one_story import lose_turn

HANG = f"{sys.executable} -c 'import time; time.sleep(600)'"


def command_project(proj, monkeypatch, command: str, **settings: str):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", command)
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    for name, value in settings.items():
        monkeypatch.setenv(f"CORRAL_{name.upper()}", value)
    return reopen(proj)


def needing_action(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {r["id"]: r["failures"] for r in rows if r["label"] == Label.ACTION_REQUIRED}


def surfaces(proj, corral: CLI, ref: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What each surface says of the task: its incidents needing action, their count, why it stopped."""
    shown = corral.json("show", ref)
    (listed,) = [r for r in corral.json("list", "--all")["tasks"] if r["ref"] == ref]
    journal = corral.json("failures", ref)["failures"]
    mcp = handlers.show(Calling(project=lambda: proj, caller=Caller(Actor.BUILDER)), Args("show", {"task": ref}))
    board = boards.board([(proj.repo.name, proj)], only=[ref])
    rows = [r for r in board.rows() if r["ref"] == ref] or [r for r in board.finished if r["ref"] == ref]
    (row,) = rows
    watch_plain = watch_view.plain_line(row, many=False, clock="00:00:00", title=None)
    watch_frame = "\n".join(board_rows.plain_rows(board.to_json(), width=400, finished=True))
    page = task_page.task_parts(shown, "state")
    dashboard = html.unescape(str(page["head"]) + str(page["details"]))
    card = html.unescape(str(board_page.board_fragment(board.to_json(), {str(proj.repo): "state"}, {})))
    return {
        "show": shown,
        "list": listed,
        "journal": journal,
        "mcp": mcp,
        "watch_plain": watch_plain,
        "watch_frame": watch_frame,
        "dashboard": dashboard,
        "board": card,
    }


def assert_one_story(proj, corral: CLI, ref: str, ids: dict[str, int], cause: str) -> None:  # type: ignore[no-untyped-def]
    said = surfaces(proj, corral, ref)
    shown, mcp = said["show"], said["mcp"]
    # the incidents needing action: the same identities and counts in show, the journal and MCP
    assert needing_action(shown["incidents"]["rows"]) == ids
    assert needing_action(said["journal"]["rows"]) == ids
    assert needing_action(mcp["incidents"]["rows"]) == ids
    # how many need action: one number everywhere, and list's badge says it
    count = len(ids)
    assert shown["incidents"]["needs_action"] == mcp["incidents"]["needs_action"] == count
    assert said["list"]["needs_action"] == count
    badge = f"[{count} need{'s' if count == 1 else ''} action]"
    assert badge in said["watch_plain"] and badge in said["watch_frame"]
    line = shown["incidents"]["line"]
    assert line == said["journal"]["line"] == mcp["incidents"]["line"]
    assert line in said["dashboard"]
    # every incident as show words it, on the dashboard too (its count beside it)
    for r in shown["incidents"]["rows"]:
        if r["label"] == Label.ACTION_REQUIRED:
            assert row_text(r) in said["dashboard"]
    # why it stopped: the one line of the reduced state, word for word, on every surface
    because = shown["stopped_because"]
    assert shown["resting_cause"]["code"] == cause
    assert mcp["stopped_because"] == because
    assert said["list"]["reason"] == because
    assert because in said["watch_plain"] and because in said["watch_frame"]
    assert because in said["dashboard"]
    assert badge in said["board"] and because in said["board"]


def test_a_crash_loop_tells_one_story_on_every_surface(proj, monkeypatch, corral: CLI) -> None:
    proj = command_project(proj, monkeypatch, "sh -c 'echo broken >&2; exit 1'")
    task = tasks.create(proj, "Fail at once", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    done = control.wait(proj, task.ref, timeout=60).task
    assert done.status is Status.INTERRUPTED
    assert_one_story(proj, corral, task.ref, {"exit:status-1": 3, "supervision:crash-loop": 1}, "crash-loop")
    proj.close()


def test_a_watchdog_kill_tells_one_story_on_every_surface(proj, monkeypatch, corral: CLI) -> None:
    proj = command_project(proj, monkeypatch, HANG, watchdog_timeout="1", term_grace="0.2")
    task = tasks.create(proj, "Hang", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    done = control.wait(proj, task.ref, timeout=60).task
    assert done.status is Status.INTERRUPTED
    assert_one_story(proj, corral, task.ref, {"supervision:watchdog": 2}, "watchdog-no-progress")
    proj.close()


def test_a_lost_turn_tells_one_story_on_every_surface(proj, monkeypatch, corral: CLI) -> None:
    proj = command_project(proj, monkeypatch, HANG)
    task = tasks.create(proj, "Lose its supervisor", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    after = lose_turn(proj, task.id)
    assert after.status is Status.INTERRUPTED
    assert_one_story(proj, corral, task.ref, {"supervision:lost": 1}, "turn-lost")
    proj.close()


def test_corrals_wait_between_attempts_reads_the_same_on_every_surface(proj, monkeypatch, corral: CLI) -> None:
    # an unclassified failure that is slow (past the crash-loop window): the unknown ladder's first wait
    fails_slowly = "sh -c 'sleep 0.4; echo broken >&2; exit 1'"
    proj = command_project(proj, monkeypatch, fails_slowly, crash_loop_window="0.1", retry_delay_unknown="60")
    task = tasks.create(proj, "Fail slowly", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    deadline = time.monotonic() + 30
    while (live := corral.json("show", task.ref)["live"] or {}).get("phase") != "retrying":
        assert time.monotonic() < deadline, "the turn never waited between attempts"
        time.sleep(0.1)
    fixed = live["schedule_at"]
    assert fixed.startswith("next attempt at ") and "; the ladder's waits left: " in fixed
    assert live["schedule"].startswith(fixed.split(";")[0] + " (in ")
    said = surfaces(proj, corral, task.ref)
    board_live = next(r for r in boards.board([(proj.repo.name, proj)]).rows() if r["ref"] == task.ref)["live"]
    assert said["mcp"]["live"]["schedule_at"] == board_live["schedule_at"] == fixed
    text = corral.ok("show", task.ref).stdout
    (running,) = [ln for ln in text.splitlines() if ln.startswith("Running:")]
    assert f"attempt 2 of {live['attempts']}" in running
    for part in fixed.split("; "):  # the moments as every surface words them
        for surface in (running, said["watch_plain"], said["watch_frame"], said["dashboard"], said["board"]):
            assert part in surface
    assert "retrying: attempt 1 (unknown): " in said["watch_plain"] and "retrying: attempt 1 (unknown): " in running
    corral.ok("stop", task.ref)
    proj.close()
