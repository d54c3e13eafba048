#!/usr/bin/env python
"""Time to rest: from ``corral start`` to the task at rest for good, at corral's DEFAULT settings.

1. Makes a scratch git repository and CORRAL_HOME per case, and a ``command`` harness agent:
   - ``exit-1``: a program that exits 1 at once. Its turn is retried after 1 s and 2 s, ends as a
     crash loop at the third fast failure (``interrupted``), is auto-resumed once, and the same crash
     loop again trips the same-cause breaker.
   - ``hang``: a program that sleeps for ten minutes, with ``watchdog_timeout = 10`` (the only setting
     changed). The watchdog kills it, relaunches it once, kills it again; the turn parks
     ``interrupted`` with cause ``watchdog-no-progress`` and is not auto-resumed.

2. ``--reps`` times per case: runs ``corral start`` as a process (time 0), then reconciles every
   100 ms as any read does (``settle``, which auto-resumes), stamping the first moment the task reads
   ``interrupted`` and the moment it is at rest for good: not ``working`` and nothing would resume it
   (``auto_resume.resumable`` is False). Reports the agent turns, their attempts and the status
   changes, from corral's own records.

3. Stops any daemon a run started and checks that no process is left whose working directory is
   in the scratch directory.

3. ``--case claude-500`` (not run by default: at corral's default budget it retries for about an hour):
   the real Claude Code CLI pointed at a loopback model server that answers HTTP 500 to every request
   (bench/claude500.py). Records each attempt's start from the supervisor's ``status.json`` (polled every
   second) and from the turn's attempts as stored, ``corral show``'s retrying / "Stopped because" lines as
   they change, and when the task comes to rest, in which status; ``--observe`` caps the wait, after which
   the task's processes are stopped by the pids corral recorded. No target: the figures are reported.

Targets: ``exit-1`` reads interrupted within 10 s and is at rest within 60 s; ``hang`` is at rest
within 80 s.

Usage::

    .venv/bin/python bench/bench_time_to_rest.py            # ~1 minute
    .venv/bin/python bench/bench_time_to_rest.py --reps 3 --case exit-1
    .venv/bin/python bench/bench_time_to_rest.py --case claude-500 --observe 900   # 15 minutes of it

Results are printed and written to bench/results/bench_time_to_rest.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import (
    corral_command,
    drop_scratch,
    every,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
    verdict,
)

CASES: dict[str, dict[str, Any]] = {
    "exit-1": {
        "command": "sh -c 'echo broken >&2; exit 1'",
        "settings": {},
        "interrupted_target_s": 10.0,
        "rest_target_s": 60.0,
    },
    "hang": {
        "command": f"{sys.executable} -c 'import time; time.sleep(600)'",
        "settings": {"CORRAL_WATCHDOG_TIMEOUT": "10"},
        "interrupted_target_s": None,
        "rest_target_s": 80.0,
    },
}
#: Run only when asked (``--case claude-500``): see bench/claude500.py.
CLAUDE_500 = "claude-500"


def one_run(base: Path, case: str, n: int) -> dict[str, Any]:
    spec = CASES[case]
    home = base / f"{case}-{n}-home"
    repo = make_repo(base / f"{case}-{n}-repo")
    env = hermetic_env(home, base / "pycache", {"CORRAL_HARNESS": "command", "CORRAL_COMMAND": spec["command"]})
    env.pop("CORRAL_AUTO_RESUME", None)  # the default: auto-resume on, as a person runs corral
    env.update(spec["settings"])
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the in-process reads below take the same settings as the CLI
    try:
        return _measure(repo, env, case, n, spec)
    finally:
        subprocess.run([*corral_command(), "daemon", "stop"], cwd=repo, env=env, capture_output=True)
        os.environ.clear()
        os.environ.update(saved)


def _measure(repo: Path, env: dict[str, str], case: str, n: int, spec: dict[str, Any]) -> dict[str, Any]:
    from corral.domain.actors import Role
    from corral.domain.status import Status
    from corral.engine.operations.auto_resume import resumable
    from corral.engine.operations.refresh import settle
    from corral.engine.project import Project
    from corral.engine.resolve import resolve_task

    ref = f"{case}-run-{n}"
    subprocess.run([*corral_command(), "create", ref], cwd=repo, env=env, check=True, capture_output=True)
    began, began_wall = time.monotonic(), time.time()
    subprocess.run([*corral_command(), "start", ref], cwd=repo, env=env, check=True, capture_output=True)
    start_s = time.monotonic() - began
    project = Project.open(repo)
    seen_at = rest_at = None
    try:
        while time.monotonic() - began < 300:
            settle(project)
            with project.store.read() as tx:
                task = resolve_task(tx, ref)
            if task.status is not Status.WORKING and not resumable(project, task.id):
                seen_at = time.monotonic() - began
                break
            time.sleep(every(0.1, 0.5))  # each look a settle of the store
        with project.store.read() as tx:
            task = resolve_task(tx, ref)
            agent = [t for t in tx.turns(task.id) if t.role is Role.AGENT]
            moves = tx.status_changes(task.id)
    finally:
        project.close()
    changes = [f"{c.from_status.value if c.from_status else '-'}→{c.to_status.value}" for c in moves]
    # From corral's own records: when the task first read interrupted, and when it last moved (to rest).
    interrupted = [c.at.timestamp() - began_wall for c in moves if c.to_status is Status.INTERRUPTED]
    interrupted_at = interrupted[0] if interrupted else None
    if seen_at is not None and moves:
        rest_at = moves[-1].at.timestamp() - began_wall
    cause = task.resting_cause
    ok = rest_at is not None and rest_at <= spec["rest_target_s"]
    if spec["interrupted_target_s"] is not None:
        ok = ok and interrupted_at is not None and interrupted_at <= spec["interrupted_target_s"]
    return {
        "case": case,
        "status": task.status.value,
        "cause": cause.code if cause else None,
        "interrupted_s": round(interrupted_at, 2) if interrupted_at is not None else None,
        "at_rest_s": round(rest_at, 2) if rest_at is not None else None,
        "seen_at_rest_s": round(seen_at, 2) if seen_at is not None else None,
        "agent_turns": len(agent),
        "attempts": [len(t.attempts) for t in agent],
        "status_changes": changes,
        "start_s": round(start_s, 3),
        "ok": ok,
    }


def leftovers(base: Path) -> list[str]:
    """Processes whose working directory lies in the scratch directory (what a run left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(base)):
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            found.append(f"{entry.name}: {cmd[:120]}")
    return found


def main() -> int:
    p = scratch_options(
        argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    )
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--case", choices=(*CASES, CLAUDE_500), action="append")
    p.add_argument("--observe", type=float, default=4500.0, help="claude-500: stop watching after this many seconds")
    p.add_argument(
        "--budget-network",
        default=None,
        help="claude-500: a variant with this budget_network (seconds) instead of the default, to see it come to rest",
    )
    args = parse_args(p, {"case": ["exit-1"], "reps": 1})
    base = scratch_dir("time-to-rest", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "runs": []}
    ok = True
    try:
        for case in args.case or CASES:
            for n in range(1, args.reps + 1):
                if case == CLAUDE_500:
                    from claude500 import report, run_claude_500

                    settings = {"CORRAL_BUDGET_NETWORK": args.budget_network} if args.budget_network else {}
                    run = run_claude_500(base, n, args.observe, settings)
                    run["settings"] = settings
                    result["runs"].append(run)
                    report(run)
                    continue
                run = one_run(base, case, n)
                result["runs"].append(run)
                ok = ok and run["ok"]
                print(
                    f"{case:7} run {n}: interrupted at {run['interrupted_s']} s, at rest at {run['at_rest_s']} s "
                    f"(seen {run['seen_at_rest_s']} s) "
                    f"({run['status']}, {run['cause']}); agent turns {run['agent_turns']}, attempts {run['attempts']}"
                    f"   {verdict(run['ok'])}"
                )
                print(f"          {' '.join(run['status_changes'])}")
        floors = startup_floors(hermetic_env(base / "floor-home", base / "pycache"), base)
        report_floors(result, floors, "under every command; the design adds its waits: retries after 1 s and 2 s")
        time.sleep(1.0)
        left = leftovers(base)
        result["leftovers"] = left
        print(f"processes left behind: {len(left)}   {verdict(not left)}")
        for line in left:
            print(f"  {line}")
        ok = ok and not left
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_time_to_rest", result, ok)


if __name__ == "__main__":
    raise SystemExit(main())
