"""Every benchmark of ``bench/run_all.sh`` runs whole in its quick mode and leaves no process behind.

A benchmark starts daemons, supervisors, agents, servers and browsers; one that leaves any of
them running spoils every figure measured after it. Each is run here with ``--quick`` (tiny
sizes, no verdict on its targets, no results file) under a mark in its environment that every
process it starts inherits; once it has exited, no process of this user may carry the mark.
The figures themselves are never checked here (timings live in the benchmarks).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402

#: What run_all.sh runs that has no quick mode: the store seeder, which starts no process, and
#: the benchmarks whose quick mode is another issue's.
NO_QUICK = {"seed_store.py", "bench_incident_scan.py"}


def run_all_benchmarks() -> list[str]:
    text = (BENCH / "run_all.sh").read_text()
    return [name for name in re.findall(r"^run bench/(\S+\.py)", text, re.M) if name not in NO_QUICK]


def has_quick(script: Path) -> bool:
    """Whether the benchmark parses its options with ``benchlib.parse_args`` (which gives ``--quick``)."""
    return re.search(r"(?<![.\w])parse_args\(", script.read_text()) is not None


def run_marked(args: list[str], mark: str, out: Path, timeout: float = 300) -> tuple[int, str]:
    """(exit code, stdout and stderr): into a file, which a process left behind cannot hold open."""
    env = {**os.environ, benchlib.RUN_MARK: mark}
    with out.open("w") as f:
        code = subprocess.run(args, env=env, cwd=BENCH.parent, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    return code.returncode, out.read_text(errors="replace")


def left_running(mark: str) -> list[str]:
    """What carries the mark and still runs: killed here, and returned for the failure."""
    left = benchlib.survivors(mark)
    for pid, _ in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return [f"{pid}: {cmdline}" for pid, cmdline in left]


@pytest.mark.parametrize("script", run_all_benchmarks())
def test_a_benchmark_runs_whole_in_its_quick_mode_and_leaves_nothing_running(script: str, tmp_path: Path) -> None:
    mark = f"test-{uuid.uuid4().hex}"
    code, out = run_marked([sys.executable, str(BENCH / script), "--quick"], mark, tmp_path / "out.txt")
    left = left_running(mark)
    assert not left, f"{script} left running: {left}"
    assert code == 0, f"{script} exited {code}:\n{out[-5000:]}"
    assert "Nothing this run started still runs." in out  # its own end check ran


def test_every_benchmark_of_run_all_has_a_quick_mode() -> None:
    for script in run_all_benchmarks():
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
    """The end check is real: a detached child that outlives the run is named, killed, and fails it."""
    mark = f"test-{uuid.uuid4().hex}"
    code, out = run_marked([sys.executable, "-c", _LEAKER, str(BENCH)], mark, tmp_path / "out.txt", timeout=60)
    assert code == 1, out
    assert "Left running at the end (now killed) FAIL" in out and "sleep 300" in out
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
