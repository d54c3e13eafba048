#!/usr/bin/env python
"""The test suite's wall time: the README's test command, timed, with its ten slowest tests.

Runs the pytest part of the README's test command (between ``<!-- test-command -->`` and the next
code block: ``.venv/bin/python -m pytest -n 5``) from the repository's root, exactly as written,
with ``--durations=10`` added so pytest names the slowest tests, in a process group of its own that
is killed whole at the end (a benchmark leaves no process behind). The floor beside it: the same
pytest collecting the suite without running it (``--collect-only -q``), the cost of starting
pytest, its workers' imports and the test files themselves.

Targets (issue 28): the whole command under 7 minutes on 2 cores, the slowest test under 30 s.

Usage::

    .venv/bin/python bench/bench_suite.py            # one whole run of the suite (~5-7 minutes)

Results are printed and written to bench/results/bench_suite.json; pytest's whole output (a failure's
traceback) to bench/results/bench_suite.out.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import RESULTS, ROOT, finish, load, machine

WALL_TARGET_S = 7 * 60
SLOWEST_TARGET_S = 30.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (call|setup|teardown)\s+(\S+)")
_SUMMARY = re.compile(r"(\d+) passed")
_FAILED = re.compile(r"(\d+) failed")


def readme_pytest() -> list[str]:
    """The pytest invocation of the README's test command (the last ``&&`` part)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- test-command -->", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    command = block.strip().splitlines()[0].split("&&")[-1].strip()
    argv = shlex.split(command)
    if "pytest" not in argv:
        raise SystemExit(f"the README's test command has no pytest: {command!r}")
    return argv


def timed(argv: list[str]) -> tuple[float, str, int]:
    """Run ``argv`` from the repository's root in a new process group; its wall time, output, exit code."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever a test left in the group
        except ProcessLookupError:
            pass
    return time.perf_counter() - start, out, proc.returncode


def main() -> int:
    argv = readme_pytest()
    env_note = "CI=true" if os.environ.get("CI") else "(CI not set)"
    print(f"Suite: {' '.join(argv)}  {env_note}", flush=True)
    before = load()
    floor_s, floor_out, _ = timed([*argv, "--collect-only", "-q"])
    collected = re.search(r"(\d+) tests? collected", floor_out)
    wall_s, out, code = timed([*argv, "--durations=10", "-q", "-rf", "-p", "no:cacheprovider"])
    slowest = [(float(m[1]), m[2], m[3]) for line in out.splitlines() if (m := _DURATION.match(line))][:10]
    passed = int(m[1]) if (m := _SUMMARY.search(out)) else 0
    failed = int(m[1]) if (m := _FAILED.search(out)) else 0

    print(f"\n  collect only (the floor)   {floor_s:7.1f} s  ({collected[1] if collected else '?'} tests)")
    print(f"  the whole suite            {wall_s:7.1f} s  ({passed} passed, {failed} failed, exit {code})")
    for line in out.splitlines():
        if line.startswith("FAILED "):
            print(f"  {line[:200]}")
    kept = RESULTS / "bench_suite.out"  # the whole output: a failure's traceback, kept to be read
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(out)
    if failed or code != 0:
        print(f"  pytest's whole output: {kept}")
    print("\n  ten slowest:")
    for seconds, when, test in slowest:
        print(f"    {seconds:6.1f} s  {when:8s} {test}")
    top = slowest[0][0] if slowest else 0.0
    ok = code == 0 and wall_s < WALL_TARGET_S and top < SLOWEST_TARGET_S
    print(
        f"\n  wall {wall_s / 60:.1f} min (target < {WALL_TARGET_S / 60:g} min), slowest {top:.1f} s "
        f"(target < {SLOWEST_TARGET_S:g} s)"
    )
    result = {
        "machine": machine(),
        "load_before": before,
        "argv": argv,
        "collect_only_s": round(floor_s, 1),
        "wall_s": round(wall_s, 1),
        "passed": passed,
        "failed": failed,
        "exit": code,
        "slowest": [{"seconds": s, "when": w, "test": t} for s, w, t in slowest],
    }
    return finish("bench_suite", result, ok)


if __name__ == "__main__":
    raise SystemExit(main())
