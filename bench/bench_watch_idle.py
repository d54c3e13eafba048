#!/usr/bin/env python
"""``corral watch`` while nothing happens: the CPU it uses, as a share of one core.

1. Makes a scratch git repository and CORRAL_HOME with a few tasks: ``--backlog`` in backlog,
   one blocked (its turn ended), and ``--working`` working, each under its real supervisor
   running an agent (the ``command`` harness) that sleeps without a word: the board has
   supervisor files and logs to watch, and nothing changes.

2. Runs ``corral watch`` on a pseudo-terminal (the live board: alternate screen, key mode) and
   ``corral watch --plain`` on a pipe, side by side; after ``--warmup`` seconds, reads each one's
   CPU time (user + system, its own and its children's: ``/proc/PID/stat``) over ``--seconds``
   seconds.

Target: each under 1 % of a core. Usage::

    .venv/bin/python bench/bench_watch_idle.py              # ~30 s
    .venv/bin/python bench/bench_watch_idle.py --seconds 60

Results are printed and written to bench/results/bench_watch_idle.json.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

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

TARGET_PCT = 1.0

#: The agent: ends its turn at once while "hold" is missing beside it, else sleeps, silent.
AGENT = """\
import os, sys, time
if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold")):
    print("done")
    sys.exit(0)
time.sleep(3600)
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, with its children's that it waited for (the git a
    settled read runs)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def drain(fds: list[int], seconds: float) -> None:
    """Read whatever the watches write, for ``seconds``, so neither ever blocks on a full buffer."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select(fds, [], [], left)
        for fd in ready:
            try:
                os.read(fd, 65536)
            except OSError:
                fds.remove(fd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="how long the idle CPU is measured (default 20)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds after the start before measuring (default 3)")
    p.add_argument("--backlog", type=int, default=3, help="tasks in backlog (default 3)")
    p.add_argument("--working", type=int, default=2, help="working tasks, each with a live supervisor (default 2)")
    scratch_options(p)
    args = parse_args(p, {"seconds": 1.0, "warmup": 0.5, "backlog": 1, "working": 1}, argv)

    base = scratch_dir("watch-idle", args)
    repo = make_repo(base / "repo")
    # Outside /tmp (a sandboxed turn has a /tmp of its own) and the home (hidden but for the harness's
    # state): /var/tmp is seen read-only inside the sandbox, as a person's script on disk would be.
    agent = Path(
        tempfile.mkdtemp(prefix="corral-bench-watch-agent-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    )
    agent = agent / "agent.py"
    agent.write_text(AGENT)
    env = hermetic_env(
        base / "home",
        base / "pycache",
        {
            "CORRAL_HARNESS": "command",
            "CORRAL_COMMAND": f"{sys.executable} {agent}",
            "CORRAL_AGENT_TOOLS": "0",
            "GIT_AUTHOR_NAME": "Bench",
            "GIT_AUTHOR_EMAIL": "bench@example.com",
            "GIT_COMMITTER_NAME": "Bench",
            "GIT_COMMITTER_EMAIL": "bench@example.com",
        },
    )
    corral = corral_command()

    def run(*a: str) -> None:
        subprocess.run([*corral, *a], cwd=repo, env=env, check=True, capture_output=True, timeout=120)

    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "args": vars(args)}
    working: list[str] = []
    watches: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(args.backlog):
            run("create", f"Backlog task {i}", "--ref", f"later-{i}")
        run("create", "A finished turn", "--ref", "review-me")
        run("start", "review-me", "--wait", "--timeout", "60")
        (agent.parent / "hold").touch()
        for i in range(args.working):  # they run with the sandbox as a person has it
            ref = f"busy-{i}"
            run("create", f"Working task {i}", "--ref", ref)
            run("start", ref)
            working.append(ref)

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        board = subprocess.Popen([*corral, "watch"], cwd=repo, env=env, stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        plain = subprocess.Popen(
            [*corral, "watch", "--plain"],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        # The floor: an interpreter that only sleeps, measured over the same window.
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=env)
        watches = [board, plain, idle]
        assert plain.stdout is not None
        fds = [master, plain.stdout.fileno()]
        drain(fds, args.warmup)
        before = {w.pid: cpu_seconds(w.pid) for w in watches}
        start = time.monotonic()
        drain(fds, args.seconds)
        wall = time.monotonic() - start
        used = {w.pid: cpu_seconds(w.pid) - before[w.pid] for w in watches}
        for w in watches:
            if w.poll() is not None:
                raise RuntimeError(f"a watch exited early (exit {w.returncode})")
        os.close(master)
    finally:
        for w in watches:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                w.wait(timeout=10)
        for ref in working:
            subprocess.run([*corral, "stop", ref], cwd=repo, env=env, capture_output=True, timeout=60)

    ok = True
    print(f"Idle `corral watch` over {wall:.1f} s ({args.backlog} backlog, 1 blocked, {args.working} working):")
    for name, proc in (("live board on a terminal", board), ("--plain on a pipe", plain)):
        pct = used[proc.pid] / wall * 100
        passed = pct < TARGET_PCT
        ok = ok and passed
        result[name] = {"cpu_s": round(used[proc.pid], 3), "wall_s": round(wall, 2), "pct_of_core": round(pct, 3)}
        print(f"  {name:<26} {used[proc.pid]:.3f} s CPU = {pct:.2f} % of a core   [{verdict(passed)} < {TARGET_PCT} %]")
    floor = {"sleeping_interpreter_cpu_ms": used[idle.pid] * 1000}
    report_floors(result, floor, f"an interpreter that only sleeps, over the same {wall:.1f} s")
    drop_scratch(base, args.keep)
    shutil.rmtree(agent.parent, ignore_errors=True)
    return finish("bench_watch_idle", result, ok)


if __name__ == "__main__":
    sys.exit(main())
