#!/usr/bin/env python
"""A confined turn's end with its objects in quarantine: the verification and migration, beside the turn end before it.

A turn under bubblewrap writes its git objects into its own quarantine (docs/harnesses.md#sandbox).
When it ends, the supervisor verifies and moves them into the shared store and checks the branch
(``branch_check.after_confined``: every loose object inflated and hashed, the alternates line
removed, ``rev-list`` of the new commits with ``--missing=print``, the verified tip moved). This is
what the change adds to a turn's end; the floor is what a turn's end already did before it, the
git facts of ``GitProbe.facts`` (the commits, the changed paths and the protected check).

1. A scratch repository of ``--files`` files (default 30,000, in 300 directories), a task worktree
   on ``corral/bench``.
2. ``--reps`` turns (default 20), each: a quarantine opened (untimed, at launch), the agent's work
   — ``--objects`` new objects (default 100: 97 new files in a new directory, its tree, the root
   tree and the commit) written with the agent's environment inside the sandbox
   (``GIT_OBJECT_DIRECTORY`` on the quarantine, the store as an alternate) — untimed; then, timed,
   the facts (the floor) and the verification with migration (the addition), in alternating order.

Target: the addition under 50 ms (median) on the 30,000-file repository with 100 new objects.

Usage::

    .venv/bin/python bench/bench_quarantine.py          # ~1 min
    .venv/bin/python bench/bench_quarantine.py --files 30000 --objects 100 --reps 30

Results are printed and written to bench/results/bench_quarantine.json.
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
from corral.engine.runtime import branch_check, quarantine
from corral.engine.runtime.gitfacts import GitProbe

TARGET_MS = 50.0
IDENT = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "b@e",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "b@e",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **IDENT, **(env or {})}
    return subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True, check=True).stdout.strip()


def seed(repo: Path, files: int) -> Path:
    per = 100
    for d in range(max(1, files // per)):
        where = repo / f"src{d:03d}"
        where.mkdir()
        for i in range(per):
            (where / f"f{i:03d}.txt").write_text(f"file {d}/{i}\n" * 3)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "many files")
    worktree = repo.parent / "wt"
    git(repo, "worktree", "add", "-q", "-b", "corral/bench", str(worktree), "main")
    return worktree


def agent_work(worktree: Path, common: Path, q: Path, n: int, objects: int) -> None:
    """What the agent's git writes inside the sandbox: objects into the quarantine only."""
    env = {"GIT_OBJECT_DIRECTORY": str(q), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects")}
    where = worktree / f"turn{n:03d}"
    where.mkdir()
    for i in range(max(1, objects - 3)):
        (where / f"new{i:03d}.txt").write_text(f"turn {n} file {i}\n")
    git(worktree, "add", "-A", env=env)
    git(worktree, "commit", "-q", "-m", f"turn {n}", env=env)


def measure(repo: Path, worktree: Path, reps: int, objects: int) -> dict[str, Any]:
    g = Git()
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    probe = GitProbe(g, worktree)
    branch_check.begin(g, repo, "bench", "corral/bench")
    floor: list[float] = []
    added: list[float] = []
    moved = 0
    for n in range(reps):
        command_id = f"bench{n:03d}"
        q = quarantine.open_(common, command_id)
        start = g.rev_parse("refs/heads/corral/bench", cwd=repo)
        agent_work(worktree, common, q, n, objects)
        moved += sum(1 for p in q.iterdir() if len(p.name) == 2 for _ in p.iterdir())

        def facts(start: str | None = start) -> None:
            t0 = time.perf_counter()
            probe.facts(start, start, start, (".github/workflows/**",))
            floor.append((time.perf_counter() - t0) * 1000)

        def verify(command_id: str = command_id, n: int = n) -> None:
            t0 = time.perf_counter()
            objects_report, finding, error = branch_check.after_confined(
                g,
                repo,
                common_dir=str(common),
                quarantine_id=command_id,
                task_ref="bench",
                branch="corral/bench",
                target="main",
                turn=n,
            )
            added.append((time.perf_counter() - t0) * 1000)
            assert error is None and finding is None, (error, finding)
            assert objects_report is not None and objects_report.ok

        # Alternating order: neither always meets a warm cache the other left. The facts read the
        # new objects through the quarantine's alternates line before it moves, as a turn's would.
        for step in (facts, verify) if n % 2 == 0 else (verify, facts):
            step()
        assert not q.exists()
        quarantine.purge(common)  # what the reconciler does when it records the turn: not the turn's end
    return {
        "turns": reps,
        "objects_per_turn": moved / reps,
        "floor_facts_ms": {"median": median(floor), "p90": percentile(floor, 90)},
        "added_verify_migrate_ms": {"median": median(added), "p90": percentile(added, 90)},
        "added_over_floor": median(added) / median(floor) if median(floor) else None,
    }


def main() -> int:
    p = scratch_options(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    p.add_argument("--files", type=int, default=30_000)
    p.add_argument("--objects", type=int, default=100)
    p.add_argument("--reps", type=int, default=20)
    args = parse_args(p, {"files": 200, "objects": 5, "reps": 1})
    base = scratch_dir("quarantine", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "target_ms": TARGET_MS}
    try:
        repo = make_repo(base / "repo")
        print(f"seeding {args.files:,} files …", flush=True)
        worktree = seed(repo, args.files)
        row = measure(repo, worktree, args.reps, args.objects)
        result["row"] = row
    finally:
        drop_scratch(base, args.keep)
    added = row["added_verify_migrate_ms"]["median"]
    ok = added < TARGET_MS
    print(
        f"{args.files:,} files, {row['objects_per_turn']:.0f} new objects a turn, {args.reps} turns:\n"
        f"  turn end before (git facts):       median {row['floor_facts_ms']['median']:.1f} ms"
        f"  p90 {row['floor_facts_ms']['p90']:.1f} ms\n"
        f"  added (verify + migrate + branch): median {added:.1f} ms"
        f"  p90 {row['added_verify_migrate_ms']['p90']:.1f} ms   target < {TARGET_MS:.0f} ms  "
        f"{'PASS' if ok else 'FAIL'}"
    )
    report_floors(result, {"turn_end_facts_ms": row["floor_facts_ms"]["median"]}, "a turn's end before the quarantine")
    return finish("bench_quarantine", result, ok)


if __name__ == "__main__":
    raise SystemExit(main())
