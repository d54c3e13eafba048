#!/usr/bin/env python
"""Start-up: how much of a command is the interpreter and its imports, beside a bare interpreter.

1. Makes a scratch git repository and two CORRAL_HOMEs: a small store (20 tasks, see
   seed_store.py) and the benchmark store of bench_cli.py (10,000 tasks / 100,000 turns).
   Working tasks get a ``status.json`` naming this (live) process, so ``list`` takes the
   path it takes with running supervisors. Writes an empty Pi log and a small one (a tool
   call retried, one failing three times).

2. Runs, as separate processes, round-robin in one run (so background load hits all alike),
   ``--reps`` times each after ``--warmup`` untimed runs, each from a bare spawner (see
   benchlib.Spawner), with a bytecode cache as an installed corral has, in a terminal of
   120 columns (``COLUMNS``, as benchlib.hermetic_env sets it):

   * ``python -c "import sqlite3"`` (the same venv's interpreter: the floor)
   * ``corral --help``, ``corral --version``
   * ``corral list --active``        on the 20-task store
   * ``corral show bench-ten-turns`` on the 20-task store
   * ``corral list --active``        on the 10,000-task store
   * ``corral failures --log PATH --harness pi --json`` on the empty and the small log
   * references: ``python -c pass``, ``python -c "import corral"`` (the package: msgspec),
     ``corral --help`` at 90 columns (a width whose text corral does not keep: click writes it)

Targets (issue 34): ``--help``, ``--version``, ``list --active`` and ``show`` on the 20-task
store each within 5x the bare interpreter's median (the ratio of medians, measured side by
side), one verdict each; and ``list --active`` on the 10,000-task store under 75 ms median.
``failures --log`` is reported as a ratio beside them (its scan has its own benchmark,
bench_incident_scan.py).

Usage::

    .venv/bin/python bench/bench_startup.py            # ~1-2 minutes (most of it seeding)
    .venv/bin/python bench/bench_startup.py --reps 40

Results are printed and written to bench/results/bench_startup.json.
"""

from __future__ import annotations

import argparse
import json
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


def pi_log(path: Path) -> Path:
    """A small Pi ``--mode json`` log: a command that failed and passed on its retry, one that failed thrice."""
    calls = [("make test", True), ("make test", False), ("make lint", True), ("make lint", True), ("make lint", True)]
    events: list[dict[str, Any]] = []
    for n, (command, failed) in enumerate(calls):
        start = {
            "type": "tool_execution_start",
            "toolCallId": f"t{n}",
            "toolName": "bash",
            "args": {"command": command},
        }
        result = {"content": [{"type": "text", "text": f"{command}: {'FAILED' if failed else 'ok'}"}]}
        end = {"type": "tool_execution_end", "toolCallId": f"t{n}", "toolName": "bash", "result": result}
        events += [start, {**end, "isError": failed}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


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
        "targets": {"each_over_bare": RATIO_TARGET, "list_large_store_median_ms": BIG_STORE_TARGET_MS},
        "load_before": load(),
    }
    ok = False
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
        narrow_env = {**small_env, "COLUMNS": "90"}
        empty_log, small_log = base / "empty.log", pi_log(base / "small.log")
        empty_log.write_text("")
        py = sys.executable
        ten = small["show"][TEN_REF]["turns"]
        bare = Command("python -c 'import sqlite3'", [py, "-c", "import sqlite3"], ref_env)
        # The four start-up targets, each measured beside the same run's floor.
        targets = {
            "--help": Command("corral --help", [*cc, "--help"], small_env, expect_text("Usage:", "Commands:")),
            "--version": Command("corral --version", [*cc, "--version"], small_env, expect_text("corral ")),
            "list": Command(
                "list --active (20 tasks)", [*cc, "list", "--active"], small_env, expect_lines(small["active"])
            ),
            "show": Command(f"show {TEN_REF} (20 tasks)", [*cc, "show", TEN_REF], small_env, shows_turns(ten)),
        }
        big_list = Command(
            f"list --active ({big['tasks']:,} tasks)", [*cc, "list", "--active"], big_env, expect_lines(big["active"])
        )
        log_of = {
            name: Command(
                f"failures --log ({name} log)",
                [*cc, "failures", "--log", str(log), "--harness", "pi", "--json"],
                small_env,
                expect_text('"failures"'),
            )
            for name, log in (("empty", empty_log), ("small", small_log))
        }
        references = [
            Command("python -c pass", [py, "-c", "pass"], ref_env),
            Command("python -c 'import corral'", [py, "-c", "import corral"], ref_env),
            Command("corral --help (90 columns: click)", [*cc, "--help"], narrow_env, expect_text("Usage:")),
        ]
        commands = [bare, *targets.values(), big_list, *log_of.values(), *references]
        print(f"\nWhole-process runs ({args.reps} timed, {args.warmup} warm-up, round-robin):")
        stats = measure(commands, repo, args.reps, args.warmup, scratch)
        for name, s in stats.items():
            print(row(name, s, targets=False))
        floor = stats[bare.name]["median_ms"]
        ratios = {name: stats[c.name]["median_ms"] / floor for name, c in targets.items()}
        verdicts = {name: r <= RATIO_TARGET for name, r in ratios.items()}
        print(f"\n  Each beside the bare interpreter (`python -c 'import sqlite3'`, {floor:.1f} ms, same run):")
        for name, r in ratios.items():
            print(f"    {name:<30} {r:5.2f}x  (target ≤ {RATIO_TARGET:g}x)  {verdict(verdicts[name])}")
        for name, c in log_of.items():
            print(
                f"    {'failures --log, ' + name + ' log':<30} {stats[c.name]['median_ms'] / floor:5.2f}x  (reported)"
            )
        narrow = references[-1].name
        print(f"    {'--help at 90 columns (click)':<30} {stats[narrow]['median_ms'] / floor:5.2f}x  (reported)")
        list_big = stats[big_list.name]["median_ms"]
        big_ok = list_big < BIG_STORE_TARGET_MS
        print(
            f"  list --active ({big['tasks']:,} tasks) median: {list_big:.1f} ms  "
            f"(target < {BIG_STORE_TARGET_MS:g} ms)  {verdict(big_ok)}"
        )
        print(
            f"  list --active ({big['tasks']:,} tasks) / bare interpreter: {list_big / floor:.2f}x  (reported: the "
            f"target was {BIG_STORE_TARGET_MS / REFERENCE_BARE_MS:.1f}x where the bare interpreter took "
            f"~{REFERENCE_BARE_MS:g} ms; here it takes {floor:.1f} ms)"
        )
        ok = all(verdicts.values()) and big_ok
        result["commands"] = stats
        result["ratios"] = {
            **{f"{name}_over_bare": round(r, 2) for name, r in ratios.items()},
            "list_active_large_over_bare": round(list_big / floor, 2),
            **{
                f"failures_log_{name}_over_bare": round(stats[c.name]["median_ms"] / floor, 2)
                for name, c in log_of.items()
            },
            "help_90_columns_over_bare": round(stats[narrow]["median_ms"] / floor, 2),
        }
        result["verdicts"] = {**{f"{name}_ratio": v for name, v in verdicts.items()}, "list_large_store": big_ok}
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_startup", result, ok)


if __name__ == "__main__":
    sys.exit(main())
