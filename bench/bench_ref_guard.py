#!/usr/bin/env python
"""The ref guard's cost per turn, in a repository with 1,000 refs (docs/lifecycle.md#refs-are-guarded).

Every turn pays twice: before the agent starts, the snapshot (``ref_snapshot.prepare``: every ref
file read, with an inotify watch on each refs directory made first, and the turn's hooks
directory); after its work phase, the check (``ref_restore.settle``: the paths the watch saw
written read again, the report written). Both run in the supervisor, in the same process as
here; this measures them directly.

1. A scratch repository with N refs (``--refs``, default 1,000): ``main``, N-50 task branches
   ``corral/t<i>`` and 50 tags, written in one ``git update-ref --stdin``. Measured twice: with
   every ref loose (as corral leaves task branches it creates) and after ``git pack-refs --all``
   (as a clone or a ``git gc`` leaves them).
2. ``--reps`` turns (default 30), each: a fresh log directory, ``prepare`` (timed: the snapshot),
   one commit on the turn's own branch through the hooks (untimed, the agent's work), then
   ``settle`` (timed: the check; nothing to put back). Then once more with the agent moving
   ``main`` (the check that finds, keeps and puts back one move), to show that path's price;
   the check without the watch (``--reps`` more turns whose watch is dropped before ``settle``:
   what the reconciler pays, in another process, reading every ref again); the first turn of
   the process (a fresh supervisor's: it also imports ``ctypes`` for inotify); and, for scale,
   one bare ``git for-each-ref`` of the same refs (git's own floor).

Target: snapshot + check under 20 ms a turn (median), with 1,000 refs.

Usage::

    .venv/bin/python bench/bench_ref_guard.py                 # ~15 s
    .venv/bin/python bench/bench_ref_guard.py --refs 1000 --reps 50

Results are printed and written to bench/results/bench_ref_guard.json.
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchlib import (
    drop_scratch,
    finish,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    percentile,
    report_floors,
    scratch_dir,
    scratch_options,
)
from corral.adapters.git import Git
from corral.engine.runtime import ref_guard, ref_restore, ref_snapshot

TARGET_MS = 20.0
TAGS = 50


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
    full = {**os.environ, **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full, input=input, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def seed(repo: Path, refs: int) -> Path:
    head = git(repo, "rev-parse", "HEAD")
    lines = [f"create refs/heads/corral/t{i} {head}" for i in range(refs - TAGS - 1)]
    lines += [f"create refs/tags/v{i} {head}" for i in range(TAGS)]
    git(repo, "update-ref", "--stdin", input="\n".join(lines) + "\n")
    worktree = repo.parent / "wt"
    git(repo, "worktree", "add", "-q", "-b", "corral/bench", str(worktree), "main")
    return worktree


def one_turn(
    g: Git, repo: Path, worktree: Path, logs: Path, n: int, move_main: bool, watched: bool = True
) -> tuple[float, float, int]:
    log_dir = logs / str(n)
    started = time.perf_counter()
    env = ref_snapshot.hook_env(log_dir, worktree, f"cmd-{n}", {})
    snap = (time.perf_counter() - started) * 1000
    assert env, "the snapshot was not taken"
    watch = ref_snapshot.take_watch(ref_guard.guard_dir(log_dir), f"cmd-{n}")  # None without inotify (not Linux)
    if watched:
        ref_snapshot._keep_watch(ref_guard.guard_dir(log_dir), f"cmd-{n}", watch)
    elif watch is not None:
        watch.close()  # as the reconciler's check, in another process: every ref read again
    (worktree / f"f{n}.txt").write_text(f"{n}\n")
    ident = ["-c", "user.name=Agent", "-c", "user.email=agent@example.com"]
    git(worktree, "add", "-A", env=env)
    git(worktree, *ident, "commit", "-q", "-m", f"turn {n}", env=env)
    if move_main:
        git(worktree, "update-ref", "refs/heads/main", "HEAD", env=env)
    started = time.perf_counter()
    report = ref_restore.settle(g, log_dir, worktree, "corral/bench", "bench", n)
    check = (time.perf_counter() - started) * 1000
    assert report is not None and report.error is None, report
    assert len(report.moves) == (1 if move_main else 0), report
    return snap, check, len(report.moves)


def measure(repo: Path, worktree: Path, logs: Path, reps: int, label: str, start: int) -> dict[str, Any]:
    g = Git()
    snaps, checks = [], []
    for i in range(reps):
        snap, check, _ = one_turn(g, repo, worktree, logs, start + i, move_main=False)
        snaps.append(snap)
        checks.append(check)
    snap_put, check_put, _ = one_turn(g, repo, worktree, logs, start + reps, move_main=True)
    unwatched = [
        one_turn(g, repo, worktree, logs, start + reps + 1 + i, move_main=False, watched=False)[1] for i in range(reps)
    ]
    floor = []  # one bare for-each-ref of the same refs: what git alone takes, for scale
    for _ in range(reps):
        began = time.perf_counter()
        subprocess.run(["git", "for-each-ref", ref_snapshot._FORMAT], cwd=worktree, capture_output=True, check=True)
        floor.append((time.perf_counter() - began) * 1000)
    refs = len(git(repo, "for-each-ref", "--format=%(refname)").splitlines())
    totals = [s + c for s, c in zip(snaps, checks, strict=True)]
    row = {
        "layout": label,
        "refs": refs,
        "snapshot_ms": round(median(snaps), 2),
        "check_ms": round(median(checks), 2),
        "turn_ms": round(median(totals), 2),
        "turn_p90_ms": round(percentile(totals, 90), 2),
        "first_turn_ms": round(totals[0], 2),
        "put_back_turn_ms": round(snap_put + check_put, 2),
        "check_unwatched_ms": round(median(unwatched), 2),
        "for_each_ref_ms": round(median(floor), 2),
        "pass": median(totals) < TARGET_MS,
    }
    print(
        f"{label:>7}: {refs} refs  snapshot {row['snapshot_ms']:6.2f} ms  check {row['check_ms']:6.2f} ms  "
        f"turn {row['turn_ms']:6.2f} ms (p90 {row['turn_p90_ms']:.2f})  "
        f"first {row['first_turn_ms']:.2f} ms  with one put-back {row['put_back_turn_ms']:.2f} ms  "
        f"check unwatched {row['check_unwatched_ms']:.2f} ms  (one bare for-each-ref {row['for_each_ref_ms']:.2f} ms)  "
        f"[{'PASS' if row['pass'] else 'FAIL'} < {TARGET_MS:.0f} ms]"
    )
    return row


def main() -> int:
    p = scratch_options(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    p.add_argument("--refs", type=int, default=1000)
    p.add_argument("--reps", type=int, default=30)
    args = parse_args(p, {"refs": 20, "reps": 1})
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "target_ms": TARGET_MS}
    base = scratch_dir("ref-guard", args)
    try:
        os.environ.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(base / "gitconfig")})
        repo = make_repo(base / "repo")
        worktree = seed(repo, args.refs)
        rows = [measure(repo, worktree, base / "logs-loose", args.reps, "loose", 0)]
        git(repo, "pack-refs", "--all")
        rows.append(measure(repo, worktree, base / "logs-packed", args.reps, "packed", 100_000))
        result["rows"] = rows
        ok = all(r["pass"] for r in rows)
        floors = {f"bare_for_each_ref_{r['layout']}_ms": r["for_each_ref_ms"] for r in rows}
        report_floors(result, floors, "one `git for-each-ref` of the same refs, what any look at them costs")
    finally:
        drop_scratch(base, args.keep)
    return finish("bench_ref_guard", result, ok)


if __name__ == "__main__":
    sys.exit(main())
