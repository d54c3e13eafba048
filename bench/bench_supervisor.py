"""Supervisor overhead and turn-launch latency.

* peak RSS of the supervisor process while its agent streams 100 MB (target < 40 MB);
* CPU the supervisor uses while its agent is idle for a minute (target < 1 % of a core);
* copy rate while the agent streams 100 MB of stream-json (target ≥ 100 MB/s);
* latency from the CLI's start to the agent process receiving its argv: ``unblock``
  (target < 300 ms median) and ``start``, which makes a worktree (target < 500 ms median),
  each beside its floor measured in the same run: ``git worktree add -b`` + the exec of the
  same stamping agent (and the exec alone for ``unblock``).

The turns run with the sandbox as a person has it (bubblewrap when installed); every scenario
stops the home daemon its launches started, and the run ends by checking nothing it started runs.

The agent is corral's scripted fake agent behind a tiny shell wrapper that stamps the
time the instant it is exec'd with its argv, before any Python starts.

    .venv/bin/python bench/bench_supervisor.py [--idle 60] [--mb 100] [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
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
from corral.testing import fake_agent

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stamping_agent(directory: Path) -> Path:
    """A `claude` that records the exec time (ns) with its argv, then runs the fake agent."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "claude"
    path.write_text(
        "#!/bin/sh\n"
        'date +%s%N >> "$CORRAL_FAKE_RECORD/exec-times"\n'
        f'exec {shlex.quote(sys.executable)} {shlex.quote(fake_agent.__file__)} "$@"\n'  # as wrapper_script runs it
    )
    path.chmod(0o755)
    return path


class Setup:
    def __init__(self, root: Path, invocations: list[list[dict[str, object]]]) -> None:
        self.root = root
        self.repo = make_repo(root / "repo")
        self.env = hermetic_env(root / "home", pycache=root.parent / "pycache")
        self.agent = stamping_agent(root / "bin")
        self.record = fake_claude(
            root, self.env, {"invocations": invocations, "default": [{"init": True}, {"result": "ok"}]}, self.agent
        )
        self.env["CORRAL_WATCHDOG_TIMEOUT"] = "600"
        self.cmd = corral_command()
        self._state: Path | None = None

    def close(self) -> None:
        stop_daemon(self.env, self.repo)

    def script(self, invocations: list[list[dict[str, object]]]) -> None:
        """The agent's script from its next start on, counted anew (no agent of the home runs meanwhile)."""
        path = Path(self.env["CORRAL_FAKE_SCENARIO"])
        path.write_text(json.dumps({**json.loads(path.read_text()), "invocations": invocations}))
        (self.record / "fake-agent.count").unlink(missing_ok=True)

    def corral(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.cmd, *args], cwd=self.repo, env=self.env, capture_output=True, text=True, check=True
        )

    def exec_times(self) -> list[int]:
        path = self.record / "exec-times"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def state(self) -> Path:
        """The home's state directory (asked of corral once: it stays where it is)."""
        if self._state is None:
            self._state = Path(json.loads(self.corral("paths", "--json").stdout)["paths"]["state"])
        return self._state


def proc_stat(pid: int) -> tuple[float, int] | None:
    """(cpu seconds, peak RSS bytes) of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):  # ended, not yet reaped (a parent that adopts orphans may never reap it)
        return None
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    hwm = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return cpu, hwm


def supervisor_pid(setup: Setup, ref: str) -> int:
    task_id = json.loads(setup.corral("show", ref, "--json").stdout)["task"]["id"]
    status = setup.state() / "tasks" / task_id / "protocol" / "status.json"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return int(json.loads(status.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.01)
    raise RuntimeError("no supervisor")


def streaming(megabytes: int) -> list[dict[str, object]]:
    return [{"init": True}, {"bytes": megabytes * 1_000_000}, {"result": "done"}]


def idling(idle: float) -> list[dict[str, object]]:
    return [{"init": True}, {"sleep": idle + 5}, {"result": "done"}]


#: The turns of the latency runs: each answers at once.
QUICK_TURN: list[dict[str, object]] = [{"init": True}, {"result": "ok"}]


def bench_stream(tmp: Path, megabytes: int) -> dict[str, float]:
    setup = Setup(tmp / "stream", [streaming(megabytes)])
    try:
        return _stream(setup)
    finally:
        setup.close()


def _stream(setup: Setup) -> dict[str, float]:
    setup.corral("create", "Stream a lot", "--ref", "stream")
    setup.corral("start", "stream")
    pid = supervisor_pid(setup, "stream")
    peak = 0
    while (sample := proc_stat(pid)) is not None:
        peak = max(peak, sample[1])
        time.sleep(0.02)
    setup.corral("wait", "stream")
    task_id = json.loads(setup.corral("show", "stream", "--json").stdout)["task"]["id"]
    turn_dir = setup.state() / "tasks" / task_id / "turns" / "1"
    response = json.loads((turn_dir / "response.json").read_text())
    attempt = response["attempts"][0]
    from datetime import datetime

    seconds = (
        datetime.fromisoformat(attempt["ended_at"].replace("Z", "+00:00"))
        - datetime.fromisoformat(attempt["started_at"].replace("Z", "+00:00"))
    ).total_seconds()
    size = (turn_dir / "output.log").stat().st_size
    return {"peak_rss_mb": peak / 1e6, "bytes": size, "seconds": seconds, "mb_per_s": size / 1e6 / seconds}


def bench_idle(tmp: Path, idle: float) -> dict[str, float]:
    setup = Setup(tmp / "idle", [idling(idle)])
    try:
        return _idle(setup, idle)
    finally:
        setup.close()


def _idle(setup: Setup, idle: float) -> dict[str, float]:
    setup.corral("create", "Sit idle", "--ref", "idle")
    setup.corral("start", "idle")
    pid = supervisor_pid(setup, "idle")
    time.sleep(1.0)
    before = proc_stat(pid)
    time.sleep(idle)
    after = proc_stat(pid)
    assert before is not None and after is not None
    setup.corral("stop", "idle")
    cpu = after[0] - before[0]
    return {
        "idle_seconds": idle,
        "cpu_seconds": cpu,
        "percent_of_a_core": 100 * cpu / idle,
        "peak_rss_mb": after[1] / 1e6,
    }


def bench_latency(tmp: Path, runs: int) -> dict[str, list[float]]:
    setup = Setup(tmp / "latency", [QUICK_TURN] * (2 * runs + 2))
    try:
        return _latency(setup, runs)
    finally:
        setup.close()


def floor_ms(setup: Setup, i: int) -> tuple[float, float]:
    """(``git worktree add -b`` + the agent's exec, the exec alone): the floors of start and unblock."""
    record = setup.root / "floor-record"
    record.mkdir(exist_ok=True)
    env = {**setup.env, "CORRAL_FAKE_RECORD": str(record), "CORRAL_FAKE_SCENARIO": os.devnull}
    stamps = record / "exec-times"
    seen = len(stamps.read_text().split()) if stamps.exists() else 0
    t0 = time.time_ns()
    subprocess.run(
        ["git", "worktree", "add", "-q", "-b", f"floor{i}", str(setup.root / f"floor{i}")],
        cwd=setup.repo,
        check=True,
        capture_output=True,
    )
    t1 = time.time_ns()
    subprocess.run([str(setup.agent), "--version"], env=env, capture_output=True, check=False)
    times = [int(x) for x in stamps.read_text().split()][seen:] if stamps.exists() else []
    if not times:
        raise SystemExit("the floor's agent recorded no exec")
    return (times[0] - t0) / 1e6, (times[0] - t1) / 1e6


def _latency(setup: Setup, runs: int) -> dict[str, list[float]]:
    start_ms, unblock_ms, floor_start, floor_exec = [], [], [], []
    for i in range(runs):
        ref = f"t{i}"
        setup.corral("create", f"Task {i}", "--ref", ref)
        seen = len(setup.exec_times())
        t0 = time.time_ns()
        setup.corral("start", ref)
        while len(setup.exec_times()) == seen:
            time.sleep(0.001)
        start_ms.append((setup.exec_times()[-1] - t0) / 1e6)
        setup.corral("wait", ref)
        seen = len(setup.exec_times())
        t0 = time.time_ns()
        setup.corral("unblock", ref, "-m", "again")
        while len(setup.exec_times()) == seen:
            time.sleep(0.001)
        unblock_ms.append((setup.exec_times()[-1] - t0) / 1e6)
        setup.corral("wait", ref)
        worktree_and_exec, exec_alone = floor_ms(setup, i)
        floor_start.append(worktree_and_exec)
        floor_exec.append(exec_alone)
    return {"start_ms": start_ms, "unblock_ms": unblock_ms, "floor_start_ms": floor_start, "floor_exec_ms": floor_exec}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of agent idleness to measure")
    parser.add_argument("--mb", type=int, default=100, help="megabytes the agent streams")
    parser.add_argument("--runs", type=int, default=10, help="launches for the latency figures")
    scratch_options(parser)
    args = parse_args(parser, {"idle": 1.0, "mb": 1, "runs": 1})
    load_before = load()
    root = scratch_dir("supervisor", args)
    try:
        if args.quick:
            # One home for the three (one daemon started, not three): the same tasks, turns and figures, the
            # agent scripted anew for each.
            setup = Setup(root / "quick", [streaming(args.mb)])
            try:
                stream = _stream(setup)
                setup.script([idling(args.idle)])
                idle = _idle(setup, args.idle)
                setup.script([QUICK_TURN] * (2 * args.runs + 2))
                latency = _latency(setup, args.runs)
            finally:
                setup.close()
        else:
            stream = bench_stream(root, args.mb)
            idle = bench_idle(root, args.idle)
            latency = bench_latency(root, args.runs)
    finally:
        drop_scratch(root, args.keep)
    rss_ok = max(stream["peak_rss_mb"], idle["peak_rss_mb"]) < 40
    idle_ok = idle["percent_of_a_core"] < 1.0
    copy_ok = stream["mb_per_s"] >= 100
    s_med, u_med = median(latency["start_ms"]), median(latency["unblock_ms"])
    print(
        f"supervisor peak RSS: {stream['peak_rss_mb']:.1f} MB streaming, {idle['peak_rss_mb']:.1f} MB idle "
        f"(target < 40 MB) {verdict(rss_ok)}"
    )
    print(
        f"supervisor CPU while the agent idles {idle['idle_seconds']:.0f} s: {idle['cpu_seconds']:.3f} s = "
        f"{idle['percent_of_a_core']:.2f} % of a core (target < 1 %) {verdict(idle_ok)}"
    )
    print(
        f"copy rate: {stream['bytes'] / 1e6:.0f} MB in {stream['seconds']:.2f} s = {stream['mb_per_s']:.0f} MB/s "
        f"(target ≥ 100 MB/s) {verdict(copy_ok)}"
    )
    print(
        f"CLI → agent argv, start: median {s_med:.0f} ms, p90 {percentile(latency['start_ms'], 90):.0f} ms "
        f"(target < 500 ms) {verdict(s_med < 500)}; floor `git worktree add -b` + exec "
        f"{median(latency['floor_start_ms']):.0f} ms ({s_med / median(latency['floor_start_ms']):.1f}×)"
    )
    print(
        f"CLI → agent argv, unblock: median {u_med:.0f} ms, p90 {percentile(latency['unblock_ms'], 90):.0f} ms "
        f"(target < 300 ms) {verdict(u_med < 300)}; floor the exec alone {median(latency['floor_exec_ms']):.0f} ms"
    )
    ok = rss_ok and idle_ok and copy_ok and s_med < 500 and u_med < 300
    doc = {"machine": machine(), "load_before": load_before, "stream": stream, "idle": idle, "latency": latency}
    return finish("supervisor", doc, ok)


if __name__ == "__main__":
    sys.exit(main())
