"""What a person is told while corral waits between attempts is the retry policy's own figures (issue 29):
``ladder.schedule`` runs ``domain.failures.decide`` forward, and ``live.schedule_words`` says it.

The figures at corral's default settings are the ones ``bench/bench_time_to_rest.py --case claude-500``
measured: a model that answers 500 forever is retried for the network budget's hour, 5, 10, 20, 40 s then
60 s apart, about 62 attempts.
"""

from __future__ import annotations

from datetime import UTC, datetime

from corral.domain.classifiers import classify_http_status, server_error
from corral.domain.delays import Delays
from corral.domain.failures import Budgets, FailureClass, Retry, attempts_bound, decide
from corral.engine.read.live import schedule_words
from corral.engine.runtime import protocol as proto
from corral.engine.runtime.ladder import schedule


def replay(failure_class: FailureClass, each: float, budgets: Budgets, delays: Delays) -> tuple[int, float]:
    """The turn the policy would run if every attempt failed after ``each`` seconds: its attempts, its waits."""
    attempt, elapsed, waits, durations = 1, each, 0.0, [each]
    while isinstance(decision := decide(failure_class, attempt, elapsed, budgets, durations, delays), Retry):
        waits += decision.delay
        elapsed += decision.delay + each
        attempt += 1
        durations.append(each)
    return attempt, waits


def test_a_network_failure_at_the_defaults_is_retried_at_most_63_times_within_the_hour() -> None:
    budgets, delays = Budgets(), Delays()
    plan = schedule(FailureClass.TRANSIENT_NETWORK, 1, 1.0, [1.0], budgets, delays)
    assert plan.limit == budgets.network_seconds == 3600
    # 5 + 10 + 20 + 40 s, then 60 s each while the next start stays within the hour
    assert plan.attempts == 63
    assert plan.waits <= 3600 - 1.0
    # the bound is met by a turn whose attempts take no time; one whose attempts take a second each
    # (as Claude Code's against a 500 do) gets one fewer, the 62 the benchmark measured
    assert replay(FailureClass.TRANSIENT_NETWORK, 0.0, budgets, delays) == (63, 3555.0)
    assert replay(FailureClass.TRANSIENT_NETWORK, 1.0, budgets, delays)[0] == 62


def test_the_bound_counts_down_as_the_budget_is_spent() -> None:
    budgets, delays = Budgets(network_seconds=12), Delays()
    assert schedule(FailureClass.TRANSIENT_NETWORK, 1, 1.0, [1.0], budgets, delays).attempts == 2
    later = schedule(FailureClass.TRANSIENT_NETWORK, 3, 600.0, [1.0] * 3, Budgets(), delays)
    assert later.attempts is not None and 3 < later.attempts < 63


def test_an_unclassified_failure_is_bounded_as_the_policy_bounds_it() -> None:
    budgets, delays = Budgets(), Delays()
    fast = schedule(FailureClass.UNKNOWN, 1, 0.1, [0.1], budgets, delays)
    assert fast.limit is None
    assert fast.attempts == attempts_bound("unknown", [0.1], budgets, delays) == 3  # the crash-loop detector's
    assert fast.waits == delays.fast_step(1) + delays.fast_step(2)  # 1 s, then 2 s
    slow = schedule(FailureClass.UNKNOWN, 1, 20.0, [20.0], budgets, delays)
    assert slow.attempts == attempts_bound("unknown", [20.0], budgets, delays) == budgets.unknown_attempts
    assert slow.waits == sum(delays.unknown_step(n) for n in range(1, budgets.unknown_attempts))


def test_unreachable_is_bounded_by_its_count_of_attempts() -> None:
    budgets, delays = Budgets(), Delays()
    plan = schedule(FailureClass.TRANSIENT_UNREACHABLE, 2, 10.0, [1.0, 1.0], budgets, delays)
    assert plan.limit is None and plan.attempts == budgets.unreachable_attempts


def test_the_schedule_in_words_with_and_without_the_time_left() -> None:
    now = datetime(2026, 12, 6, 5, 0, 0, tzinfo=UTC)
    retry = proto.RetryState(
        1,
        "transient_network",
        "HTTP 500",
        5000,
        next_at="2026-12-06T05:00:05Z",
        gives_up_by="2026-12-06T05:59:59Z",
        at_most=63,
        waits_left_ms=3_594_000,
    )
    local = {
        key: datetime(2026, 12, 6, *map(int, key.split(":")), tzinfo=UTC).astimezone().strftime("%H:%M:%S")
        for key in ("05:00:05", "05:59:59")
    }
    assert schedule_words(retry, now) == (
        f"next attempt at {local['05:00:05']} (in 5s); corral stops retrying by {local['05:59:59']} (in 59m59s)"
    )
    assert (
        schedule_words(retry, None)
        == f"next attempt at {local['05:00:05']}; corral stops retrying by {local['05:59:59']}"
    )
    counted = proto.RetryState(1, "unknown", "exit 1", 1000, next_at="2026-12-06T05:00:01Z", waits_left_ms=3000)
    assert schedule_words(counted, now).endswith("(in 1s); the ladder's waits left: 3s in all")
    # a harness's own retry is not corral's schedule; a supervisor that kept none says its delay
    assert schedule_words(proto.RetryState(1, "transient_overload", "529", 0, by="harness"), now) is None
    assert schedule_words(proto.RetryState(1, "unknown", "exit 1", 15000), now) == "next in 15 s"
    assert schedule_words(proto.RetryState(1, "unknown", "x", 1000, next_at="not a time"), now) == "next in 1 s"


def test_a_5xx_is_a_server_error_of_the_provider_but_an_overload_is_not() -> None:
    for status in (500, 502, 504, 599):
        assert server_error(status) and classify_http_status(status) is FailureClass.TRANSIENT_NETWORK
    for status in (503, 529):
        assert not server_error(status) and classify_http_status(status) is FailureClass.TRANSIENT_OVERLOAD
    assert not server_error(None) and not server_error(404)
