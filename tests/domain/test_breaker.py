"""The circuit breaker as one object: each event's update to the session, the threshold, the same-cause rule.

The cases are those the end-to-end tests drive through real crashes (tests/recovery/test_auto_resume.py,
tests/recovery/test_breaker_same_cause.py, tests/failures/test_scenarios.py), here event by event.
"""

from __future__ import annotations

from corral.domain.breaker import (
    SAME_CAUSE_WINDOW_SECONDS,
    Breaker,
    Counters,
    Interruption,
    Update,
)
from corral.domain.settings import default


def applied(counters: Counters, update: Update) -> Counters:
    """The counters once ``update`` is written, as the store's ``update_session`` writes it."""
    fields = update.fields()
    return Counters(
        fields.get("consecutive_interruptions", counters.consecutive),
        fields.get("auto_resumed", counters.auto_resumed),
    )


def test_the_settings_are_the_breakers_own_defaults_or_the_given_ones() -> None:
    assert Breaker() == Breaker(default("breaker_threshold", int), default("breaker_same_cause", int)) == Breaker(3, 2)
    assert Breaker.of({"breaker_threshold": 5, "breaker_same_cause": 0}) == Breaker(5, 0)


def test_a_new_session_counts_from_zero() -> None:
    assert Counters.of(None) == Counters(0, False)


def test_each_event_writes_only_the_fields_it_moves() -> None:
    breaker, counters = Breaker(), Counters(2, True)
    assert breaker.on_interrupt(counters).fields() == {"consecutive_interruptions": 3}
    assert breaker.on_interrupt(counters, counted=False).fields() == {}
    assert breaker.on_success(counters).fields() == {"consecutive_interruptions": 0}
    assert breaker.on_person_launch(counters).fields() == {"consecutive_interruptions": 0}
    assert breaker.on_hand_merged(counters).fields() == {"consecutive_interruptions": 0}
    assert breaker.on_auto_resume(Counters(1, False)).fields() == {"auto_resumed": True}


def test_it_trips_exactly_at_the_third_consecutive_interruption() -> None:
    breaker, counters = Breaker(threshold=3), Counters()
    for n in (1, 2):
        update = breaker.on_interrupt(counters)
        counters = applied(counters, update)
        assert counters.consecutive == n and not update.tripped and not breaker.tripped(counters)
        resumed = breaker.on_auto_resume(counters)
        counters = applied(counters, resumed)
        assert not resumed.tripped and counters == Counters(n, True)  # an auto-resume does not reset the count
    third = breaker.on_interrupt(counters)
    counters = applied(counters, third)
    assert third.tripped and breaker.tripped(counters) and counters.consecutive == 3
    assert breaker.on_auto_resume(counters).tripped


def test_the_threshold_is_the_setting() -> None:
    assert Breaker(threshold=5).on_interrupt(Counters(3)).tripped is False
    assert Breaker(threshold=5).on_interrupt(Counters(4)).tripped is True
    assert Breaker(threshold=1).on_interrupt(Counters(0)).tripped is True


def test_a_completed_turn_in_between_resets_the_count() -> None:
    breaker = Breaker(threshold=3)
    counters = Counters(2, True)
    success = breaker.on_success(counters)
    counters = applied(counters, success)
    assert counters == Counters(0, True) and not success.tripped  # auto_resumed stays on the session's record
    for _ in range(2):
        counters = applied(counters, breaker.on_interrupt(counters))
    assert not breaker.tripped(counters)
    assert breaker.on_interrupt(counters).tripped


def test_a_persons_launch_and_a_hand_resolved_merge_reset_a_tripped_breaker() -> None:
    breaker, tripped = Breaker(threshold=3), Counters(3, True)
    assert breaker.tripped(tripped)
    for update in (breaker.on_person_launch(tripped), breaker.on_hand_merged(tripped)):
        assert not update.tripped and not breaker.tripped(applied(tripped, update))


def test_an_interruption_the_breaker_does_not_count_leaves_the_count() -> None:
    """An internal fault: never auto-resumed (its cause says so), so not counted."""
    breaker = Breaker(threshold=3)
    assert applied(Counters(1), breaker.on_interrupt(Counters(1), counted=False)) == Counters(1)
    assert breaker.on_interrupt(Counters(3), counted=False).tripped  # a tripped breaker stays tripped


CRASH = Interruption("turn-crashed", 137, "abc", 1000.0)


def at(seconds: float, *, code: str = "turn-crashed", exit_code: int | None = 137, head: str = "abc") -> Interruption:
    return Interruption(code, exit_code, head, seconds)


def test_one_cause_twice_in_a_row_trips_the_same_cause_breaker() -> None:
    breaker = Breaker(threshold=3, same_cause_threshold=2)
    first = breaker.on_repeat(Counters(1), None, CRASH)
    assert (first.run, first.tripped) == (1, False)
    assert first.keep == {"interruption": CRASH.to_json(), "run": 1}
    second = breaker.on_repeat(Counters(2), first.keep, at(1010.0))
    assert (second.run, second.tripped) == (2, True)
    assert second.details() == {"run": 2, "code": "turn-crashed", "exit_code": 137}


def test_each_interruption_is_counted_once() -> None:
    """A later look at the same interruption (its time unchanged) neither counts it again nor keeps anything."""
    breaker = Breaker(same_cause_threshold=2)
    kept = {"interruption": CRASH.to_json(), "run": 2}
    again = breaker.on_repeat(Counters(2), kept, CRASH)
    assert (again.run, again.keep, again.tripped) == (2, None, True)


def test_the_setting_raises_the_count_and_zero_turns_it_off() -> None:
    kept = {"interruption": CRASH.to_json(), "run": 2}
    assert not Breaker(same_cause_threshold=5).on_repeat(Counters(3), kept, at(1010.0)).tripped
    assert Breaker(same_cause_threshold=5).on_repeat(Counters(5), {**kept, "run": 4}, at(1010.0)).tripped
    assert not Breaker(same_cause_threshold=0).on_repeat(Counters(9), {**kept, "run": 8}, at(1010.0)).tripped


def test_a_different_cause_starts_a_new_run() -> None:
    breaker = Breaker(same_cause_threshold=2)
    kept = {"interruption": CRASH.to_json(), "run": 1}
    for now in (
        at(1010.0, head="def"),  # a new commit between them
        at(1010.0, exit_code=1),
        at(1010.0, code="crash-loop"),
        at(1001.0 + SAME_CAUSE_WINDOW_SECONDS),  # too far apart
    ):
        repeat = breaker.on_repeat(Counters(2), kept, now)
        assert (repeat.run, repeat.tripped) == (1, False), now


def test_a_success_or_a_persons_launch_in_between_starts_the_run_again() -> None:
    """A run goes on only while the session's count says the interruptions were in a row."""
    breaker = Breaker(same_cause_threshold=2)
    kept = {"interruption": CRASH.to_json(), "run": 1}
    counters = applied(Counters(1), breaker.on_person_launch(Counters(1)))
    counters = applied(counters, breaker.on_interrupt(counters))
    repeat = breaker.on_repeat(counters, kept, at(1010.0))
    assert (repeat.run, repeat.tripped) == (1, False)


def test_what_was_kept_in_another_shape_counts_as_nothing_kept() -> None:
    breaker = Breaker(same_cause_threshold=2)
    for kept in ("junk", {"interruption": {"code": 3}}, {"run": 5}):
        repeat = breaker.on_repeat(Counters(2), kept, at(1010.0))
        assert (repeat.run, repeat.tripped) == (1, False) and repeat.keep is not None, kept
    # a kept interruption whose run is not a count counts as a run of one
    repeat = breaker.on_repeat(Counters(2), {"interruption": CRASH.to_json(), "run": True}, at(1010.0))
    assert (repeat.run, repeat.tripped) == (2, True)
