"""A status reads with its plain meaning wherever a person reads it, from one home (domain/status.py), and a
refusal says what the person can do now instead of the state machine's moves."""

from __future__ import annotations

import pytest

from corral.dashboard import board_page
from corral.domain.status import MEANING, Status, status_text
from tests.cli.helpers import create, json_error, park, to_working
from tests.conftest import CLI
from tests.dashboard.test_views import _row


def test_every_status_has_a_meaning() -> None:
    assert set(MEANING) == set(Status)
    assert status_text(Status.BLOCKED) == "blocked — waiting for you"
    assert status_text("conflict") == "conflict — a protected file awaits your decision"


def test_show_list_and_json_say_what_a_paused_status_means(corral: CLI) -> None:
    create(corral, "Reviewed", "--ref", "reviewed")
    create(corral, "Clashing", "--ref", "clashing")
    to_working(corral, "reviewed")
    park(corral, "reviewed")
    to_working(corral, "clashing")
    park(corral, "clashing", violations=["db/schema.sql"])
    assert "blocked — waiting for you" in corral.ok("show", "reviewed").stdout.splitlines()[0]
    shown = corral.json("show", "clashing")
    assert shown["task"]["status_meaning"] == "a protected file awaits your decision"
    # The Next names the file itself, not a placeholder.
    assert "--approve-file=db/schema.sql" in shown["next"] and "PATH" not in shown["next"]
    rows = {r["ref"]: r for r in corral.json("list")["tasks"]}
    assert rows["reviewed"]["status_meaning"] == "waiting for you"
    assert "Clashing — a protected file awaits your decision" in corral.ok("list").stdout


def test_the_dashboard_card_says_it_too() -> None:
    html = str(board_page._card(_row(status="blocked", substate=None, needs="review"), {"/x": "s"}))
    assert "blocked — waiting for you" in html


NOW = "Now you can start it: corral start later"
SAID = "later is backlog — not started yet"


@pytest.mark.parametrize(
    ("args", "now"),
    [
        (("unblock", "later", "-m", "go"), NOW),
        (("resume", "later"), NOW),
        (("reopen", "later"), f"See it with corral show later. {NOW}"),  # its own look, then what can run now
    ],
)
def test_a_refusal_says_what_the_person_can_do_now(corral: CLI, args: tuple[str, ...], now: str) -> None:
    create(corral, "Later", "--ref", "later")
    err = json_error(corral(*args, "--json"), 3, "illegal-transition")
    assert SAID in err["message"].replace(": it is ", " is ")
    assert "it can go to" not in err["message"] and err["hint"] == now


def test_unblock_without_feedback_offers_resume_only_where_resume_runs(corral: CLI) -> None:
    create(corral, "Waiting", "--ref", "waiting")
    to_working(corral, "waiting")
    park(corral, "waiting")
    err = json_error(corral("unblock", "waiting", "--json"), 2, "no-text")
    assert err["hint"] == "Say it with -m: corral unblock waiting -m 'your feedback'"  # no resume: it is blocked
