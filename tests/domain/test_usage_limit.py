"""Reading a usage limit's reset, and what a task does about it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from corral.domain.status import Status
from corral.domain.substate import Live, substate
from corral.domain.usage_limit import Beyond, Wait, reset_of, reset_words, verdict

NOW = datetime(2026, 12, 1, 13, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Claude AI usage limit reached|1764597600", datetime(2025, 12, 1, 14, 0, tzinfo=UTC)),
        ("You've hit your usage limit. Try again in 2 hours 5 minutes.", NOW + timedelta(hours=2, minutes=5)),
        ("usage limit reached, resets in 20 minutes", NOW + timedelta(minutes=20)),
        ("rate limited: please try again in 30 seconds", NOW + timedelta(seconds=30)),
        ("try again in 1 day, 3 hours and 10 mins", NOW + timedelta(days=1, hours=3, minutes=10)),
        ("5-hour limit reached ∙ resets 2pm", datetime(2026, 12, 1, 14, 0, tzinfo=UTC)),
        ("You've hit your limit · resets 1pm", datetime(2026, 12, 2, 13, 0, tzinfo=UTC)),  # 1 pm has passed
        ("Try again at 3:45 PM.", datetime(2026, 12, 1, 15, 45, tzinfo=UTC)),
        ("usage limit; resets at 16:30", datetime(2026, 12, 1, 16, 30, tzinfo=UTC)),
        ("limit resets at 2026-12-03T09:00:00Z", datetime(2026, 12, 3, 9, 0, tzinfo=UTC)),
        ("limit resets at 2026-12-03T09:00:00+02:00", datetime(2026, 12, 3, 7, 0, tzinfo=UTC)),
        ("when your monthly cycle ends on 12/19/2026", datetime(2026, 12, 19, tzinfo=UTC)),
    ],
)
def test_the_reset_a_message_states(text: str, expected: datetime) -> None:
    assert reset_of(text, NOW, local=UTC) == expected


def test_a_time_of_day_is_read_in_the_zone_it_names_else_in_the_machines() -> None:
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in December
    assert reset_of("You've hit your 5-hour limit · resets 3:11pm (UTC)", NOW, local=berlin) == datetime(
        2026, 12, 1, 15, 11, tzinfo=UTC
    )
    assert reset_of("resets 3pm (Europe/Berlin)", NOW, local=UTC) == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    # Codex prints its local time with no zone: read in the machine's zone.
    assert reset_of("You’ve hit your usage limit. Try again at 2:38 PM.", NOW, local=berlin) == datetime(
        2026, 12, 1, 13, 38, tzinfo=UTC
    )
    new_york = ZoneInfo("America/New_York")
    assert reset_of("Try again at 9:19 AM.", NOW, local=new_york) == datetime(2026, 12, 1, 14, 19, tzinfo=UTC)


def test_a_time_of_day_that_just_passed_is_now_not_tomorrow() -> None:
    stated = NOW.replace(second=45)  # "2:08 PM" read at 14:08:45, or a few seconds into the next minute
    assert reset_of("Try again at 1:20 PM.", stated, local=UTC) == NOW
    later = NOW + timedelta(seconds=75)
    assert reset_of("Try again at 1:20 PM.", later, local=UTC) == NOW + timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("You’ve hit your usage limit. Try again at Dec 3rd, 2026 4:08 PM.", datetime(2026, 12, 3, 16, 8, tzinfo=UTC)),
        ("You've hit your weekly limit · resets Dec 3, 9:45pm (UTC)", datetime(2026, 12, 3, 21, 45, tzinfo=UTC)),
        ("resets Jan 2, 9am (UTC)", datetime(2027, 1, 2, 9, 0, tzinfo=UTC)),  # no year: the next Jan 2
    ],
)
def test_a_date_with_a_months_name(text: str, expected: datetime) -> None:
    assert reset_of(text, NOW, local=UTC) == expected


@pytest.mark.parametrize(
    "text",
    ["usage limit reached", "HTTP 429 too many requests", "resets 14", "try again later", "on 13/45/2026", ""],
)
def test_a_message_that_states_no_reset(text: str) -> None:
    assert reset_of(text, NOW, local=UTC) is None


def test_a_reset_within_the_budget_is_waited_for_and_one_beyond_it_parks_with_the_date() -> None:
    soon = NOW + timedelta(minutes=40)
    assert verdict(soon, NOW, budget_seconds=3600) == Wait(soon)
    late = NOW + timedelta(days=18)
    far = verdict(late, NOW, budget_seconds=3600)
    assert isinstance(far, Beyond)
    assert far.resets_at == late
    assert "2026-12-19 13:20 UTC" in far.reason and "1 h retry budget" in far.reason


def test_a_waiting_turn_reads_as_waiting_on_the_usage_limit() -> None:
    resets = (datetime.now(UTC) + timedelta(minutes=5)).replace(second=0, microsecond=0)
    live = Live(alive=True, phase="waiting", limit_resets_at=resets.isoformat())
    local = resets.astimezone()
    assert substate(Status.WORKING, live) == f"waiting: usage limit (resets {local:%H:%M})"
    behind = Live(alive=True, phase="waiting", limit_resets_at=resets.isoformat(), limit_behind_first=True)
    assert substate(Status.WORKING, behind) == "waiting: usage limit (reset passed; another task goes first)"
    assert reset_words(None) == "reset unknown"
    other_day = datetime(2026, 12, 9, 12, 0, tzinfo=UTC)
    assert reset_words(other_day, NOW) == f"resets {other_day.astimezone():%b} 9 {other_day.astimezone():%H:%M}"
