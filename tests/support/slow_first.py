"""The test files that hold the suite's longest tests, run first.

Under ``-n 2`` the suite ends when its last worker does. Collected in the order of their paths,
the longest tests (a hundred turns over three workers, a fresh install, the team's leases, kill
loops, crash points, waits for a usage limit's reset: 10 to 70 s each) come late, from
``tests/recovery/``, ``tests/seams/``, ``tests/workers/`` and the benchmarks' quick runs, and one
worker could be left running them alone while the other had nothing left to do. Run first, they
share the two workers with the thousands of short tests that come after them, and the run ends on
short tests on both.

Only the order of whole files changes (each file's tests keep theirs, a module's fixtures are made
once as before); a file missing from the list runs in its collected place, after these. The list
is ordered by each file's longest test, measured alone on two loaded cores (``--durations``); it
needs to be right only roughly: a file that grew slow runs where it always did.
"""

from __future__ import annotations

#: Longest first, by the longest single test each holds.
FILES: tuple[str, ...] = (
    "tests/workers/test_workers.py",
    "tests/test_install_extra.py",
    "tests/recovery/test_breaker_same_cause.py",
    "tests/workers/test_local_hosts.py",
    "tests/seams/test_claude_cadence.py",
    "tests/recovery/test_kill_loops.py",
    "tests/recovery/test_crash_points.py",
    "tests/seams/test_corral_codex.py",
    "tests/workers/test_partition.py",
    "tests/recovery/test_accept_kills.py",
    "tests/workers/test_turn_ends.py",
    "tests/seams/test_claude_time_to_rest.py",
    "tests/test_bench_quick.py",
    "tests/seams/test_mcp_claude.py",
    "tests/runtime/test_confined_attacks.py",
    "tests/recovery/test_daemon.py",
    "tests/seams/test_harness_config_readonly.py",
    "tests/seams/test_corral_pi.py",
    "tests/review/test_accept_race.py",
    "tests/workers/test_carried_sessions.py",
    "tests/review/test_odd_path_names.py",
    "tests/runtime/test_ref_guard.py",
    "tests/workers/test_agent_tools.py",
    "tests/turns/test_usage_limit_pause.py",
    "tests/mcp_doors/test_shell_bound_to_turn.py",
    "tests/review/test_review_pinned.py",
    "tests/cli/test_watch.py",
    "tests/cli/test_every_hint_works.py",
    "tests/seams/test_claude_real.py",
    "tests/seams/test_carry_sessions.py",
    "tests/runtime/test_confined_attacks_more.py",
    "tests/recovery/test_lazy_cases.py",
    "tests/turns/test_read_only.py",
    "tests/cli/test_wait_live.py",
    "tests/turns/test_retry_and_watchdog.py",
    "tests/turns/test_ask_stop_sync.py",
    "tests/seams/test_corral_claude_incidents.py",
    "tests/seams/test_claude_server_error.py",
    "tests/seams/test_sandbox_pi.py",
    "tests/seams/test_corral_claude.py",
)


def rank(nodeid: str) -> int:
    """Where the test ``nodeid`` runs: its file's place in :data:`FILES`, or after all of them."""
    return _RANK.get(nodeid.split("::", 1)[0], len(FILES))


_RANK = {path: i for i, path in enumerate(FILES)}
