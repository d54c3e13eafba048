"""The board's new-task form (``n``): every field ``corral create`` and the dashboard's form take, through the
engine's own operation; a refusal shown with its hint, what was typed kept. Driven by Textual's pilot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import Input, Label, Select, TextArea

from corral.cli.board_actions import globs
from corral.cli.board_dialogs import NewTask
from tests.board.test_board_app import board, message, screen, shows, when
from tests.conftest import CLI, git


def test_protected_paths_are_one_glob_a_line_or_comma_separated() -> None:
    assert globs("migrations/*\n secrets/*, *.pem ,\n\n") == ("migrations/*", "secrets/*", "*.pem")
    assert globs("  ") == ()


def test_the_form_takes_every_field_create_takes_and_keeps_them_through_a_refusal(
    corral: CLI, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_CLAUDE_BIN", str(tmp_path / "nowhere" / "claude"))  # not installed on this host
    git(repo, "branch", "release")
    # What `corral create` says to the same refusal, and the same missing harness.
    refused = corral("create", "Tidy the parser", "--target", "bad..name", "--json")
    assert refused.returncode != 0
    refusal = refused.json()["error"]
    warned = corral.json("create", "A twin", "--ref", "twin", "--harness", "claude")["warning"]

    async def drive() -> None:
        app = board(repo)
        async with app.run_test(size=(100, 32)) as pilot:
            await shows(pilot, "Backlog (1)", "twin")
            await pilot.press("n")
            await shows(pilot, "New task", "Harness", "Target", "Protected")
            form = app.screen
            assert isinstance(form, NewTask)
            await pilot.press(*"Tidy the parser", "enter")  # Enter on the goal: on to the prompt
            await pilot.press(*"Keep the public API", "tab")
            await pilot.press("enter", "down", "enter")  # the harness: the first one corral knows
            await pilot.pause(0.1)
            assert form.query_one("#harness", Select).value == "claude"
            await pilot.press("tab", *"bad..name", "tab", *"tidy", "tab")
            await pilot.press(*"migrations/*", "enter", *"secrets/*, *.pem")
            await pilot.press("ctrl+s")
            said = form.query_one("#said", Label)
            await when(pilot, lambda _s: "not a branch name" in str(said.content), what="the refusal")
            # The engine's refusal, its message and its hint; the form stays with what was typed.
            assert str(said.content) == f"{refusal['message']} {refusal['hint']}"
            assert app.screen is form
            values = {name: form.query_one(f"#{name}", Input).value for name in ("goal", "prompt", "target", "ref")}
            assert values == {
                "goal": "Tidy the parser",
                "prompt": "Keep the public API",
                "target": "bad..name",
                "ref": "tidy",
            }
            assert form.query_one("#protect", TextArea).text == "migrations/*\nsecrets/*, *.pem"
            assert [t["ref"] for t in corral.json("list")["tasks"]] == ["twin"]

            # Put right: the target, then Enter creates it.
            form.query_one("#target", Input).focus()
            await pilot.press(*["backspace"] * len("bad..name"), *"release", "enter")
            await when(pilot, lambda _s: "Created tidy" in message(app), what="the task created")
            assert len(app.screen_stack) == 1
            assert message(app) == f"Created tidy (backlog): s starts it. warning: {warned.replace('twin', 'tidy')}"
            await shows(pilot, "Backlog (2)", "Tidy the parser")
            task = corral.json("show", "tidy")["task"]
            assert (task["goal"], task["prompt"], task["harness"], task["target"], task["protected"]) == (
                "Tidy the parser",
                "Keep the public API",
                "claude",
                "release",
                ["migrations/*", "secrets/*", "*.pem"],
            )

            # Only a goal: the project's defaults, as `corral create "goal"` makes it; Esc backs out of a form.
            await pilot.press("n")
            await shows(pilot, "New task")
            await pilot.press("escape")
            await when(pilot, lambda _s: message(app) == "No task created.", what="backed out")
            await pilot.press("n")
            await shows(pilot, "New task")
            await pilot.press(*"Only a goal", "enter", "enter")
            await shows(pilot, "Backlog (3)", "Only a goal")
            (only,) = [t for t in corral.json("list")["tasks"] if t["goal"] == "Only a goal"]
            plain = corral.json("show", only["ref"])["task"]
            assert (plain["prompt"], plain["target"], plain["protected"]) == ("", "main", [])
            assert "New task" not in screen(app)
            await pilot.press("q")
        assert app.return_code == 0

    asyncio.run(drive())
