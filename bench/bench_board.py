#!/usr/bin/env python
"""``corral watch``'s live board (the Textual app) on a big store: time to the first full screen, idle CPU, memory.

1. A scratch repository whose store ``seed_store.py`` fills with 10,000 tasks, 100 of them working
   (each with a supervisor's ``status.json`` naming a live process, so the board reads them as
   running and watches their files), the rest as the seed spreads them (blocked, conflict,
   submitted, backlog, and the finished majority).
2. ``corral watch`` runs on a pseudo-terminal of 120×40, as a person starts it: the time from the
   process's start to the first full screen — its title with the count of unfinished tasks and
   its key line, both drawn only once the board is read and laid out — is measured ``--runs``
   times (the median is judged).
3. The last run stays: after ``--warmup`` seconds, its CPU over ``--seconds`` (as a share of one
   core) and its memory (resident set, and its peak).

Targets: first full screen under 500 ms, idle under 1 % of a core, memory under 120 MB. The CPU the
board used until its first screen is printed beside the time: on a machine busy with other work the
wall clock waits for the CPU, and that figure says how much of the time was the board's own.

Usage::

    .venv/bin/python bench/bench_board.py              # ~1 min
    .venv/bin/python bench/bench_board.py --quick      # runs whole, judges nothing

Results are printed and written to bench/results/bench_board.json.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    command_ms,
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
    startup_floors,
    verdict,
)

FIRST_SCREEN_MS = 500.0
IDLE_PCT = 1.0
MEMORY_MB = 120.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, with its waited-for children's."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> tuple[float, float]:
    """The resident set of ``pid`` now and at its peak, in MB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


class Board:
    """``corral watch`` on a pseudo-terminal of its own, its output read (and kept) as it comes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        self.out = bytearray()

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                return
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.out += data

    def first_screen(self, timeout: float = 60.0) -> tuple[float, float]:
        """Seconds from the start until the title's count and the key line are both on the screen, and the
        CPU seconds the board used until then (what a loaded machine's wall clock adds to is not in it)."""
        end = self.started + timeout
        while time.monotonic() < end:
            self.read(0.01)
            if b"unfinished" in self.out and b"q quit" in self.out:
                return time.monotonic() - self.started, cpu_seconds(self.proc.pid)
            if self.proc.poll() is not None:
                raise RuntimeError(f"the board exited (exit {self.proc.returncode}): {bytes(self.out[-2000:])!r}")
        raise RuntimeError(f"no full screen after {timeout} s: {bytes(self.out[-2000:])!r}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.write(self.master, b"q")
            end = time.monotonic() + 10
            while self.proc.poll() is None and time.monotonic() < end:
                self.read(0.05)  # what it writes on its way out is read, as a terminal would
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=10)
        os.close(self.master)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the store (default 10,000)")
    p.add_argument("--working", type=int, default=100, help="working tasks, each with a live status (default 100)")
    p.add_argument("--runs", type=int, default=5, help="starts timed to the first full screen (default 5)")
    p.add_argument("--seconds", type=float, default=20.0, help="how long the idle CPU is measured (default 20)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds after the first screen before measuring")
    scratch_options(p)
    args = parse_args(p, {"tasks": 400, "working": 5, "runs": 1, "seconds": 1.0, "warmup": 0.5}, argv)

    base = scratch_dir("board", args)
    repo = make_repo(base / "repo")
    env = hermetic_env(base / "home", base / "pycache")
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "args": vars(args)}
    # The process the seeded supervisors' status files name: alive for the whole run, so every working
    # task reads as running and the board watches its files (as it watches a real turn's).
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(86400)"])
    boards: list[Board] = []
    try:
        seed = Path(__file__).resolve().parent / "seed_store.py"
        shape = ["--tasks", str(args.tasks), "--working", str(args.working), "--interrupted", "0"]
        if args.quick:
            shape += ["--turns", str(args.tasks * 3), "--big-turns", "20", "--blocked", "20", "--backlog", "20"]
            shape += ["--conflict", "2", "--submitted", "2"]
        subprocess.run(
            [sys.executable, str(seed), "--repo", str(repo), *shape, "--live-pid", str(alive.pid)],
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        corral = corral_command()
        subprocess.run([*corral, "list"], cwd=repo, env=env, check=True, capture_output=True, timeout=120)  # settled

        firsts: list[float] = []
        cpus: list[float] = []
        for i in range(args.runs):
            board = Board([*corral, "watch"], repo, env)
            boards.append(board)
            wall, cpu = board.first_screen()
            firsts.append(wall)
            cpus.append(cpu)
            if i < args.runs - 1:
                board.stop()
                boards.remove(board)
        board = boards[-1]
        board.read(args.warmup)
        before = cpu_seconds(board.proc.pid)
        start = time.monotonic()
        board.read(args.seconds)
        while time.monotonic() - start < args.seconds:
            board.read(args.seconds - (time.monotonic() - start))
        wall = time.monotonic() - start
        used = cpu_seconds(board.proc.pid) - before
        rss, peak = memory_mb(board.proc.pid)
        if board.proc.poll() is not None:
            raise RuntimeError(f"the board exited early (exit {board.proc.returncode})")
    finally:
        for board in boards:
            board.stop()
        alive.kill()
        alive.wait()

    first_ms = statistics.median(firsts) * 1000
    first_cpu_ms = statistics.median(cpus) * 1000
    pct = used / wall * 100
    checks = [
        ("first full screen", f"{first_ms:.0f} ms (median of {len(firsts)}), {first_cpu_ms:.0f} ms of CPU",
         first_ms < FIRST_SCREEN_MS, f"< {FIRST_SCREEN_MS:.0f} ms"),
        ("idle CPU", f"{used:.3f} s over {wall:.1f} s = {pct:.2f} % of a core", pct < IDLE_PCT, f"< {IDLE_PCT} %"),
        ("memory", f"{rss:.1f} MB resident, {peak:.1f} MB at its peak", peak < MEMORY_MB, f"< {MEMORY_MB:.0f} MB"),
    ]  # fmt: skip
    result.update(
        {
            "first_screen_ms": [round(f * 1000, 1) for f in firsts],
            "first_screen_median_ms": round(first_ms, 1),
            "first_screen_cpu_ms": [round(c * 1000, 1) for c in cpus],
            "first_screen_cpu_median_ms": round(first_cpu_ms, 1),
            "idle_cpu_s": round(used, 3),
            "idle_wall_s": round(wall, 2),
            "idle_pct_of_core": round(pct, 3),
            "rss_mb": round(rss, 1),
            "peak_rss_mb": round(peak, 1),
        }
    )
    print(f"`corral watch` on a store of {args.tasks} tasks, {args.working} working:")
    ok = True
    for name, said, passed, target in checks:
        ok = ok and passed
        print(f"  {name:<18} {said:<60} [{verdict(passed)} {target}]")
    floors = startup_floors(env, repo)
    floors["import_textual_ms"] = round(command_ms([sys.executable, "-c", "import textual.app"], env, repo), 1)
    report_floors(result, floors, "what any board's start costs before it reads a task")
    drop_scratch(base, args.keep)
    return finish("bench_board", result, ok)


if __name__ == "__main__":
    sys.exit(main())
