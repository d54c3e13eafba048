#!/usr/bin/env python
"""Start-up: how much of a read command is the interpreter and its imports, beside a bare interpreter.

1. Makes a scratch git repository and two CORRAL_HOMEs: a small store (20 tasks, see
   seed_store.py) and the benchmark store of bench_cli.py (10,000 tasks / 100,000 turns).
   Working tasks get a ``status.json`` naming this (live) process, so ``list`` takes the
   path it takes with running supervisors.

2. Runs, as separate processes, round-robin in one run (so background load hits all alike),
   ``--reps`` times each after ``--warmup`` untimed runs, each from a bare spawner (see
   benchlib.Spawner), with a bytecode cache as an installed corral has:

   * ``python -c "import sqlite3"`` (the same venv's interpreter: the floor)
   * ``corral list --active``        on the 20-task store
   * ``corral show bench-ten-turns`` on the 20-task store
   * ``corral list --active``        on the 10,000-task store
   * references: ``python -c pass``, ``python -c "import corral.cli.root"``

Targets: ``list --active`` on the 20-task store within 5x the bare interpreter's median
(the ratio of medians, measured side by side), and ``list --active`` on the 10,000-task
store under 75 ms median. ``show`` is reported as a ratio beside them.

Usage::

    .venv/bin/python bench/bench_startup.py            # ~1 minute (most of it seeding)
    .venv/bin/python bench/bench_startup.py --reps 40

Results are printed and written to bench/results/bench_startup.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import Command, expect_lines, expect_text, measure, new_store, row, shows_turns
from benchlib import (
    corral_command,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    parse_args,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import TEN_REF, Shape

RATIO_TARGET = 5.0
BIG_STORE_TARGET_MS = 75.0
# Where the 75 ms target was set, the bare interpreter took about 10 ms: the target was 7.5x it.
# Printed beside the absolute verdict (never instead of it) for a machine whose interpreter is slower.
REFERENCE_BARE_MS = 10.0

# 20 tasks: 12 not finished (2 working, 1 interrupted, 4 blocked, 1 conflict, 1 submitted,
# 3 backlog) and 8 terminal; the ten-turn task is one of the blocked.
SMALL = Shape(
    tasks=20,
    turns=120,
    working=2,
    interrupted=1,
    blocked=4,
    conflict=1,
    submitted=1,
    backlog=3,
    big_turns=20,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=20, help="timed runs per command (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the large store (default 10,000)")
    p.add_argument("--turns", type=int, default=100_000, help="turns in the large store (default 100,000)")
    scratch_options(p)
    args = parse_args(p, {"reps": 1, "warmup": 0, "tasks": 400, "turns": 3_000}, argv)

    base = scratch_dir("startup", args)
    scratch = base / "out"
    scratch.mkdir()
    cc = corral_command()
    result: dict[str, Any] = {
        "benchmark": "bench_startup",
        "machine": machine(),
        "command": cc,
        "targets": {"list_ratio": RATIO_TARGET, "list_large_store_median_ms": BIG_STORE_TARGET_MS},
        "load_before": load(),
    }
    ok = True
    try:
        repo = make_repo(base / "repo")
        print(f"Seeding a {SMALL.tasks}-task store and a {args.tasks:,}-task store …", flush=True)
        _home, small_env, small = new_store(base, "small", SMALL, repo)
        big_shape = Shape(tasks=args.tasks, turns=args.turns)
        _home, big_env, big = new_store(base, "large", big_shape, repo)
        result["stores"] = {
            name: {k: m[k] for k in ("tasks", "active", "turns", "db_bytes", "seconds")}
            for name, m in (("small", small), ("large", big))
        }
        ref_env = hermetic_env(base / "home-ref", pycache=base / "pycache")
        py = sys.executable
        ten = small["show"][TEN_REF]["turns"]
        commands = [
            Command("python -c 'import sqlite3'", [py, "-c", "import sqlite3"], ref_env),
            Command("list --active (20 tasks)", [*cc, "list", "--active"], small_env, expect_lines(small["active"])),
            Command(f"show {TEN_REF} (20 tasks)", [*cc, "show", TEN_REF], small_env, shows_turns(ten)),
            Command(
                f"list --active ({big['tasks']:,} tasks)",
                [*cc, "list", "--active"],
                big_env,
                expect_lines(big["active"]),
            ),
            Command("corral --help", [*cc, "--help"], small_env, expect_text("Usage:")),
            Command("corral --version", [*cc, "--version"], small_env, expect_text("corral")),
            Command("python -c pass", [py, "-c", "pass"], ref_env),
            Command("python -c 'import corral.cli.root'", [py, "-c", "import corral.cli.root"], ref_env),
        ]
        print(f"\nWhole-process runs ({args.reps} timed, {args.warmup} warm-up, round-robin):")
        stats = measure(commands, repo, args.reps, args.warmup, scratch)
        for name, s in stats.items():
            print(row(name, s, targets=False))
        bare = stats[commands[0].name]["median_ms"]
        list_small = stats[commands[1].name]["median_ms"]
        show_small = stats[commands[2].name]["median_ms"]
        list_big = stats[commands[3].name]["median_ms"]
        ratio = list_small / bare
        show_ratio = show_small / bare
        ratio_ok = ratio <= RATIO_TARGET
        big_ok = list_big < BIG_STORE_TARGET_MS
        # Issue 34: --help, --version, list and show each within 5x the bare interpreter, in the same run.
        each = {
            "list": ratio,
            "show": show_ratio,
            "--help": stats["corral --help"]["median_ms"] / bare,
            "--version": stats["corral --version"]["median_ms"] / bare,
        }
        each_ok = all(r <= RATIO_TARGET for r in each.values())
        ok = ratio_ok and big_ok and each_ok
        print(
            f"\n  list --active (20 tasks) / bare interpreter: {ratio:.2f}x  (target ≤ {RATIO_TARGET:g}x)  "
            f"{verdict(ratio_ok)}"
        )
        print(
            "  each / bare interpreter ("
            + ", ".join(f"{name} {r:.2f}x" for name, r in each.items())
            + f"; target each ≤ {RATIO_TARGET:g}x, floor `python -c 'import sqlite3'` {bare:.1f} ms)  "
            + verdict(each_ok)
        )
        print(
            f"  list --active ({big['tasks']:,} tasks) median: {list_big:.1f} ms  "
            f"(target < {BIG_STORE_TARGET_MS:g} ms)  {verdict(big_ok)}"
        )
        print(
            f"  list --active ({big['tasks']:,} tasks) / bare interpreter: {list_big / bare:.2f}x  (reported: the "
            f"target was {BIG_STORE_TARGET_MS / REFERENCE_BARE_MS:.1f}x where the bare interpreter took "
            f"~{REFERENCE_BARE_MS:g} ms; here it takes {bare:.1f} ms)"
        )
        result["commands"] = stats
        result["ratios"] = {
            "list_active_small_over_bare": round(ratio, 2),
            "show_small_over_bare": round(show_ratio, 2),
            "list_active_large_over_bare": round(list_big / bare, 2),
            **{f"{name}_over_bare": round(r, 2) for name, r in each.items()},
        }
        result["verdicts"] = {"list_ratio": ratio_ok, "list_large_store": big_ok}
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_startup", result, ok)


if __name__ == "__main__":
    sys.exit(main())
