#!/usr/bin/env python
"""Launch latency of a sandboxed turn against an unconfined one (docs/harnesses.md#sandbox).

The agent is a ``command`` harness script whose first line is the time it started
(``date +%s%N``): the figure is the time from the supervisor's attempt beginning
(``AttemptRunner.run``, the code the supervisor runs for every attempt: the harness's launch,
the sandbox's argv, the spawn) to the agent's first output, read back from the turn's
``output.log``. Each run alternates unconfined and sandboxed (``SandboxSpec`` of a real task
worktree: its git directories, the branch, corral's state hidden), ``--runs`` times.

For scale, the same script exec'd bare and behind the same ``bwrap`` prefix (no supervisor),
time to its first stdout line; and the probe ``sandbox = auto`` runs once per host and bubblewrap.

Also: a ``claude`` turn's prefix, with its configuration pinned read-only inside its state
directory (``prepare`` + the argv + exec to the first line), beside the bare exec; and a post-turn
check (``true``) run in the turn's sandbox (through ``AttemptRunner.confine_check``: the quarantine,
the ref guard's hooks) beside one run unconfined.

Targets: the sandbox adds under 50 ms (median) to an attempt's launch; the pinned configuration
under 50 ms over a bare exec; a confined check under 50 ms over an unconfined one.

    .venv/bin/python bench/bench_sandbox_launch.py [--runs 30]

Results are printed and written to bench/results/bench_sandbox_launch.json.
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
    verdict,
)
from corral.adapters import sandbox as sandboxing
from corral.adapters.harness import make_harness
from corral.adapters.harness.base import TurnRequest
from corral.engine.paths import OUTPUT_LOG
from corral.engine.runtime.attempts import AttemptRunner
from corral.engine.runtime.heartbeat import StatusReporter
from corral.engine.runtime.stopping import StopFlag

TARGET_MS = 50.0
AGENT = "#!/bin/sh\ndate +%s%N\necho done\n"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def setup(base: Path) -> tuple[Path, Path, Path, sandboxing.SandboxSpec]:
    repo = make_repo(base / "repo")
    state = base / "corral-home"
    worktree = state / "projects" / "p" / "worktrees" / "bench"
    worktree.parent.mkdir(parents=True)
    git(repo, "worktree", "add", "-q", "-b", "corral/bench", str(worktree), "HEAD")
    agent = base / "bin" / "agent"
    agent.parent.mkdir()
    agent.write_text(AGENT)
    agent.chmod(0o755)
    common = str((worktree / git(worktree, "rev-parse", "--git-common-dir")).resolve())
    git_dir = str((worktree / git(worktree, "rev-parse", "--git-dir")).resolve())
    spec = sandboxing.resolve(
        "bwrap", hidden=[str(state)], git_common_dir=common, git_dir=git_dir, branch="refs/heads/corral/bench"
    )
    assert spec.error is None, spec.error
    return worktree, agent, state, spec


def through_runner(base: Path, worktree: Path, agent: Path, spec: sandboxing.SandboxSpec | None, n: int) -> float:
    """ms from the attempt's start to the agent's first line, through the supervisor's AttemptRunner."""
    log_dir = base / "logs" / f"{'box' if spec else 'bare'}-{n}"
    log_dir.mkdir(parents=True)
    protocol = log_dir / "protocol"
    protocol.mkdir()
    harness = make_harness("command", {"command": str(agent)})
    status = StatusReporter(protocol, f"cmd-{n}", "start")
    runner = AttemptRunner(
        harness,
        worktree=worktree,
        log_dir=log_dir,
        command_id=f"cmd-{n}",
        secrets=[],
        status=status,
        stop=StopFlag(protocol),
        term_grace=1.0,
        sandbox=spec,
        read_only=False,
    )
    req = TurnRequest(prompt="go", cwd=str(worktree), kind="start", task_ref="bench", prompt_dir=str(log_dir))
    started = time.time_ns()
    run = runner.run(1, lambda: harness.work(req), 60.0)
    assert run.exit_code == 0, (run.exit_code, run.stderr_tail, run.spawn_error)
    first = (log_dir / OUTPUT_LOG).read_text().splitlines()[0]
    return (int(first) - started) / 1e6


def check_run(base: Path, worktree: Path, spec: sandboxing.SandboxSpec | None, n: int) -> float:
    """ms of a post-turn check (``true``) from its start to its end: in the turn's sandbox (``spec``,
    through the runner's ``confine_check``: its quarantine, its hooks) or unconfined."""
    from corral.engine.runtime import protocol as proto
    from corral.engine.runtime.check import run_check

    log_dir = base / "checks" / f"{'box' if spec else 'bare'}-{n}"
    (log_dir / "protocol").mkdir(parents=True)
    runner = AttemptRunner(
        make_harness("command", {"command": "/bin/true"}),
        worktree=worktree,
        log_dir=log_dir,
        command_id=f"chk-{n}",
        secrets=[],
        status=StatusReporter(log_dir / "protocol", f"chk-{n}", "start"),
        stop=StopFlag(log_dir / "protocol"),
        term_grace=1.0,
        sandbox=spec,
        read_only=False,
    )
    started = time.perf_counter()
    done = run_check(proto.CheckSpec("true", 60.0), worktree, [], 1.0, confine=runner.confine_check)
    ms = (time.perf_counter() - started) * 1000
    assert done is not None and done.exit_code == 0 and done.confinement == ("bwrap" if spec else "unconfined")
    return ms


def bare_exec(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.readline()
    ms = (time.perf_counter() - started) * 1000
    proc.wait()
    return ms


def main() -> int:
    parser = scratch_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--runs", type=int, default=30, help="launches of each kind")
    args = parse_args(parser, {"runs": 1})
    if sandboxing.find_bwrap() is None:
        print(f"bubblewrap is not installed: {sandboxing.INSTALL_HINT}")
        return 1
    base = scratch_dir("sandbox-launch", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "runs": args.runs}
    try:
        worktree, agent, state, spec = setup(base)
        os.environ["CORRAL_HOME"] = str(state)
        unconfined: list[float] = []
        sandboxed: list[float] = []
        for n in range(args.runs + 2):  # the first two of each warm the caches, and are dropped
            u = through_runner(base, worktree, agent, None, n)
            s = through_runner(base, worktree, agent, spec, n)
            if n >= 2:
                unconfined.append(u)
                sandboxed.append(s)
        prefix, _ = sandboxing.bwrap_argv(
            spec, worktree=str(worktree), program=str(agent), harness="command", read_only=False, env=os.environ
        )
        bare = [bare_exec([str(agent)], worktree) for _ in range(args.runs)]
        boxed = [bare_exec([*prefix, str(agent)], worktree) for _ in range(args.runs)]
        # Claude Code's state with its configuration pinned read-only (a home of its own, made as a
        # person's would be): what a confined claude turn's prefix costs beyond the command's.
        home = base / "home"
        (home / ".claude" / "projects").mkdir(parents=True)
        (home / ".claude" / "settings.json").write_text("{}\n")
        (home / ".claude.json").write_text("{}\n")
        claude_env = {**os.environ, "HOME": str(home)}
        pinned: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            sandboxing.prepare(spec, "claude", claude_env)
            claude_prefix, _ = sandboxing.bwrap_argv(
                spec, worktree=str(worktree), program=str(agent), harness="claude", read_only=False, env=claude_env
            )
            made = (time.perf_counter() - t0) * 1000
            pinned.append(made + bare_exec([*claude_prefix, str(agent)], worktree))
        checks_bare: list[float] = []
        checks_boxed: list[float] = []
        for n in range(args.runs + 2):
            u = check_run(base, worktree, None, n)
            c = check_run(base, worktree, spec, n)
            if n >= 2:
                checks_bare.append(u)
                checks_boxed.append(c)
        probes = []
        for _ in range(max(5, args.runs // 3)):
            sandboxing._probed.clear()  # no answer kept in this process, none on disk (no cache given)
            started = time.perf_counter()
            assert sandboxing.probe(spec.bwrap or "bwrap") is None
            probes.append((time.perf_counter() - started) * 1000)
    finally:
        drop_scratch(base, args.keep)
    added = median(sandboxed) - median(unconfined)
    check_added = median(checks_boxed) - median(checks_bare)
    claude_added = median(pinned) - median(bare)
    ok = added < TARGET_MS and check_added < TARGET_MS and claude_added < TARGET_MS
    result.update(
        {
            "unconfined_ms": unconfined,
            "sandboxed_ms": sandboxed,
            "bare_exec_ms": bare,
            "bwrap_exec_ms": boxed,
            "probe_ms": probes,
            "added_ms": added,
            "claude_pinned_exec_ms": pinned,
            "claude_added_ms": claude_added,
            "check_unconfined_ms": checks_bare,
            "check_sandboxed_ms": checks_boxed,
            "check_added_ms": check_added,
            "bwrap_mounts": sum(1 for a in prefix if a.startswith("--") and ("bind" in a or a == "--tmpfs")),
        }
    )
    print(f"attempt start → agent's first line, through the supervisor's AttemptRunner ({args.runs} runs each):")
    print(f"  unconfined: median {median(unconfined):.1f} ms, p90 {percentile(unconfined, 90):.1f} ms")
    print(f"  sandboxed:  median {median(sandboxed):.1f} ms, p90 {percentile(sandboxed, 90):.1f} ms")
    print(f"  added by the sandbox: {added:.1f} ms (target < {TARGET_MS:.0f} ms) {verdict(added < TARGET_MS)}")
    print(f"exec → first line, no supervisor: bare median {median(bare):.1f} ms, behind bwrap {median(boxed):.1f} ms")
    print(
        f"claude's configuration pinned (prepare + argv + exec → first line): median {median(pinned):.1f} ms, "
        f"{claude_added:.1f} ms over bare (target < {TARGET_MS:.0f} ms) "
        f"{'PASS' if claude_added < TARGET_MS else 'FAIL'}"
    )
    print(
        f"post-turn check `true`: unconfined median {median(checks_bare):.1f} ms, in the sandbox "
        f"{median(checks_boxed):.1f} ms: {check_added:.1f} ms added (target < {TARGET_MS:.0f} ms) "
        f"{'PASS' if check_added < TARGET_MS else 'FAIL'}"
    )
    print(f"the auto probe (once per host and bubblewrap, kept under CORRAL_HOME): median {median(probes):.1f} ms")
    floors = {
        "unconfined_attempt_ms": median(unconfined),
        "bare_exec_ms": median(bare),
        "unconfined_check_ms": median(checks_bare),
    }
    report_floors(result, floors, "each beside its sandboxed figure, interleaved")
    return finish("bench_sandbox_launch", result, ok)


if __name__ == "__main__":
    sys.exit(main())
