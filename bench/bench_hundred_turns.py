#!/usr/bin/env python
"""The CPU of the suite's slowest test, a hundred queued turns over three workers (issue 28), and where it goes.

Runs ``tests/workers/test_workers.py::test_a_hundred_queued_turns_spread_over_three_workers_each_run_exactly_once``
alone (``-n 0``) from one or two source trees, rounds interleaved, each run in a cgroup v1 ``cpuacct`` group of its
own (every process it starts, detached ones included, stays in it). The PostgreSQL server is started here, outside
the group, and given to the test (``CORRAL_TEST_PG_URL``); its CPU is read from its postmaster (its own and its
reaped backends'). Beside each run, the floor: the same pytest collecting the test and running nothing.

Usage (as root, for the cgroup)::

    .venv/bin/python bench/bench_hundred_turns.py --rounds 3
    .venv/bin/python bench/bench_hundred_turns.py --before /tmp/old-tree --rounds 3   # a tree from `git archive`

A tree is a checkout of the repository (``src/`` is put first on ``PYTHONPATH``; this checkout's ``.venv`` runs it).
Prints each run, the medians, and with ``--before`` the cut of the test's CPU (test + server, less the floor).
No verdict: issue 28's target is this test's wall time inside the suite (under 30 s), which ``bench_suite.py``
measures; this says where the test's CPU goes and what a change took from it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.postgres import Server  # noqa: E402

TEST = "tests/workers/test_workers.py::test_a_hundred_queued_turns_spread_over_three_workers_each_run_exactly_once"
CGROUP = Path("/sys/fs/cgroup/cpuacct")


def _server_cpu(pid: int) -> float:
    """The postmaster's CPU seconds, its reaped children's (every backend that ended) included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


#: What a run left running (each a process of its own cgroup, which holds nothing else): a failure of the run.
LEFT: list[str] = []


def _left_running(group: Path, grace: float = 5.0) -> list[str]:
    """The processes still in the run's ``group`` after ``grace`` s, each described, then killed (they are the
    run's own: the group holds nothing else), so none outlives the benchmark."""
    deadline = time.monotonic() + grace
    while (pids := (group / "cgroup.procs").read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.1)
    found = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid} {argv[:120]}")
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue
    while (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline + grace:
        time.sleep(0.05)
    return found


def _run(tree: Path, name: str, url: str, postmaster: int, *, collect_only: bool) -> dict[str, float] | None:
    group = CGROUP / f"bench-hundred-{os.getpid()}-{name}"
    group.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # a user's install keeps bytecode
    env.update(CORRAL_TEST_PG_URL=url, PYTHONPATH=str(tree / "src"))
    argv = [str(ROOT / ".venv/bin/python"), "-m", "pytest", "-n", "0", "-x", "-q", "-p", "no:cacheprovider", TEST]
    # The child joins the group before it runs pytest: everything it starts is counted, nothing of this process.
    script = f'echo $$ > "{group}/cgroup.procs" && exec "$@"'
    before, server_before, start = int((group / "cpuacct.usage").read_text()), _server_cpu(postmaster), time.monotonic()
    done = subprocess.run(
        ["sh", "-c", script, "sh", *argv, *(["--collect-only"] if collect_only else [])],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    time.sleep(0.5)  # the last backends reaped
    test = (int((group / "cpuacct.usage").read_text()) - before) / 1e9
    server = _server_cpu(postmaster) - server_before
    left = _left_running(group)
    if left:
        print(f"LEFT RUNNING by run {name}, killed: " + "; ".join(left), flush=True)
        LEFT.extend(left)
    try:
        group.rmdir()
    except OSError:
        pass
    if done.returncode != 0:  # said, and not counted (an older tree may have a flaky failure of its own)
        failed = [line for line in done.stdout.splitlines() if line.startswith("E ")][:3]
        print(f"FAILED run {name} in {tree}, not counted:", *failed, sep="\n  ", flush=True)
        return None
    return {"test": test, "server": server, "wall": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="a source tree to compare with (the baseline)")
    parser.add_argument("--after", type=Path, default=ROOT, help="the source tree measured (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not CGROUP.is_dir() or os.geteuid() != 0:
        raise SystemExit(f"needs root and a cgroup v1 cpuacct hierarchy at {CGROUP}")
    trees = {"after": args.after.resolve()} | ({"before": args.before.resolve()} if args.before else {})
    server = Server(fsync=False)
    results: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds):
            for label, tree in sorted(trees.items(), reverse=bool(r % 2)):  # interleaved, each first in turn
                floor = _run(tree, f"{label}-floor-{r}", server.url, server.postmaster(), collect_only=True)
                run = _run(tree, f"{label}-{r}", server.url, server.postmaster(), collect_only=False)
                if floor is None or run is None:
                    continue
                net = run["test"] + run["server"] - floor["test"] - floor["server"]
                results.setdefault(label, []).append(net)
                load = Path("/proc/loadavg").read_text().split()[:3]
                print(
                    f"{label:6s} round {r + 1}: test {run['test']:6.2f} s CPU + server {run['server']:5.2f} s"
                    f" - floor {floor['test'] + floor['server']:4.2f} s = {net:6.2f} s CPU; wall {run['wall']:5.1f} s"
                    f" (floor {floor['wall']:4.1f} s); load {' '.join(load)}",
                    flush=True,
                )
    finally:
        server.stop()
    for label, nets in results.items():
        print(f"{label}: median {statistics.median(nets):.2f} s CPU over {len(nets)} runs")
    print(f"Left running: {len(LEFT)} processes. {'FAIL' if LEFT else 'PASS'}")
    if "before" in results and "after" in results:
        cut = 1 - statistics.median(results["after"]) / statistics.median(results["before"])
        print(f"the test's CPU (test + server, less the floor) cut by {cut:.0%}")
    return 1 if LEFT else 0


if __name__ == "__main__":
    sys.exit(main())
