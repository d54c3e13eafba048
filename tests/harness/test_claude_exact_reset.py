"""Claude Code states a subscription's usage limit twice: a ``rate_limit_event`` line with the reset's
exact time (``resetsAt``, seconds since the epoch) and a result whose words give it as a clock time to
the minute (``resets 2:13pm (UTC)``). corral waits for the exact one: read from the words, a reset at
14:13:40 would be 14:13:00, and the account would be tried again 40 s before it clears."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.adapters.harness.claude import ClaudeHarness
from corral.domain.failures import FailureClass
from corral.domain.usage_limit import reset_of
from tests.harness.test_harness_adapters import facts, result

#: 2025-12-01 14:13:40 UTC: forty seconds past the minute the words name.
RESET = 1764598420


def test_the_rate_limit_events_exact_reset_wins_over_the_results_minute() -> None:
    h = ClaudeHarness()
    limit = {
        "type": "rate_limit_event",
        "rate_limit_info": {"status": "rejected", "resetsAt": RESET, "rateLimitType": "five_hour"},
    }
    words = "You've hit your usage limit · resets 2:13pm (UTC)"
    verdict = h.classify(facts(h, [limit, result(words)], exit_code=1))
    assert verdict.failure_class is FailureClass.TRANSIENT_OVERLOAD and verdict.code == "usage-limit"
    assert verdict.reason == words  # what the person reads is the CLI's own words
    assert verdict.usage_limit is not None
    now = datetime(2025, 12, 1, 14, 10, tzinfo=UTC)
    assert reset_of(verdict.usage_limit, now) == datetime(2025, 12, 1, 14, 13, 40, tzinfo=UTC)
    assert reset_of(words, now) == datetime(2025, 12, 1, 14, 13, tzinfo=UTC)  # the words alone: the minute


def test_a_rate_limit_event_that_is_no_rejection_leaves_the_words() -> None:
    h = ClaudeHarness()
    warning = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed_warning", "resetsAt": RESET}}
    words = "You've hit your usage limit · resets 2:13pm (UTC)"
    verdict = h.classify(facts(h, [warning, result(words)], exit_code=1))
    assert verdict.usage_limit == words
