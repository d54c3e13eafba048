"""accept of a task with 200 changed files over 50 commits, without a pre-accept turn.

Each run builds a task the way corral does (``corral create`` and ``corral start`` with
the scripted fake agent as Claude Code), then has the fake agent make 50 commits that
change 200 files in all, and times ``corral accept`` as a whole process: pre-flight,
the squash with git's plumbing, verification, bringing the checked-out target along,
and archiving. Target: under 2 s.

    .venv/bin/python bench/bench_accept.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import corral_command, hermetic_env, machine, make_repo, median, percentile, verdict, write_results

TARGET_S = 2.0
FILES, COMMITS = 200, 50


def scenario() -> dict[str, object]:
    steps: list[dict[str, object]] = [{"init": True}]
    per_commit = FILES // COMMITS
    for c in range(COMMITS):
        for f in range(per_commit):
            n = c * per_commit + f
            steps.append({"write": {"path": f"pkg/mod_{n:03d}.py", "content": f"VALUE = {n}\n" * 20}})
        steps.append({"commit": f"change {c}"})
    steps.append({"result": f"{FILES} files over {COMMITS} commits"})
    return {"invocations": [steps]}


def one_run(tmp: Path, index: int) -> float:
    root = tmp / f"run{index}"
    repo = make_repo(root / "repo")
    env = hermetic_env(root / "home", pycache=tmp / "pycache")
    scenario_path = root / "scenario.json"
    scenario_path.write_text(json.dumps(scenario()))
    from corral.testing.fake_agent import wrapper_script

    env.update(
        {
            "CORRAL_CLAUDE_BIN": str(wrapper_script(root / "bin")),
            "CORRAL_FAKE_SCENARIO": str(scenario_path),
            "CORRAL_FAKE_RECORD": str(root / "record"),
        }
    )
    cmd = corral_command()
    subprocess.run([*cmd, "create", "Big change", "--ref", "big"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run([*cmd, "start", "big", "--wait"], cwd=repo, env=env, check=True, capture_output=True)
    count = subprocess.run(
        ["git", "rev-list", "--count", "main..corral/big"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert int(count) == COMMITS, count
    began = time.perf_counter()
    done = subprocess.run([*cmd, "accept", "big"], cwd=repo, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    assert done.returncode == 0, done.stderr
    changed = subprocess.run(
        ["git", "diff", "--name-only", "main^", "main"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(changed) == FILES, len(changed)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-accept-") as tmp:
        times = [one_run(Path(tmp), i) for i in range(args.runs)]
    med, p90 = median(times), percentile(times, 90)
    ok = med < TARGET_S
    print(
        f"accept, {FILES} files over {COMMITS} commits: median {med * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms "
        f"(target < {TARGET_S:.0f} s) {verdict(ok)}"
    )
    write_results(
        "accept", {"machine": machine(), "runs": times, "median_s": med, "p90_s": p90, "target_s": TARGET_S, "pass": ok}
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
