"""Helpers shared by the benchmarks: statistics, a scratch git repository, results files."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (p90 of 20 runs is the 18th smallest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def hermetic_env(home: Path, pycache: Path | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a benchmarked corral runs in: its own CORRAL_HOME, no user config, no colour.

    Bytecode is cached as in any normal install (``PYTHONDONTWRITEBYTECODE`` is dropped), but
    under ``pycache`` (``PYTHONPYCACHEPREFIX``), so nothing is written into the source tree.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env.update(
        {
            "CORRAL_HOME": str(home),
            "CORRAL_CONFIG_FILE": str(home / "no-user-config.toml"),
            "NO_COLOR": "1",
            "COLUMNS": "120",
            "LC_ALL": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            # A guard, not a shortcut: if a seeded working task ever looked lost, the reconciler
            # behind `list`/`show` would auto-resume it and launch a real agent turn.
            "CORRAL_AUTO_RESUME": "false",
        }
    )
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.update(extra or {})
    return env


def make_repo(path: Path) -> Path:
    """A git repository on ``main`` with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    ident = ["-c", "user.name=Bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README.md").write_text("# bench\n")
    subprocess.run(["git", "-C", str(path), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(path), *ident, "commit", "-q", "-m", "initial"], check=True)
    return path


def corral_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m corral``."""
    script = Path(sys.executable).parent / "corral"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "corral"]


def machine() -> dict[str, Any]:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "git": git,
    }


def write_results(name: str, doc: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def scratch_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--tmp`` and ``--keep``: where a benchmark makes its scratch directory, and whether it stays."""
    p.add_argument("--tmp", default=None, help="scratch directory (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return p


def scratch_dir(name: str, args: argparse.Namespace) -> Path:
    """A fresh scratch directory for benchmark ``name`` under ``--tmp`` (see :func:`drop_scratch`)."""
    return Path(tempfile.mkdtemp(prefix=f"corral-bench-{name}-", dir=args.tmp))


def drop_scratch(base: Path, keep: bool) -> None:
    """Remove a run's scratch directory, or say where it was kept (``--keep``)."""
    if keep:
        print(f"\nkept {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)


def finish(name: str, result: dict[str, Any], ok: bool) -> int:
    """Close a run: the load after it, the verdict, the results file; the exit code (1 when a target failed)."""
    result["load_after"] = load()
    result["pass"] = ok
    path = write_results(name, result)
    print(f"\nLoad average before {result.get('load_before')}, after {result['load_after']} on {os.cpu_count()} CPUs.")
    print(f"Overall: {verdict(ok)}   (results: {path})")
    return 0 if ok else 1


# A tiny process that spawns and reaps the measured commands. ``ru_maxrss`` of a child
# includes the memory of the process it was forked (or vforked) from until exec, so a
# child spawned by this benchmark (hundreds of MB after seeding) would report that.
# This spawner is a bare interpreter (``python -S -I``, ~8.5 MB): the floor of every
# RSS figure, below anything corral uses. It also times spawn → reap itself.
_SPAWNER = r"""
import os, sys, time
rd, wr = sys.stdin.buffer, sys.stdout.buffer
W = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
while True:
    line = rd.readline()
    if not line:
        break
    out, err, *args = line.rstrip(b"\n").split(b"\x1f")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, out, W, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, err, W, 0o644),
    ]
    start = time.perf_counter()
    pid = os.posix_spawn(args[0], args, os.environ, file_actions=actions)
    _, status, ru = os.wait4(pid, 0)
    ms = (time.perf_counter() - start) * 1000
    code = os.waitstatus_to_exitcode(status)
    wr.write(b"%.3f %d %.3f %.3f %d\n" % (ms, ru.ru_maxrss, ru.ru_utime * 1000, ru.ru_stime * 1000, code))
    wr.flush()
"""


class Spawner:
    """Runs commands one at a time in a fixed environment and working directory."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-I", "-c", _SPAWNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )

    def run(self, args: list[str], out: Path, err: Path) -> dict[str, Any]:
        """Wall ms (spawn to reap), peak RSS (MB, the child's ru_maxrss), CPU ms, exit code."""
        if not Path(args[0]).is_absolute():
            raise ValueError(f"give an absolute executable, not {args[0]}")
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = b"\x1f".join(os.fsencode(a) for a in (str(out), str(err), *args))
        if b"\n" in line:
            raise ValueError("arguments may not contain newlines")
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        if len(reply) != 5:
            raise RuntimeError(f"spawner died (exit {self.proc.poll()})")
        ms, kib, user, sys_ms, code = reply
        return {
            "ms": float(ms),
            "rss_mb": int(kib) / 1024,
            "user_ms": float(user),
            "sys_ms": float(sys_ms),
            "rc": int(code),
        }

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def load() -> list[float]:
    """The load average now: wall times on a busy machine are inflated, so every result records it."""
    return [round(x, 2) for x in os.getloadavg()]
