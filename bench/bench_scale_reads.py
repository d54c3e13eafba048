#!/usr/bin/env python
"""`corral list --active` with 5,000 active tasks and `corral show` of a task with 10,000 turns.

Both read commands must stay usable where a store is unusually wide (many tasks running
at once) or deep (one task with a very long history); neither may hide a task or a turn.

1. Two scratch stores beside one scratch repository (seed_store.py):

   * **wide**: 5,000 active tasks (3,500 working, each with a ``status.json`` naming this
     live process, and 1,500 interrupted), the usual 220 other non-terminal tasks and
     5,000 terminal ones (~10 turns per task);
   * **deep**: the benchmark store of bench_cli.py (10,000 tasks / 100,000 turns) in which
     ``bench-many-turns`` has 10,000 turns.

2. Runs, as separate processes from a bare spawner (see benchlib.Spawner), round-robin,
   ``--reps`` times each after ``--warmup`` untimed runs, bytecode cached:

   * ``corral list --active`` on the wide store (every one of the 5,000 rows must be there)
   * ``corral show bench-many-turns`` on the deep store (the text view)
   * ``corral show bench-many-turns --json`` on the deep store (never paged: all 10,000 turns
     must be there; reported, no target)
   * reference: ``python -c "import corral.cli.root"`` (interpreter and imports)

Targets: ``list --active`` at 5,000 active tasks and the text ``show`` of 10,000 turns each
under 250 ms median. Peak RSS is reported beside each (today's ``show`` of 10,000 turns:
about 71 MB).

Usage::

    .venv/bin/python bench/bench_scale_reads.py            # ~2 minutes (seeding ~20 s)
    .venv/bin/python bench/bench_scale_reads.py --reps 5 --active 2000

Results are printed and written to bench/results/bench_scale_reads.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import Command, expect_lines, measure, new_store, row, shows_turns
from benchlib import (
    corral_command,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import MANY_REF, Shape

TIME_TARGET_MS = 250.0


def all_turns(n: int) -> Any:
    def check(out: str) -> str | None:
        got = len(json.loads(out)["turns"])
        return None if got == n else f"expected {n} turns in the JSON, got {got}"

    return check


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=10, help="timed runs per command (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--active", type=int, default=5_000, help="active tasks in the wide store (default 5,000)")
    p.add_argument("--turns", type=int, default=10_000, help=f"turns of {MANY_REF} (default 10,000)")
    scratch_options(p)
    p.add_argument("--finished", type=int, default=5_000, help="finished tasks beside them (default 5,000)")
    p.add_argument("--deep-tasks", type=int, default=10_000, help="tasks in the deep store (default 10,000)")
    quick = {"reps": 1, "warmup": 0, "active": 50, "turns": 50, "finished": 50, "deep_tasks": 400}
    args = parse_args(p, quick, argv)

    base = scratch_dir("scale", args)
    scratch = base / "out"
    scratch.mkdir()
    cc = corral_command()
    result: dict[str, Any] = {
        "benchmark": "bench_scale_reads",
        "machine": machine(),
        "command": cc,
        "targets": {"median_ms": TIME_TARGET_MS},
        "load_before": load(),
    }
    ok = True
    try:
        repo = make_repo(base / "repo")
        working = round(args.active * 0.7)
        wide = Shape(working=working, interrupted=args.active - working)
        wide.tasks = wide.nonterminal + args.finished
        wide.turns = 10 * wide.tasks
        print(f"Seeding the wide store ({wide.tasks:,} tasks, {args.active:,} active) …", flush=True)
        _home, wide_env, wide_m = new_store(base, "wide", wide, repo)
        deep = Shape(tasks=args.deep_tasks, turns=10 * args.deep_tasks, big_turns=args.turns)
        print(f"Seeding the deep store ({deep.tasks:,} tasks, {MANY_REF} with {args.turns:,} turns) …", flush=True)
        _home, deep_env, deep_m = new_store(base, "deep", deep, repo)
        result["stores"] = {
            name: {k: m[k] for k in ("tasks", "by_status", "active", "turns", "db_bytes", "seconds")}
            for name, m in (("wide", wide_m), ("deep", deep_m))
        }
        many = deep_m["show"][MANY_REF]["turns"]
        list_name = f"list --active ({wide_m['active']:,} active)"
        show_name = f"show {MANY_REF} ({many:,} turns)"
        json_name = f"show {MANY_REF} --json ({many:,} turns)"
        commands = [
            Command(list_name, [*cc, "list", "--active"], wide_env, expect_lines(wide_m["active"])),
            Command(show_name, [*cc, "show", MANY_REF], deep_env, shows_turns(many)),
            Command(json_name, [*cc, "show", MANY_REF, "--json"], deep_env, all_turns(many)),
            Command(
                "bare interpreter (python -I -c 'import sqlite3')",
                [sys.executable, "-I", "-c", "import sqlite3"],
                hermetic_env(base / "home-ref", pycache=base / "pycache"),
            ),
            Command(
                "python -c 'import corral.cli.root'",
                [sys.executable, "-c", "import corral.cli.root"],
                hermetic_env(base / "home-ref", pycache=base / "pycache"),
            ),
        ]
        print(f"\nWhole-process runs ({args.reps} timed, {args.warmup} warm-up, round-robin):")
        stats = measure(commands, repo, args.reps, args.warmup, scratch)
        for name, s in stats.items():
            print(row(name, s, targets=False))
        verdicts = {}
        for name in (list_name, show_name):
            s = stats[name]
            s["time_pass"] = s["median_ms"] < TIME_TARGET_MS
            verdicts[name] = s["time_pass"]
            print(
                f"  {name}: median {s['median_ms']:.1f} ms (target < {TIME_TARGET_MS:g} ms)  {verdict(s['time_pass'])}"
            )
            ok &= s["time_pass"]
        result["commands"] = stats
        result["verdicts"] = verdicts
        floors = {name: stats[name]["median_ms"] for name in list(stats)[-2:]}
        report_floors(result, floors, "medians, measured round-robin with the commands above")
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_scale_reads", result, ok)


if __name__ == "__main__":
    sys.exit(main())
