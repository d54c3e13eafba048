"""Helpers shared by the benchmarks: statistics, a scratch git repository, results files."""

from __future__ import annotations

import argparse
import atexit
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
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"

#: Every process a benchmark starts carries this mark in its environment (set here, inherited by
#: every child, the detached ones a command starts included: a daemon, a supervisor, an agent), so
#: the run can tell at its end whether anything it started still runs (:func:`survivors`). A mark
#: given from outside (``bench/run_all.sh``, the quick-mode test) is kept, so that caller can look too.
RUN_MARK = "BENCH_RUN_MARK"
#: Whether this process is a benchmark (a script of this directory), not a test or a tool that imports this.
IS_BENCHMARK = Path(sys.argv[0]).resolve().parent == BENCH if sys.argv and sys.argv[0] else False
if IS_BENCHMARK:
    os.environ.setdefault(RUN_MARK, f"{os.getpid()}-{uuid.uuid4().hex[:12]}")

#: ``--quick`` (:func:`parse_args`): tiny sizes, targets not judged, no results file written; what
#: the test suite runs to prove each benchmark ends everything it started.
QUICK = False


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
    under ``pycache`` (``PYTHONPYCACHEPREFIX``), so nothing is written into the source tree. A quick
    run reads the bytecode kept beside the sources instead (:func:`pycache_prefix`).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if (prefix := pycache_prefix(pycache)) is not None:
        env["PYTHONPYCACHEPREFIX"] = prefix
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


def pycache_prefix(pycache: Path | None) -> str | None:
    """Where a benchmarked corral caches its bytecode: ``pycache``, except in a quick run (None there).

    A fresh prefix starts empty, so the run's first processes compile every module they import anew,
    the interpreter's own and the venv's included: a second or more of CPU in each benchmark, which a
    quick run (the test suite runs them all) has no figure to pay it for. It reads the bytecode the
    install keeps beside the sources, as the suite's own processes do (the suite compiles corral's first).
    """
    return None if QUICK or pycache is None else str(pycache)


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


def parse_args(
    parser: argparse.ArgumentParser, quick: dict[str, Any] | None = None, argv: list[str] | None = None
) -> argparse.Namespace:
    """Parse a benchmark's options, with ``--quick``: the sizes in ``quick`` replace the given ones.

    A quick run checks that the benchmark runs whole and ends every process it started; its
    figures mean nothing (tiny sizes), so its targets are not judged and no results file is written.
    """
    global QUICK
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks that it runs and leaves nothing behind (no verdict)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        QUICK = True
        for name, value in (quick or {}).items():
            setattr(args, name, value)
    return args


def every(seconds: float, quick: float) -> float:
    """How often a benchmark's wait looks: ``seconds``, or ``quick`` in a quick run. A look is often a whole
    corral command (a Python process), and a quick run's figures are not judged: looking less often there
    spends less CPU for the same path, the last look still the one that sees the wait end."""
    return quick if QUICK else seconds


def _ancestry() -> list[int]:
    """This process and those it runs under (a ``timeout`` or a shell that gave it the mark): they
    carry the mark too, but they are the run's callers, not what it started."""
    chain, pid = [], os.getpid()
    while pid > 1 and pid not in chain:
        chain.append(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def survivors(mark: str | None = None, spare: Iterable[int] = ()) -> list[tuple[int, str]]:
    """(pid, command line) of every process of this user, this one and its callers aside, whose environment
    carries the mark.

    Only this user's processes are readable, and only they can be a benchmark's. A process that
    changed its environment (none of corral's do) would escape this check.
    """
    needle = f"{RUN_MARK}={mark or os.environ[RUN_MARK]}".encode()
    skip = {*_ancestry(), *spare}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            if needle not in environ:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append((int(entry.name), cmdline))
    return found


def end_check(grace: float = 5.0, spare: Iterable[int] = ()) -> list[str]:
    """What this run started and left running: listed (as a failure) and killed, so it leaks nothing twice.

    ``grace``: a process still exiting at the end (a supervisor writing its last status) is
    given that long before it counts. ``spare``: pids the caller still owns and reaps itself.
    One left running may start another as it goes (a supervisor, the home daemon): the look is
    made again until it finds none.
    """
    global _checked
    _checked = True
    deadline = time.monotonic() + grace
    while (left := survivors(spare=spare)) and time.monotonic() < deadline:
        time.sleep(0.05)
    found: dict[int, str] = {}
    for _ in range(5):
        if not left:
            break
        for pid, cmdline in left:
            found.setdefault(pid, cmdline)
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.2)
        left = survivors(spare=spare)
    lines = [f"pid {pid}: {cmdline[:200]}" for pid, cmdline in found.items()]
    if lines:
        print(f"\nLeft running at the end (now killed) {verdict(False)}:")
        for line in lines:
            print(f"  {line}")
    else:
        print("\nNothing this run started still runs. PASS")
    return lines


_checked = False


@atexit.register
def _end_check_on_a_failure() -> None:
    """A benchmark that fails on its way (an exception, a SystemExit) never reaches :func:`finish`: what it
    started is ended all the same, so the next one measures a quiet machine."""
    if IS_BENCHMARK and not _checked:
        end_check(grace=1.0)


def finish(name: str, result: dict[str, Any], ok: bool) -> int:
    """Close a run: the load after it, that nothing it started still runs, the verdict, the results file;
    the exit code (1 when a target failed or a process was left behind; a quick run judges only the latter)."""
    result["load_after"] = load()
    left = end_check()
    result["left_running"] = left
    if QUICK:
        print(f"\nQuick run: sizes too small to judge any target; {verdict(not left)} on what it left running.")
        return 1 if left else 0
    ok = ok and not left
    result["pass"] = ok
    path = write_results(name, result)
    print(f"\nLoad average before {result.get('load_before')}, after {result['load_after']} on {os.cpu_count()} CPUs.")
    print(f"Overall: {verdict(ok)}   (results: {path})")
    return 0 if ok else 1


def command_ms(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, reps: int = 5) -> float:
    """Median wall ms of ``args`` run to its end ``reps`` times (after one unmeasured run, which warms the caches).

    A quick run times one run, without the warm-up: its figure is not judged."""
    times = []
    for n in range(1 if QUICK else 0, 2 if QUICK else reps + 1):
        began = time.perf_counter()
        subprocess.run(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if n:
            times.append((time.perf_counter() - began) * 1000)
    return median(times)


def startup_floors(env: dict[str, str], cwd: Path | None = None, reps: int = 5) -> dict[str, float]:
    """The floors under any whole-process corral figure, measured now: the bare interpreter
    (``python -I -c "import sqlite3"``, issue 34's anchor) and ``corral --version`` in the run's environment."""
    return {
        "bare_interpreter_ms": round(command_ms([sys.executable, "-I", "-c", "import sqlite3"], env, cwd, reps), 1),
        "corral_version_ms": round(command_ms([*corral_command(), "--version"], env, cwd, reps), 1),
    }


def report_floors(result: dict[str, Any], floors: dict[str, float], note: str = "") -> None:
    """Print the floors measured in this run beside the figures (each ``name_ms``), and keep them in the
    results (``floors``); ``note`` says what they stand under."""
    result.setdefault("floors", {}).update(floors)
    said = ", ".join(f"{name.removesuffix('_ms').replace('_', ' ')} {value:.1f} ms" for name, value in floors.items())
    print(f"Floor, measured in this run: {said}{f' ({note})' if note else ''}")


def stop_daemon(env: dict[str, str], cwd: Path | None = None) -> None:
    """Stop the home daemon a run's commands may have started (a launch with agent tools starts one)."""
    subprocess.run([*corral_command(), "daemon", "stop"], env=env, cwd=cwd, capture_output=True, check=False)


def fake_claude(root: Path, env: dict[str, str], scenario: dict[str, Any], agent: Path | None = None) -> Path:
    """Set ``env`` up for the scripted fake agent as Claude Code, with the sandbox as a person has it.

    A sandboxed turn sees neither ``/tmp`` nor the home beyond the harness's own state, so the
    scenario and the record live where Claude Code keeps its state (``~/.claude``, of a home of the
    run's own); the agent's executable is put back read-only by the sandbox. Returns the record directory.
    """
    from corral.testing.fake_agent import wrapper_script

    home = root / "person"
    state = home / ".claude" / "cache"
    record = state / "record"
    record.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.com\n")
    path = state / "scenario.json"
    path.write_text(json.dumps(scenario))
    env.update(
        {
            "HOME": str(home),
            "CORRAL_CLAUDE_BIN": str(agent or wrapper_script(root / "bin")),
            "CORRAL_FAKE_SCENARIO": str(path),
            "CORRAL_FAKE_RECORD": str(record),
        }
    )
    env.pop("GIT_CONFIG_GLOBAL", None)
    env.pop("XDG_CONFIG_HOME", None)
    return record


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
