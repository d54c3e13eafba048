"""accept of a task with 200 changed files over 50 commits, beside git's own squash on the same repository.

Each run builds a task the way corral does (``corral create`` and ``corral start`` with the
scripted fake agent as Claude Code, the sandbox as a person has it), then has the fake agent make
50 commits that change 200 files in all, and times ``corral accept`` as a whole process:
pre-flight, the squash with git's plumbing, verification, bringing the checked-out target along,
and archiving. The floor, measured in the same run on a clone of the same repository and
branch: ``git merge --squash`` + ``git commit`` (the median of three, the squash undone between
them). accept's own work is its wall time less a ``corral --version`` start (the median of three,
also measured in the same run). Target (issue 34): accept's own work
within 1.5× the floor, on a 900-file and a 30,000-file repository.

Diagnostic (no target): the CPU of accept (with the git processes it waited for) less that of
``corral --version``, beside the floor's, from the same runs (a shared machine's load moves wall
times, not these); and one more run per size, untimed, counts the git processes accept starts
(a ``git`` first on its PATH that logs its arguments and runs the real one), by subcommand, and the
modules accept's interpreter has loaded when it ends, beside those of ``corral --version``.

    .venv/bin/python bench/bench_accept.py [--runs 5] [--sizes 900 30000]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    corral_command,
    drop_scratch,
    fake_claude,
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
    stop_daemon,
    verdict,
)

TARGET_RATIO = 1.5
#: The floor and the ``--version`` start are each taken as the median of this many samples in every run (accept
#: itself runs once: it consumes its task), so one slow sample does not make or break a run's ratio.
SAMPLES = 3
FILES, COMMITS = 200, 50
IDENT = ["-c", "user.name=Bench", "-c", "user.email=bench@example.com"]


def scenario(files: int, commits: int) -> dict[str, object]:
    steps: list[dict[str, object]] = [{"init": True}]
    per_commit = max(1, files // commits)
    for c in range(commits):
        for f in range(per_commit):
            n = c * per_commit + f
            steps.append({"write": {"path": f"pkg/mod_{n:03d}.py", "content": f"VALUE = {n}\n" * 20}})
        steps.append({"commit": f"change {c}"})
    steps.append({"result": f"{files} files over {commits} commits"})
    return {"invocations": [steps]}


def fill(repo: Path, size: int) -> None:
    """Bring the repository to ``size`` tracked files (in one commit)."""
    src = repo / "src"
    for n in range(size - 1):
        d = src / f"d{n // 500:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{n:05d}.txt").write_text(f"file {n}\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), *IDENT, "commit", "-q", "-m", f"{size} files"], check=True)


def timed(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    return timed_cpu(args, cwd, env)[0]


def timed_cpu(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """The wall time of ``args``, and the CPU time (user and system) of it and of every child it waited for (an
    accept's git processes, the one it works out ahead included; not the detached ``rm`` of a removal): on a
    machine others share, the CPU is the figure that the load does not move."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return elapsed, (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)


def git_logger(where: Path, log: Path) -> Path:
    """A directory holding a ``git`` that appends its arguments (one line, NUL-separated) to ``log`` and runs
    the real git."""
    real = shutil.which("git")
    assert real is not None, "git is not on PATH"
    where.mkdir(parents=True, exist_ok=True)
    shim = where / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" >> {log}\nprintf "\\n" >> {log}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    return where


def subcommand(line: str) -> str:
    """``git -C x -c k=v rev-parse …`` → ``rev-parse``."""
    words = [w for w in line.split("\0") if w]
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-C", "-c") else 1
    return words[i] if i < len(words) else "?"


def one_run(base: Path, size: int, index: int, files: int, commits: int, count_git: bool = False) -> dict[str, float]:
    root = base / f"s{size}-run{index}"
    repo = make_repo(root / "repo")
    fill(repo, size)
    env = hermetic_env(root / "home", pycache=base / "pycache")
    fake_claude(root, env, scenario(files, commits))
    cmd = corral_command()
    try:
        subprocess.run(
            [*cmd, "create", "Big change", "--ref", "big"], cwd=repo, env=env, check=True, capture_output=True
        )
        subprocess.run([*cmd, "start", "big", "--wait"], cwd=repo, env=env, check=True, capture_output=True)
        count = subprocess.run(
            ["git", "rev-list", "--count", "main..corral/big"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert int(count) == commits, count
        # The floor: git's own squash of the same branch onto the same main, in a clone.
        floor_repo = root / "floor"
        subprocess.run(["git", "clone", "-q", str(repo), str(floor_repo)], check=True)
        subprocess.run(["git", "-C", str(floor_repo), "fetch", "-q", "origin", "corral/big:big"], check=True)
        floors, floor_cpus = [], []
        for again in range(SAMPLES):  # the squash undone between samples: the same merge each time
            if again:
                subprocess.run(["git", "-C", str(floor_repo), "reset", "-q", "--hard", "HEAD~1"], check=True)
            squash = timed_cpu(["git", "merge", "-q", "--squash", "big"], floor_repo)
            commit = timed_cpu(["git", *IDENT, "commit", "-q", "-m", "squash"], floor_repo)
            floors.append(squash[0] + commit[0])
            floor_cpus.append(squash[1] + commit[1])
        floor, floor_cpu = median(floors), median(floor_cpus)
        starts = [timed_cpu([*cmd, "--version"], repo, env) for _ in range(SAMPLES)]
        start, start_cpu = median([s[0] for s in starts]), median([s[1] for s in starts])
        accept_cpu = 0.0
        if count_git:
            log = root / "git-argv.log"
            env = {**env, "PATH": f"{git_logger(root / 'shim', log)}{os.pathsep}{env.get('PATH', os.defpath)}"}
        if count_git:  # the same command line, run by an interpreter that says what it loaded
            accept = timed([sys.executable, "-c", _MODULES, str(root / "modules"), "accept", "big"], repo, env)
            timed([sys.executable, "-c", _MODULES, str(root / "modules-version"), "--version"], repo, env)
        else:
            accept, accept_cpu = timed_cpu([*cmd, "accept", "big"], repo, env)
        changed = subprocess.run(
            ["git", "diff", "--name-only", "main^", "main"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.split()
        assert len(changed) == files, len(changed)
    finally:
        stop_daemon(env, repo)
    row: dict[str, float] = {"accept_s": accept, "version_s": start, "own_s": accept - start, "floor_s": floor}
    row.update({"accept_cpu_s": accept_cpu, "version_cpu_s": start_cpu, "floor_cpu_s": floor_cpu})
    if count_git:
        calls = Counter(subcommand(line) for line in log.read_text().splitlines() if line)
        row.update({f"git {name}": float(n) for name, n in calls.items()})
        row["modules"] = float((root / "modules").read_text())
        row["modules_version"] = float((root / "modules-version").read_text())
    return row


#: ``corral ARGS`` as the console script runs it, then the number of modules loaded, written to the file named
#: first (at exit, whatever the exit code).
_MODULES = (
    "import atexit, sys; out = sys.argv[1]; sys.argv = ['corral', *sys.argv[2:]]; "
    "atexit.register(lambda: open(out, 'w').write(str(len(sys.modules)))); "
    "from corral.cli import run; run()"
)


def main() -> int:
    parser = scratch_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[900, 30_000], help="files in the repository")
    parser.add_argument("--files", type=int, default=FILES, help="files the task changes")
    parser.add_argument("--commits", type=int, default=COMMITS, help="commits the task makes")
    args = parse_args(parser, {"runs": 1, "sizes": [50], "files": 4, "commits": 2})
    base = scratch_dir("accept", args)
    result: dict[str, object] = {"machine": machine(), "load_before": load(), "sizes": {}}
    ok = True
    try:
        for size in args.sizes:
            rows = [one_run(base, size, i, args.files, args.commits) for i in range(args.runs)]
            own = median([r["own_s"] for r in rows])
            floor = median([r["floor_s"] for r in rows])
            wall = median([r["accept_s"] for r in rows])
            ratio = own / floor
            good = ratio <= TARGET_RATIO
            ok = ok and good
            print(
                f"accept, {args.files} files over {args.commits} commits, {size}-file repository: "
                f"{wall * 1000:.0f} ms (p90 {percentile([r['accept_s'] for r in rows], 90) * 1000:.0f}), "
                f"own work {own * 1000:.0f} ms (less `corral --version` "
                f"{median([r['version_s'] for r in rows]) * 1000:.0f} ms); floor `git merge --squash` + `git commit` "
                f"{floor * 1000:.0f} ms; {ratio:.2f}× (target ≤ {TARGET_RATIO}×) {verdict(good)}"
            )
            own_cpu = median([r["accept_cpu_s"] - r["version_cpu_s"] for r in rows])
            floor_cpu = median([r["floor_cpu_s"] for r in rows])
            accept_cpu, version_cpu = (median([r[k] for r in rows]) for k in ("accept_cpu_s", "version_cpu_s"))
            print(
                f"  CPU (diagnostic, no target; the same runs): accept {accept_cpu * 1000:.0f} ms with its git "
                f"processes, own {own_cpu * 1000:.0f} ms (less `corral --version` {version_cpu * 1000:.0f} ms); "
                f"floor {floor_cpu * 1000:.0f} ms; {own_cpu / floor_cpu:.2f}×"
            )
            counted = one_run(base, size, args.runs, args.files, args.commits, count_git=True)
            calls = {k.removeprefix("git "): int(v) for k, v in counted.items() if k.startswith("git ")}
            print(
                f"  git processes accept started (an untimed run): {sum(calls.values())}: "
                + ", ".join(f"{name} {n}" for name, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])))
            )
            print(
                f"  modules loaded (the same run): accept {int(counted['modules'])}, "
                f"`corral --version` {int(counted['modules_version'])}"
            )
            result["sizes"][str(size)] = {  # type: ignore[index]
                "runs": rows,
                "own_s": own,
                "floor_s": floor,
                "ratio": ratio,
                "own_cpu_s": own_cpu,
                "floor_cpu_s": floor_cpu,
                "git_processes": calls,
                "modules": int(counted["modules"]),
                "modules_version": int(counted["modules_version"]),
            }
    finally:
        drop_scratch(base, args.keep)
    result["target_ratio"] = TARGET_RATIO
    return finish("accept", result, ok)


if __name__ == "__main__":
    sys.exit(main())
