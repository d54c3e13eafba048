#!/usr/bin/env python
"""Whole-process latency and memory of the read commands people run most.

1. Makes a scratch git repository and CORRAL_HOME, seeds the store (10,000 tasks,
   100,000 turns by default, see seed_store.py), and runs, as separate processes,

   * ``corral list --active``
   * ``corral show bench-ten-turns``   (a task with 10 turns)
   * ``corral show bench-many-turns``  (a task with 2,000 turns)

   ``--reps`` times each (after ``--warmup`` untimed runs), round-robin. Each run is
   timed from spawn to reap, and its peak RSS is the child's own ``ru_maxrss`` from
   ``os.wait4``. Children are spawned by a bare interpreter (see benchlib.Spawner),
   so the benchmark's own memory does not leak into the figure.
   Reported: median and p90 wall time, peak RSS, median CPU (user+sys).
   Targets: median and p90 under 250 ms; peak RSS under 80 MB.

   Runs use a bytecode cache (in a scratch PYTHONPYCACHEPREFIX, warmed by the
   warm-up runs), as an installed corral has; one reference row shows
   ``list --active`` with corral's modules compiled from source on every run
   (PYTHONDONTWRITEBYTECODE=1 and no __pycache__ in src/).

2. Growth: ``corral list --active`` on stores with 1,000 / 10,000 / 50,000 terminal
   tasks and the same non-terminal tasks (100 active). The stores are measured
   round-robin, so background load hits all of them alike. Target: the largest
   store's median within 1.25x of the smallest's.

3. For attribution it also times the interpreter alone (``python -c pass``) and
   importing the CLI (``python -c "import corral.cli.root"``).

The load average before and after is recorded: on a busy machine wall times are
inflated (CPU times much less so).

Usage::

    .venv/bin/python bench/bench_cli.py                 # everything (2-3 minutes)
    .venv/bin/python bench/bench_cli.py --reps 5 --scale 1000 10000
    .venv/bin/python bench/bench_cli.py --no-scale

Results are printed and written to bench/results/bench_cli.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    Spawner,
    corral_command,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    percentile,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import MANY_REF, TEN_REF, Shape, seed, validate

TIME_TARGET_MS = 250.0
RSS_TARGET_MB = 80.0
GROWTH_TARGET = 1.25

Check = Callable[[str], str | None]


@dataclass
class Command:
    name: str
    args: list[str]
    env: dict[str, str]
    check: Check | None = None
    rc: int = 0  # the exit code the run must end with


def measure(commands: list[Command], cwd: Path, reps: int, warmup: int, scratch: Path) -> dict[str, dict[str, Any]]:
    """Run each command warmup + reps times, round-robin, each from a small spawner; check each output."""
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in commands}
    out, err = scratch / "stdout", scratch / "stderr"
    spawners: dict[int, Spawner] = {}
    try:
        for c in commands:
            spawners[id(c)] = Spawner(c.env, cwd)
        for i in range(warmup + reps):
            for c in commands:
                r = spawners[id(c)].run(c.args, out, err)
                stdout = out.read_text(errors="replace")
                if r["rc"] != c.rc:
                    raise SystemExit(
                        f"{c.name} exited {r['rc']}, not {c.rc}:\n{err.read_text(errors='replace')[-2000:]}"
                    )
                problem = c.check(stdout) if c.check is not None else None
                if problem:
                    raise SystemExit(f"{c.name}: unexpected output: {problem}\n{stdout[:1000]}")
                r["stdout_lines"] = stdout.count("\n")
                if i >= warmup:
                    runs[c.name].append(r)
    finally:
        for s in spawners.values():
            s.close()
    return {name: summarize(rs) for name, rs in runs.items()}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [r["ms"] for r in runs]
    rss = [r["rss_mb"] for r in runs]
    return {
        "reps": len(runs),
        "median_ms": round(median(ms), 1),
        "p90_ms": round(percentile(ms, 90), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
        "peak_rss_mb": round(max(rss), 1),
        "median_rss_mb": round(median(rss), 1),
        "median_cpu_ms": round(median([r["user_ms"] + r["sys_ms"] for r in runs]), 1),
        "stdout_lines": runs[-1]["stdout_lines"],
        "all_ms": [round(x, 1) for x in ms],
    }


def expect_lines(n: int) -> Check:
    def check(out: str) -> str | None:
        got = out.count("\n")
        return None if got == n else f"expected {n} lines, got {got}"

    return check


def expect_text(*needles: str) -> Check:
    def check(out: str) -> str | None:
        missing = [n for n in needles if n not in out]
        return f"missing {missing}" if missing else None

    return check


def shows_turns(turns: int, *also: str) -> Check:
    """The timeline of a task with ``turns`` turns, each message answered: its last numbered turn shown
    (and each of ``also``).

    The timeline numbers exchanges (a person's message and the agent's answer are one turn), so
    that is ``turns / 2``; a timeline numbering every turn shows ``turns``.
    """
    needles = (f"turn {turns} ·", f"turn {(turns + 1) // 2} ·")

    def check(out: str) -> str | None:
        if not any(n in out for n in needles):
            return f"missing any of {list(needles)}"
        missing = [n for n in also if n not in out]
        return f"missing {missing}" if missing else None

    return check


def new_store(base: Path, name: str, shape: Shape, repo: Path) -> tuple[Path, dict[str, str], dict[str, Any]]:
    """A fresh CORRAL_HOME for ``repo``, its database located with ``corral paths --json``, seeded."""
    home = base / f"home-{name}"
    env = hermetic_env(home, pycache=base / "pycache")
    out = subprocess.run([*corral_command(), "paths", "--json"], env=env, cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"corral paths failed: {out.stderr}")
    db = Path(json.loads(out.stdout)["paths"]["database"])
    manifest = seed(db, shape, live_pid=os.getpid())
    return home, env, manifest


def row(label: str, s: dict[str, Any], targets: bool = True) -> str:
    line = (
        f"  {label:<36} median {s['median_ms']:6.1f} ms  p90 {s['p90_ms']:6.1f} ms  "
        f"peak RSS {s['peak_rss_mb']:5.1f} MB  (CPU {s['median_cpu_ms']:5.1f} ms)"
    )
    if targets:
        t_ok = s["median_ms"] < TIME_TARGET_MS and s["p90_ms"] < TIME_TARGET_MS
        m_ok = s["peak_rss_mb"] < RSS_TARGET_MB
        line += f"  time {verdict(t_ok)}  memory {verdict(m_ok)}"
        s["time_pass"], s["memory_pass"] = t_ok, m_ok
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=20, help="timed runs per command (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the main store (default 10,000)")
    p.add_argument("--turns", type=int, default=100_000, help="turns in the main store (default 100,000)")
    p.add_argument("--big-turns", type=int, default=2_000, help=f"turns of {MANY_REF} (default 2,000)")
    p.add_argument("--scale", type=int, nargs="*", default=[1_000, 10_000, 50_000], help="terminal-task counts")
    p.add_argument("--scale-turns-per-task", type=float, default=10.0, help="turns per task in the scale stores")
    p.add_argument("--no-scale", action="store_true", help="skip the growth runs")
    scratch_options(p)
    args = parse_args(
        p, {"reps": 1, "warmup": 0, "tasks": 400, "turns": 3_000, "big_turns": 50, "no_scale": True}, argv
    )

    base = scratch_dir("cli", args)
    scratch = base / "out"
    scratch.mkdir()
    cc = corral_command()
    result: dict[str, Any] = {
        "benchmark": "bench_cli",
        "machine": machine(),
        "command": cc,
        "targets": {"time_ms": TIME_TARGET_MS, "rss_mb": RSS_TARGET_MB, "growth": GROWTH_TARGET},
        "load_before": load(),
    }
    ok = True
    try:
        repo = make_repo(base / "repo")

        # -- reference: what a process costs before corral does anything -----------------------
        ref_env = hermetic_env(base / "home-ref", pycache=base / "pycache")
        ref = measure(
            [
                Command("python -c pass", [sys.executable, "-c", "pass"], ref_env),
                Command("import corral.cli.root", [sys.executable, "-c", "import corral.cli.root"], ref_env),
            ],
            repo,
            args.reps,
            args.warmup,
            scratch,
        )
        print(f"Load average {result['load_before']} on {os.cpu_count()} CPUs.\n\nReference (no targets):")
        for name, s in ref.items():
            print(row(name, s, targets=False))
        result["reference"] = ref

        # -- the main store ---------------------------------------------------------------------
        shape = Shape(tasks=args.tasks, turns=args.turns, big_turns=args.big_turns)
        print(f"\nSeeding {shape.tasks:,} tasks / {shape.turns:,} turns …", flush=True)
        home, env, manifest = new_store(base, "main", shape, repo)
        check = validate(manifest["database"])
        manifest["validation"] = check
        if check["problem_count"]:
            raise SystemExit(f"seeded store failed validation: {check['problems']}")
        print(
            f"  seeded in {manifest['seconds']} s: {manifest['by_status']}, {manifest['turns']:,} turns, "
            f"{manifest['attempts']:,} attempts, {manifest['status_changes']:,} status changes, "
            f"{manifest['db_bytes'] / 1e6:.0f} MB"
        )
        result["store"] = manifest
        ten, many = manifest["show"][TEN_REF]["turns"], manifest["show"][MANY_REF]["turns"]
        commands = [
            Command("list --active", [*cc, "list", "--active"], env, expect_lines(manifest["active"])),
            Command(f"show {TEN_REF} ({ten} turns)", [*cc, "show", TEN_REF], env, shows_turns(ten)),
            Command(f"show {MANY_REF} ({many} turns)", [*cc, "show", MANY_REF], env, shows_turns(many)),
        ]
        print(f"\nWhole-process runs ({args.reps} timed, {args.warmup} warm-up, round-robin):")
        main_stats = measure(commands, repo, args.reps, args.warmup, scratch)
        for name, s in main_stats.items():
            print(row(name, s))
            ok &= s["time_pass"] and s["memory_pass"]
        result["commands"] = main_stats

        # corral's own modules compiled from source on every run (the standard library and
        # site-packages keep their installed .pyc): a checkout run with PYTHONDONTWRITEBYTECODE=1.
        nocache_env = {k: v for k, v in env.items() if k != "PYTHONPYCACHEPREFIX"} | {"PYTHONDONTWRITEBYTECODE": "1"}
        nocache = measure(
            [Command("list --active", [*cc, "list", "--active"], nocache_env, expect_lines(manifest["active"]))],
            repo,
            args.reps,
            args.warmup,
            scratch,
        )["list --active"]
        print("\nReference (no targets):")
        print(row("list --active, no bytecode cache", nocache, targets=False))
        result["reference"]["list --active without bytecode cache"] = nocache

        # Naming a task by a prefix (resolve_task → match_tasks) and mistyping it (no match →
        # "did you mean", difflib over every ref): both read every task, so they grow with the store.
        # The typo is of a ref the seeder's vocabulary makes (near many similar refs, as in real use).
        typo = "fix-the-login-timeot"
        lookups = measure(
            [
                Command(f"show {TEN_REF[:9]} (a prefix)", [*cc, "show", TEN_REF[:9]], env, shows_turns(ten)),
                Command(f"show {typo} (a typo)", [*cc, "show", typo], env, None, rc=4),
            ],
            repo,
            args.reps,
            args.warmup,
            scratch,
        )
        for name, s in lookups.items():
            print(row(name, s, targets=False))
        result["reference"].update(lookups)
        shutil.rmtree(home, ignore_errors=True)

        # -- growth with terminal tasks -----------------------------------------------------------
        if not args.no_scale and args.scale:
            print("\n`list --active` as terminal tasks grow (same non-terminal tasks), measured round-robin:")
            growth: dict[str, Any] = {}
            stores: dict[str, dict[str, Any]] = {}
            scale_cmds = []
            for terminal in args.scale:
                s_shape = Shape(big_turns=args.big_turns)
                s_shape.tasks = terminal + s_shape.nonterminal
                s_shape.turns = int(args.scale_turns_per_task * s_shape.tasks)
                print(f"  seeding {s_shape.tasks:,} tasks / {s_shape.turns:,} turns …", flush=True)
                _home, s_env, m = new_store(base, f"t{terminal}", s_shape, repo)
                stores[str(terminal)] = {
                    k: m[k] for k in ("tasks", "terminal", "active", "turns", "db_bytes", "seconds")
                }
                scale_cmds.append(Command(str(terminal), [*cc, "list", "--active"], s_env, expect_lines(m["active"])))
            stats = measure(scale_cmds, repo, args.reps, args.warmup, scratch)
            for terminal in args.scale:
                s = stats[str(terminal)]
                s["store"] = stores[str(terminal)]
                print(row(f"{terminal:>6,} terminal ({s['store']['tasks']:,} tasks)", s))
                ok &= s["time_pass"] and s["memory_pass"]
                growth[str(terminal)] = s
            smallest, largest = growth[str(min(args.scale))], growth[str(max(args.scale))]
            ratio = largest["median_ms"] / smallest["median_ms"]
            cpu_ratio = largest["median_cpu_ms"] / smallest["median_cpu_ms"]
            flat = ratio <= GROWTH_TARGET
            ok &= flat
            print(
                f"  growth {max(args.scale):,} vs {min(args.scale):,} terminal tasks: median wall ratio {ratio:.3f} "
                f"(CPU ratio {cpu_ratio:.3f}; target ≤ {GROWTH_TARGET})  {verdict(flat)}"
            )
            result["growth"] = {
                "runs": growth,
                "ratio": round(ratio, 3),
                "cpu_ratio": round(cpu_ratio, 3),
                "pass": flat,
            }
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_cli", result, ok)


if __name__ == "__main__":
    sys.exit(main())
