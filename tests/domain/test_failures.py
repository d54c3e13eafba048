"""The pure retry policy, crash-loop detector, watchdog rule and exit reasons."""

from __future__ import annotations

from corral.domain.classifiers import classify_common
from corral.domain.exits import exit_reason
from corral.domain.failures import (
    Budgets,
    FailureClass,
    Retry,
    Stop,
    decide,
    decide_watchdog_retry,
)

OVER, N, U, K = (
    FailureClass.TRANSIENT_OVERLOAD,
    FailureClass.TRANSIENT_NETWORK,
    FailureClass.TRANSIENT_UNREACHABLE,
    FailureClass.UNKNOWN,
)


def test_transient_ladder_is_5_10_20_40_then_60_capped():
    assert [decide(OVER, n, 0.0) for n in range(1, 8)] == [Retry(d) for d in (5, 10, 20, 40, 60, 60, 60)]


def test_budgets():
    assert decide(OVER, 50, 6 * 3600 - 61) == Retry(60.0)
    assert decide(OVER, 50, 6 * 3600 - 59) == Stop("budget-exhausted")
    assert decide(N, 3, 3600.0 - 10) == Stop("budget-exhausted")
    assert decide(U, 11, 0.0) == Retry(60.0) and decide(U, 12, 0.0) == Stop("budget-exhausted")
    assert decide(K, 5, 0.0, recent_durations=[20] * 5) == Retry(60.0)
    assert decide(K, 6, 0.0, recent_durations=[20] * 6) == Stop("budget-exhausted")
    assert decide(U, 2, 0.0, Budgets(unreachable_attempts=2)) == Stop("budget-exhausted")


def test_fatal_classes_stop_at_once():
    assert decide(FailureClass.FATAL_AUTH, 1, 0.0) == Stop("fatal")
    assert decide(FailureClass.FATAL_CONFIG, 1, 0.0) == Stop("fatal")


def test_crash_loop_only_for_unknown_and_only_three_fast_in_a_row():
    fast = [0.1, 0.2, 0.3]
    assert decide(K, 3, 1.0, recent_durations=fast) == Stop("crash-loop")
    # the newest failed fast: the fast steps (issue 29: 1 s, then 2 s), not the unknown ladder
    assert decide(K, 3, 1.0, recent_durations=[0.1, 12.0, 0.3]) == Retry(1.0)
    assert decide(K, 2, 1.0, recent_durations=fast[:2]) == Retry(2.0)
    # the newest ran past the crash-loop window: the unknown ladder's step for its attempt
    assert decide(K, 3, 1.0, recent_durations=[0.1, 0.3, 12.0]) == Retry(60.0)
    assert decide(K, 2, 1.0, recent_durations=[0.1, 12.0]) == Retry(30.0)
    assert decide(OVER, 3, 1.0, recent_durations=fast) == Retry(20.0)  # a 429 comes back in milliseconds


def test_watchdog_rule():
    # a zero-work stall is relaunched once (issue 29): a second kill ends the turn
    assert decide_watchdog_retry(False, 0)
    assert not decide_watchdog_retry(False, 1)
    assert not decide_watchdog_retry(True, 0)


def test_exit_reasons():
    assert exit_reason(137) == "OOM killed or SIGKILL (exit code 137)"
    assert exit_reason(None, 9) == "OOM killed or SIGKILL (exit code 137)"
    assert exit_reason(143) == "killed by SIGTERM (exit code 143)"
    assert exit_reason(127) == "command not found (exit code 127)"
    assert exit_reason(2) == "exited with code 2"


def test_common_signals():
    assert classify_common("HTTP 403 Forbidden") is FailureClass.FATAL_AUTH
    assert classify_common("Your credit balance is too low") is FailureClass.FATAL_AUTH
    assert classify_common("getaddrinfo ENOTFOUND api.example") is FailureClass.TRANSIENT_UNREACHABLE
    assert classify_common("read ECONNRESET") is FailureClass.TRANSIENT_NETWORK
    assert classify_common("", 127) is FailureClass.FATAL_CONFIG
    assert classify_common("nothing recognisable") is FailureClass.UNKNOWN


def test_the_login_step_is_each_harness_own() -> None:
    from corral.domain.explain import explain_failure
    from corral.domain.records import FailureEvidence

    evidence = FailureEvidence(source="harness", code="harness-not-authenticated", category="fatal_auth")
    said = {h: explain_failure(evidence, h, "t").next for h in ("claude", "codex", "pi")}
    assert "run `claude` and /login" in said["claude"]
    assert "run `codex login`" in said["codex"] and "claude" not in said["codex"]
    assert "~/.pi/agent/auth.json" in said["pi"] and "claude" not in said["pi"]
    assert all(s.endswith("corral unblock t -m 'continue'") for s in said.values())
