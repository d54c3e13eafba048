#!/usr/bin/env python
"""A usage limit's reset: how soon the first and the last of the waiting tasks call their harness again.

1. Makes a scratch git repository and CORRAL_HOME, and the scripted fake agent of the tests
   (``corral.testing.fake_agent``, speaking Claude Code's stream-json) as ``claude``: its first
   invocation answers ``Claude AI usage limit reached|<reset>``, every later one works at once
   (a model response, then its result).

2. Creates ``--tasks`` tasks and starts the first; once it reads ``working(waiting: usage
   limit …)`` starts the rest, which join the pause without calling the harness. The reset is
   ``--lead`` seconds after the first start. Every task runs under its own real supervisor.

3. From the fake agent's own record of each invocation (its wall-clock start), it measures the
   reset → the first relaunch (the one that goes first) and → the last of them (the others go
   once the first got through), and the reset → every task ``blocked``. It checks nobody called
   the harness before the reset and every task ended ``blocked`` with the answer.

No target is set by the issue: the figures are reported, with the floors measured in the same run (the bare
interpreter, ``corral --version``). Usage::

    .venv/bin/python bench/bench_usage_reset.py              # ~20 s
    .venv/bin/python bench/bench_usage_reset.py --tasks 20 --reps 3

Results are printed and written to bench/results/bench_usage_reset.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from benchlib import (
    corral_command,
    drop_scratch,
    every,
    fake_claude,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
    stop_daemon,
)

THROUGH = [{"init": True}, {"text": "back at it"}, {"result": "Done."}]


def one_run(base: Path, n: int, tasks: int, lead: float) -> dict[str, Any]:
    run = base / f"run-{n}"
    repo = make_repo(run / "repo")
    env = hermetic_env(run / "home", pycache=base / "pycache")

    def arm() -> tuple[Path, int]:
        """The agent's script, with the reset ``lead`` seconds from now (the tasks made, the first about to start)."""
        reset = int(time.time() + lead) + 1
        limit = [{"init": True}, {"result": f"Claude AI usage limit reached|{reset}", "is_error": True}]
        return fake_claude(run / "agent", env, {"invocations": [limit], "default": THROUGH}), reset

    arm()  # the environment the tasks are made in; armed again, for its reset, just before the first start
    try:
        return _run(repo, env, arm, corral_command(), tasks, lead)
    finally:
        stop_daemon(env, repo)


def _run(
    repo: Path, env: dict[str, str], arm: Callable[[], tuple[Path, int]], cc: list[str], tasks: int, lead: float
) -> Any:

    def corral(*args: str) -> Any:
        out = subprocess.run([*cc, *args, "--json"], cwd=repo, env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    refs = [f"waiting-{i:02d}" for i in range(tasks)]
    for ref in refs:
        corral("create", f"Wait for the reset {ref}", "--ref", ref)

    def rows() -> dict[str, Any]:
        return {t["ref"]: t for t in corral("list", "--all")["tasks"]}

    def until(check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {rows()}")
            time.sleep(every(0.1, 0.5))  # each look a `corral list`

    record, reset = arm()
    corral("start", refs[0])

    def first_paused_or_done() -> bool:
        """The first task waiting on the limit; or blocked already (a machine too slow for the lead: not correct)."""
        row = rows()[refs[0]]
        return row["status"] == "blocked" or str(row.get("substate")).startswith("waiting")

    until(first_paused_or_done, max(lead, 30.0))
    for ref in refs[1:]:
        corral("start", ref)
    waited: set[str] = set()

    def each_waited_or_done() -> bool:
        """Every task seen waiting, or already past it: a slow look may miss a wait the reset ended."""
        now = rows()
        waited.update(ref for ref, r in now.items() if str(r.get("substate")).startswith("waiting"))
        return all(ref in waited or r["status"] == "blocked" for ref, r in now.items())

    until(each_waited_or_done, max(lead, 30.0))
    waited_before_reset = time.time() < reset and waited == set(refs)
    if benchlib.QUICK:  # nothing moves before the reset: a quick run looks from then on
        time.sleep(max(0.0, reset - time.time()))
    until(lambda: all(r["status"] == "blocked" for r in rows().values()), 120)
    all_blocked = time.time()
    calls = [json.loads(line) for line in (record / "invocations.jsonl").read_text().splitlines()]
    after = sorted(c["at"] for c in calls[1:])
    done = [rows()[ref] for ref in refs]
    return {
        "tasks": tasks,
        "reset_epoch": reset,
        "harness_calls": len(calls),
        "reset_to_first_relaunch_s": round(after[0] - reset, 3),
        "reset_to_last_relaunch_s": round(after[-1] - reset, 3),
        "reset_to_all_blocked_s": round(all_blocked - reset, 3),
        "correct": waited_before_reset
        and len(calls) == tasks + 1
        and all(at >= reset for at in after)
        and all(r["status"] == "blocked" for r in done),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10, help="tasks waiting on one account (default 10)")
    p.add_argument("--reps", type=int, default=1, help="runs (default 1)")
    p.add_argument("--lead", type=float, default=12.0, help="seconds from the first start to the reset (default 12)")
    scratch_options(p)
    args = parse_args(p, {"tasks": 2, "reps": 1, "lead": 10.0}, argv)
    base = scratch_dir("usage-reset", args)
    result: dict[str, Any] = {"benchmark": "bench_usage_reset", "machine": machine(), "load_before": load()}
    ok = True
    try:
        runs = [one_run(base, n, args.tasks, args.lead) for n in range(args.reps)]
        result["runs"] = runs
        ok = all(r["correct"] for r in runs)
        first = median([r["reset_to_first_relaunch_s"] for r in runs])
        last = median([r["reset_to_last_relaunch_s"] for r in runs])
        blocked = median([r["reset_to_all_blocked_s"] for r in runs])
        print(f"{args.tasks} tasks on one account, {args.reps} run(s) (medians):")
        print(f"  reset → the first relaunch:      {first:6.2f} s")
        print(f"  reset → the last relaunch:       {last:6.2f} s")
        print(f"  reset → every task blocked:      {blocked:6.2f} s")
        print(f"  harness calls per run: {[r['harness_calls'] for r in runs]} (1 limit + 1 per task)")
        print(f"  correct (nobody before the reset, all blocked): {ok}")
        result["medians"] = {"first_relaunch_s": first, "last_relaunch_s": last, "all_blocked_s": blocked}
        env = hermetic_env(base / "floor-home", pycache=base / "pycache")
        report_floors(result, startup_floors(env, base), "what every relaunch's supervisor and agent start stands on")
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_usage_reset", result, ok)


if __name__ == "__main__":
    sys.exit(main())
