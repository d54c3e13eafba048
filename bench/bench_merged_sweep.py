#!/usr/bin/env python
"""The first `corral list` after the target branch moved, with 150 and 1,500 real task branches.

Every read command reconciles first, and one of its sweeps asks whether a resting task's
work is already on its target (merged by hand): when ``main`` moves, every resting task is
looked at again. This measures what that costs with real branches.

1. For each size N (``--branches``, default 150 and 1,500): a scratch git repository and
   CORRAL_HOME, the store seeded by seed_store.py with N resting tasks (blocked, conflict,
   submitted, interrupted), a few working and backlog ones and 200 terminal ones; then, in
   the real repository, a branch ``corral/<ref>`` for every resting task holding one commit
   of its own beyond ``main`` (made with one ``git fast-import``), and each session's base
   set to that ``main`` commit — so every resting task has work that is not on ``main``.

2. Warm-up runs of ``corral list`` (the sweep remembers what it saw), then ``--reps`` rounds of:
   ``main`` moves by one commit (untimed, by this script), ``corral list`` (timed: the first
   list after the move), ``corral list`` again (timed: a steady list), each a separate
   process from a bare spawner (see benchlib.Spawner), bytecode cached.

3. Check: three branches are then merged into ``main`` by hand; the next ``list`` must
   complete exactly those three tasks (the sweep still finds merged work at this scale).

Target: at each size, the first list after the move within 1.5x a steady list (medians).
Today's figure before this sweep answered with one git call per target: about 3x at 150
branches (one ``git merge-base`` per resting task).

Usage::

    .venv/bin/python bench/bench_merged_sweep.py              # ~1-2 minutes
    .venv/bin/python bench/bench_merged_sweep.py --branches 150 --reps 5

Results are printed and written to bench/results/bench_merged_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import new_store, summarize
from benchlib import (
    Spawner,
    corral_command,
    drop_scratch,
    finish,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import Shape

RATIO_TARGET = 1.5
RESTING = ("blocked", "conflict", "submitted", "interrupted")


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, check=True)
    return out.stdout.decode().strip()


IDENT = ["-c", "user.name=Bench", "-c", "user.email=bench@example.com"]


def shape_for(n: int) -> Shape:
    interrupted = max(1, n // 5)
    conflict = max(1, n // 20)
    submitted = max(1, n // 20)
    blocked = n - interrupted - conflict - submitted
    shape = Shape(
        working=10,
        interrupted=interrupted,
        blocked=blocked,
        conflict=conflict,
        submitted=submitted,
        backlog=20,
        big_turns=20,
    )
    shape.tasks = shape.nonterminal + 200
    shape.turns = 4 * shape.tasks
    return shape


def make_branches(repo: Path, db: Path) -> tuple[int, list[str]]:
    """A branch with one commit of its own per resting task; sessions based on main. Returns (count, refs)."""
    base = git(repo, "rev-parse", "main")
    con = sqlite3.connect(db)
    marks = ",".join("?" * len(RESTING))
    rows = con.execute(
        f"SELECT ref, session_id FROM tasks WHERE status IN ({marks}) AND session_id IS NOT NULL ORDER BY ref",
        RESTING,
    ).fetchall()
    stream = []
    for n, (ref, _sid) in enumerate(rows):
        content = f"work of {ref}\n".encode()
        message = f"{ref}: the agent's work\n".encode()
        stream += [
            f"commit refs/heads/corral/{ref}\n".encode(),
            f"committer Bench <bench@example.com> {1_700_000_000 + n} +0000\n".encode(),
            f"data {len(message)}\n".encode() + message,
            f"from {base}\n".encode(),
            f"M 644 inline work/{ref}.txt\ndata {len(content)}\n".encode() + content + b"\n",
        ]
    git(repo, "fast-import", "--quiet", input=b"".join(stream))
    with con:
        con.executemany(
            "UPDATE sessions SET base_commit = ?, branch = ? WHERE id = ?",
            [(base, f"corral/{ref}", sid) for ref, sid in rows],
        )
    con.close()
    return len(rows), [ref for ref, _sid in rows]


def move_main(repo: Path, n: int) -> None:
    tree = git(repo, "rev-parse", "main^{tree}")
    sha = git(repo, *IDENT, "commit-tree", tree, "-p", "main", "-m", f"main moves ({n})")
    git(repo, "update-ref", "refs/heads/main", sha)


def statuses(cc: list[str], env: dict[str, str], repo: Path) -> dict[str, str]:
    out = subprocess.run([*cc, "list", "--all", "--json"], env=env, cwd=repo, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"corral list --all failed: {out.stderr[-2000:]}")
    return {t["ref"]: t["status"] for t in json.loads(out.stdout)["tasks"]}


def one_size(base: Path, n: int, reps: int, warmup: int, cc: list[str]) -> dict[str, Any]:
    repo = make_repo(base / f"repo-{n}")
    shape = shape_for(n)
    print(f"\n{n:,} resting tasks with real branches: seeding {shape.tasks:,} tasks …", flush=True)
    _home, env, manifest = new_store(base, f"b{n}", shape, repo)
    count, refs = make_branches(repo, Path(manifest["database"]))
    print(f"  {count:,} branches made; {manifest['by_status']}")
    out, err = base / "stdout", base / "stderr"
    spawner = Spawner(env, repo)
    runs: dict[str, list[dict[str, Any]]] = {"after the move": [], "steady": []}
    args = [*cc, "list"]
    try:
        for _ in range(warmup):
            spawner.run(args, out, err)
        for i in range(reps):
            move_main(repo, i)
            for name in ("after the move", "steady"):
                r = spawner.run(args, out, err)
                if r["rc"] != 0:
                    raise SystemExit(f"corral list exited {r['rc']}:\n{err.read_text(errors='replace')[-2000:]}")
                r["stdout_lines"] = out.read_text(errors="replace").count("\n")
                runs[name].append(r)
    finally:
        spawner.close()
    stats = {name: summarize(rs) for name, rs in runs.items()}

    # Merged by hand: the sweep must still find exactly these.
    merged = refs[:: max(1, len(refs) // 3)][:3]
    for ref in merged:
        git(repo, *IDENT, "merge", "-q", "--no-ff", "--no-edit", f"corral/{ref}")
    after = statuses(cc, env, repo)
    completed = sorted(ref for ref in refs if after.get(ref) == "complete")
    found_ok = completed == sorted(merged)

    first, steady = stats["after the move"]["median_ms"], stats["steady"]["median_ms"]
    ratio = first / steady
    ok = ratio <= RATIO_TARGET and found_ok
    for name, s in stats.items():
        print(
            f"  list, {name:<15} median {s['median_ms']:7.1f} ms  p90 {s['p90_ms']:7.1f} ms  "
            f"(CPU {s['median_cpu_ms']:6.1f} ms)"
        )
    print(
        f"  first after the move / steady: {ratio:.2f}x (+{first - steady:.1f} ms; target ≤ {RATIO_TARGET:g}x)  "
        f"{verdict(ratio <= RATIO_TARGET)}"
    )
    print(f"  merged by hand {merged}: completed {completed}  {verdict(found_ok)}")
    floors: dict[str, Any] = {}
    report_floors(floors, {"steady_list_ms": steady}, "the same `list`, nothing moved, interleaved with the first")
    return {
        **floors,
        "resting_tasks": count,
        "store": {k: manifest[k] for k in ("tasks", "by_status", "turns", "db_bytes", "seconds")},
        "runs": stats,
        "ratio": round(ratio, 3),
        "extra_ms": round(first - steady, 1),
        "median_cpu_ratio": round(
            median([r["user_ms"] + r["sys_ms"] for r in runs["after the move"]])
            / median([r["user_ms"] + r["sys_ms"] for r in runs["steady"]]),
            3,
        ),
        "merged_by_hand": merged,
        "completed": completed,
        "pass": ok,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--branches", type=int, nargs="*", default=[150, 1_500], help="resting tasks (default 150 1500)")
    p.add_argument("--reps", type=int, default=10, help="timed rounds per size (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed lists first (default 2)")
    scratch_options(p)
    args = parse_args(p, {"branches": [5], "reps": 1, "warmup": 0}, argv)

    base = scratch_dir("merged", args)
    cc = corral_command()
    result: dict[str, Any] = {
        "benchmark": "bench_merged_sweep",
        "machine": machine(),
        "command": cc,
        "targets": {"first_over_steady": RATIO_TARGET},
        "load_before": load(),
        "sizes": {},
    }
    ok = True
    try:
        for n in args.branches:
            size = one_size(base, n, args.reps, args.warmup, cc)
            result["sizes"][str(n)] = size
            ok &= size["pass"]
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_merged_sweep", result, ok)


if __name__ == "__main__":
    sys.exit(main())
