"""Every benchmark runs whole in its quick mode and leaves no process behind.

A benchmark starts daemons, supervisors, agents, servers and browsers; one that leaves any of
them running spoils every figure measured after it. Each is run here with ``--quick`` (tiny
sizes, no verdict on its targets, no results file) under a mark in its environment that every
process it starts inherits; once it has exited, no process of this user may carry the mark.
The figures themselves are never checked here (timings live in the benchmarks).

The quick runs mostly wait (on a poll, a retry, a browser), so they run in a few groups, each group's
runs at once, each under a mark of its own: a group costs about what its slowest run costs, not their
sum, and no one test holds a worker of a parallel run for the whole set (the longest runs are dealt
out over the groups).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402

#: What run_all.sh runs that has no quick mode: the store seeder, which starts no process.
NO_QUICK = {"seed_store.py"}
#: Benchmarks run_all.sh leaves out, and why.
NOT_IN_RUN_ALL = {
    "bench_suite.py": "times the README's test command, which runs every other benchmark's quick mode",
    "bench_hundred_turns.py": "measures one test of the suite's CPU beside a baseline tree; the suite runs that test",
}
#: The groups the quick runs are dealt into, the longest first, round the groups: each group a test whose
#: runs go at once (they mostly wait, on a poll, a retry, a lease, so more than the cores). Two of the longest
#: to a group, and a short run or two beside them: a group stays well under half a minute with the suite's
#: other workers running beside it.
GROUPS = 8
#: The sixteen longest quick runs, started first so that none of them is left to run alone at the end, and
#: dealt in a snake: the eight longest (a real Pi's turns, a PostgreSQL server and its workers, a forge poll,
#: a crash loop, a browser) one to a group, the next eight in reverse, so that the longest of all shares its
#: group with the shortest of these. Ordered by a quick run's CPU and wall time, measured alone.
LONGEST = (
    "bench_pi_extension.py",
    "bench_workers.py",
    "bench_forge.py",
    "bench_supervisor.py",
    "bench_dashboard.py",
    "bench_mcp.py",
    "bench_recovery.py",
    "bench_usage_reset.py",
    # the next eight, the shortest of them first
    "bench_scale_reads.py",
    "bench_dashboard_render.py",
    "bench_pg_store.py",
    "bench_watch_idle.py",
    "bench_board.py",
    "bench_time_to_rest.py",
    "bench_fatal_verdict.py",
    "bench_accept.py",
)
#: A quick run that takes longer than this is not quick.
QUICK_TIMEOUT = 150.0


def run_all_scripts() -> list[str]:
    text = (BENCH / "run_all.sh").read_text()
    return re.findall(r"^run bench/(\S+\.py)", text, re.M)


def quick_scripts() -> list[str]:
    """Every benchmark with a quick mode, the longest first."""
    names = [name for name in run_all_scripts() if name not in NO_QUICK]
    return sorted(names, key=lambda name: LONGEST.index(name) if name in LONGEST else len(LONGEST))


def has_quick(script: Path) -> bool:
    """Whether the benchmark parses its options with ``benchlib.parse_args`` (which gives ``--quick``)."""
    return re.search(r"(?<![.\w])parse_args\(", script.read_text()) is not None


def run_marked(args: list[str], mark: str, out: Path, timeout: float = 300) -> tuple[int, str]:
    """(exit code, stdout and stderr): into a file, which a process left behind cannot hold open."""
    env = {**os.environ, benchlib.RUN_MARK: mark}
    with out.open("w") as f:
        try:
            code = subprocess.run(
                args, env=env, cwd=BENCH.parent, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    text = out.read_text(errors="replace")
    return code, text + (f"\n(stopped after {timeout:.0f} s)" if code == -1 else "")


def left_running(mark: str) -> list[str]:
    """What carries the mark and still runs: killed here, and returned for the failure."""
    left = benchlib.survivors(mark)
    for pid, _ in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return [f"{pid}: {cmdline}" for pid, cmdline in left]


#: Runs a benchmark as a person's shell does, under a parent that reaps what it orphans (init, there).
#: A test worker may have made itself a subreaper (an in-process supervisor does) that never reaps: an
#: ended daemon or supervisor of the benchmark's would stay a zombie there, alive to a pid check.
_REAPING_PARENT = """
import ctypes, os, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
child = os.posix_spawn(sys.executable, [sys.executable, *sys.argv[1:]], os.environ)
while True:
    pid, status = os.wait()
    if pid == child:
        sys.exit(os.waitstatus_to_exitcode(status))
"""


def quick_run(script: str, tmp: Path) -> tuple[str, float, list[str]]:
    """(script, seconds, what is wrong with its quick run: nothing when it ran whole and left nothing)."""
    mark = f"test-{uuid.uuid4().hex}"
    began = time.monotonic()
    args = [sys.executable, "-c", _REAPING_PARENT, str(BENCH / script), "--quick"]
    code, out = run_marked(args, mark, tmp / f"{script}.out", QUICK_TIMEOUT)
    took = time.monotonic() - began
    wrong = []
    if left := left_running(mark):
        wrong.append(f"left running: {left}")
    if code != 0:
        wrong.append(f"exited {code}:\n{out[-3000:]}")
    elif "Nothing this run started still runs." not in out:
        wrong.append(f"its own end check did not run:\n{out[-3000:]}")
    return script, took, wrong


def group(index: int) -> list[str]:
    """The quick runs of group ``index``: every :data:`GROUPS`-th of them, the longest first."""
    return quick_scripts()[index::GROUPS]


def test_the_groups_hold_every_quick_run_once() -> None:
    dealt = [script for index in range(GROUPS) for script in group(index)]
    assert sorted(dealt) == sorted(quick_scripts()) and len(dealt) == len(set(dealt))
    assert all(group(index) for index in range(GROUPS))
    # no group holds two of the longest runs while another holds none of them
    longest = [sum(script in LONGEST for script in group(index)) for index in range(GROUPS)]
    assert max(longest) - min(longest) <= 1, longest
    # and none holds two of the eight longest: each of them leads a group of its own
    leading = [sum(script in LONGEST[:GROUPS] for script in group(index)) for index in range(GROUPS)]
    assert leading == [1] * GROUPS, leading
    assert set(LONGEST) <= set(quick_scripts()) and len(set(LONGEST)) == len(LONGEST)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("index", range(GROUPS), ids=lambda index: f"group{index}")
def test_every_benchmark_runs_whole_in_its_quick_mode_and_leaves_nothing_running(index: int, tmp_path: Path) -> None:
    scripts = group(index)
    with ThreadPoolExecutor(len(scripts)) as pool:
        runs = list(pool.map(lambda script: quick_run(script, tmp_path), scripts))
    times = ", ".join(f"{script} {took:.0f} s" for script, took, _ in sorted(runs, key=lambda r: -r[1]))
    print(f"quick runs: {times}")  # shown with -s, or -rP
    failures = [f"{script}: {'; '.join(wrong)}" for script, _, wrong in runs if wrong]
    assert not failures, "\n\n".join(failures) + f"\n\n(quick runs: {times})"


def test_every_benchmark_is_in_run_all_with_a_quick_mode() -> None:
    listed = run_all_scripts()
    for script in sorted(BENCH.glob("bench_*.py")):
        if script.name in NOT_IN_RUN_ALL:
            assert script.name not in listed
            continue
        assert script.name in listed, f"{script.name} is not in bench/run_all.sh"
    for script in quick_scripts():
        assert has_quick(BENCH / script), f"{script} has no --quick"


_LEAKER = """
import argparse, subprocess, sys
sys.path.insert(0, sys.argv[1])
import benchlib
benchlib.parse_args(argparse.ArgumentParser(), argv=["--quick"])
subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
sys.exit(benchlib.finish("leak-check", {}, True))
"""


def test_a_benchmark_that_leaves_a_process_running_fails_and_the_process_is_ended(tmp_path: Path) -> None:
    """The end check is real: a detached child that outlives the run is named, killed, and fails it; the
    callers that handed the mark down (a ``timeout``, a shell) carry it too, and are spared: the run did
    not start them."""
    mark = f"test-{uuid.uuid4().hex}"
    args = ["timeout", "60", "sh", "-c", f'"{sys.executable}" -c "$0" "$1"; echo "exit $?"', _LEAKER, str(BENCH)]
    code, out = run_marked(args, mark, tmp_path / "out.txt", timeout=60)
    assert code == 0 and "exit 1" in out, out  # the leaker failed, its callers ran on
    assert "Left running at the end (now killed) FAIL" in out and "sleep 300" in out
    assert "timeout 60" not in out and "sh -c" not in out
    assert left_running(mark) == []  # the check killed it


def test_run_all_fails_when_a_benchmark_leaves_a_process_running(tmp_path: Path) -> None:
    """run_all.sh's own look after each benchmark: a process carrying the benchmark's mark fails the run."""
    script = tmp_path / "run_all.sh"
    leaker = tmp_path / "leaker.py"
    leaker.write_text(
        "import subprocess\nquiet = subprocess.DEVNULL\n"
        'subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=quiet, stderr=quiet)\n'
    )
    text = (BENCH / "run_all.sh").read_text()
    body = text[: text.index("\nrun bench/")] + f"\nrun {leaker}\n" + text[text.index("\necho\nif") :]
    body = body.replace('here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"', f'here="{BENCH}"')
    script.write_text(body)
    code, out = run_marked(["bash", str(script)], f"outer-{uuid.uuid4().hex}", tmp_path / "out.txt", timeout=120)
    assert code == 1, out
    assert f"run_all: {leaker} left a process running" in out
    assert "sleep 300" in out
