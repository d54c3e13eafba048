#!/usr/bin/env bash
# Run every corral benchmark; results are printed and written to bench/results/*.json.
# Usage: bench/run_all.sh            (from anywhere; uses the project's .venv)
#        PYTHON=/path/to/python bench/run_all.sh
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
py="${PYTHON:-$root/.venv/bin/python}"
cd "$root"
status=0
# Each benchmark runs under a mark of its own in its environment, which every process it starts
# inherits; once it exits, any process still carrying the mark was left behind: a failure.
run() {
    echo
    echo "=== $* ==="
    local mark="run_all-$$-$RANDOM$RANDOM"
    BENCH_RUN_MARK="$mark" "$py" "$@" || status=1
    BENCH_RUN_MARK="$mark" "$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import benchlib
sys.exit(1 if benchlib.end_check(grace=1.0) else 0)' "$here" || { echo "run_all: $1 left a process running"; status=1; }
}
run bench/seed_store.py --compare-api
run bench/bench_transitions.py
run bench/bench_cli.py
run bench/bench_show_failures.py
run bench/bench_receipt_fit.py
run bench/bench_accept.py
run bench/bench_supervisor.py
run bench/bench_recovery.py
run bench/bench_startup.py
run bench/bench_merged_sweep.py
run bench/bench_scale_reads.py
run bench/bench_lines.py
run bench/bench_usage_reset.py
run bench/bench_incident_scan.py
run bench/bench_sandbox_launch.py
run bench/bench_ref_guard.py
run bench/bench_mcp.py
run bench/bench_watch_idle.py
run bench/bench_dashboard.py
run bench/bench_pg_store.py
run bench/bench_workers.py
run bench/bench_board.py
run bench/bench_dashboard_render.py
run bench/bench_forge.py
run bench/bench_pi_extension.py
run bench/bench_fatal_verdict.py
run bench/bench_quarantine.py
run bench/bench_time_to_rest.py
run bench/bench_first_command.py
# Not here: bench_suite.py times the README's test command, which runs every benchmark above in its quick mode.
echo
if [ "$status" -eq 0 ]; then echo "run_all: every benchmark met its targets"; else echo "run_all: some target missed (see FAIL above)"; fi
exit "$status"
