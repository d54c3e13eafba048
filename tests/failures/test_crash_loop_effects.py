"""A crash loop's possible effects are what its attempts' are: unknown, never "none" (seed 004 item 21)."""

from __future__ import annotations

from corral.domain.records import PossibleEffects
from corral.domain.status import Status
from tests.failures.test_scenarios import show_text


def test_a_crash_loop_whose_attempts_say_unknown_says_unknown(fproj, agent, corral):
    from tests.turns.test_retry_and_watchdog import VirtualTime, run_virtual

    agent.script(default=[{"init": True}, {"stderr": "fatal: lost the connection to the editor\n"}, {"exit": 3}])
    task, _response, (turn,) = run_virtual(fproj, VirtualTime(step=1.0), goal="Exit early")
    assert task.status is Status.INTERRUPTED and task.resting_cause.code == "crash-loop"
    failed = [a.failure for a in turn.attempts if a.failure is not None]
    assert len(failed) == 3 and all(f.possible_effects is PossibleEffects.UNKNOWN for f in failed)
    assert task.resting_cause.evidence.possible_effects is PossibleEffects.UNKNOWN
    assert "It may have changed files before it stopped." in show_text(corral, task.ref)
