"""How the timeline numbers turns: a message and its answer are one exchange (domain/exchanges.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from corral.domain.actors import Actor, Role
from corral.domain.exchanges import number
from corral.domain.records import FeedbackDelivery, Turn

AT = datetime(2026, 1, 1, tzinfo=UTC)


def turn(sequence: int, role: Role, command: str | None = None, **details: Any) -> Turn:
    return Turn(
        id=f"t{sequence}",
        task_id="task",
        session_id="s",
        sequence=sequence,
        role=role,
        actor=Actor.HUMAN if role is Role.HUMAN else None,
        kind="k",
        content="",
        feedback_delivery=FeedbackDelivery.NONE,
        delivered=(),
        started_at=AT,
        ended_at=None,
        details=details,
        command_id=command,
    )


H, A = Role.HUMAN, Role.AGENT

HISTORY = [
    turn(1, H, "c1"),  # start
    turn(2, A, "c1", log_turn=1),  # its answer
    turn(3, H),  # a sync: no command, no answer
    turn(4, H, "c2"),  # unblock
    turn(5, A, log_turn=4),  # lost: recorded with no command, naming the turn whose output it ended
    turn(6, A),  # an internal fault recorded on its own
    turn(7, H, "c3"),  # auto-resume
    turn(8, A, "c3"),
]


def test_a_message_and_its_answer_share_a_number_and_the_rest_are_their_own() -> None:
    assert number(HISTORY) == {1: 1, 2: 1, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 5}


def test_a_page_of_the_latest_turns_keeps_the_numbers_of_the_whole_history() -> None:
    whole = number(HISTORY)
    for first in range(1, len(HISTORY)):
        page = HISTORY[first:]
        before = whole[HISTORY[first - 1].sequence]  # the exchanges begun before the page (the store counts them)
        assert number(page, before=before) == {t.sequence: whole[t.sequence] for t in page}, first


def test_an_answer_with_no_launching_turn_in_a_whole_history_begins_its_own() -> None:
    assert number([turn(1, A, "gone"), turn(2, A, log_turn=9)]) == {1: 1, 2: 2}
