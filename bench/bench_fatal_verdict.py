#!/usr/bin/env python
"""A fatal verdict in seconds: from the model server's first 401 to the task reading ``blocked``.

1. Makes a scratch git repository and CORRAL_HOME, and a loopback scripted Anthropic Messages
   server (tests/support/model_server.py) that answers every model request with HTTP 401.

2. ``--reps`` times: creates a task and starts it with the real Claude Code CLI (the pinned
   binary of ``.ci/install-agents``) at its DEFAULT retry settings — no
   ``CLAUDE_CODE_MAX_RETRIES``, so on its own it would retry the 401 ten times over about
   170 s. A watcher thread stamps the moment the server receives the first model request
   (its 401 goes out at once), and ``control.wait`` (polling every 50 ms, reconciling as
   ``corral wait`` does) stamps the moment the task reads ``blocked``. It checks the cause is
   ``harness-not-authenticated`` and that the server saw exactly one model request.

3. With ``--baseline``, also runs the CLI alone at its defaults against the same server and
   times its first 401 to its exit: what the verdict took before corral read its retry lines.

Target: every run under 10 s from the first 401 to ``blocked``.

Usage::

    .venv/bin/python bench/bench_fatal_verdict.py             # ~30 s
    .venv/bin/python bench/bench_fatal_verdict.py --reps 10 --baseline   # adds ~3 minutes

Results are printed and written to bench/results/bench_fatal_verdict.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.claude import claude_argv, claude_bin, claude_env, claude_version
from tests.support.model_server import Error, ScriptedServer

from benchlib import (
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    percentile,
    scratch_dir,
    scratch_options,
    verdict,
)

TARGET_SECONDS = 10.0
#: Enough 401s for the CLI's own ten retries and more: a relaunch would be seen, not starved.
SCRIPTED_401S = 50


class FirstRequest:
    """Stamps (monotonic) when the server has received ``count`` more model requests than now."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.before = len(server.script_requests)
        self.at: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._done = threading.Event()
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            if len(self.server.script_requests) > self.before:
                self.at = time.monotonic()
                return
            time.sleep(0.002)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=1)

    @property
    def requests(self) -> int:
        return len(self.server.script_requests) - self.before


def one_run(project: Any, server: ScriptedServer, n: int) -> dict[str, Any]:
    from corral.domain.actors import Actor
    from corral.engine.operations import control, tasks, turns

    task = tasks.create(project, f"Fatal verdict run {n}", actor=Actor.HUMAN)
    watcher = FirstRequest(server)
    began = time.monotonic()
    turns.start(project, task.ref, actor=Actor.HUMAN)
    result = control.wait(project, task.ref, timeout=240, poll=0.05)
    rested = time.monotonic()
    time.sleep(1.0)  # a relaunch (or the CLI's own retry) would reach the server by now
    watcher.stop()
    first = watcher.at
    cause = result.task.resting_cause.code if result.task.resting_cause else None
    return {
        "status": result.task.status.value,
        "cause": cause,
        "model_requests": watcher.requests,
        "start_to_first_401_s": round(first - began, 3) if first is not None else None,
        "first_401_to_blocked_s": round(rested - first, 3) if first is not None else None,
        "correct": result.task.status.value == "blocked"
        and cause == "harness-not-authenticated"
        and watcher.requests == 1,
    }


def baseline(server: ScriptedServer, home: Path, cwd: Path) -> dict[str, Any]:
    """The CLI alone at its defaults: its first 401 to its own exit."""
    env = claude_env(server, home, extra={"CLAUDE_CODE_MAX_RETRIES": None})
    watcher = FirstRequest(server)
    proc = subprocess.run(claude_argv("hi"), cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    ended = time.monotonic()
    watcher.stop()
    return {
        "exit_code": proc.returncode,
        "model_requests": watcher.requests,
        "first_401_to_exit_s": round(ended - watcher.at, 1) if watcher.at is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5, help="timed runs (default 5)")
    p.add_argument("--baseline", action="store_true", help="also time the CLI alone at its defaults (~3 minutes)")
    scratch_options(p)
    args = p.parse_args(argv)

    base = scratch_dir("fatal", args)
    binary = claude_bin()
    result: dict[str, Any] = {
        "benchmark": "bench_fatal_verdict",
        "machine": machine(),
        "harness": {"name": "claude", "version": claude_version(binary), "retry_settings": "defaults"},
        "targets": {"first_401_to_blocked_max_s": TARGET_SECONDS},
        "load_before": load(),
    }
    ok = True
    server = ScriptedServer([Error(401)] * SCRIPTED_401S)
    try:
        repo = make_repo(base / "repo")
        claude_home = base / "claude-home"
        env = claude_env(server, claude_home, extra={"CLAUDE_CODE_MAX_RETRIES": None})
        env.update(hermetic_env(base / "home", extra={"CORRAL_CLAUDE_BIN": str(binary)}))
        env["HOME"] = str(claude_home)
        os.environ.clear()
        os.environ.update(env)  # the detached supervisor, and the CLI it launches, inherit it
        from corral.engine.project import Project

        project = Project.open(repo)
        print(f"Claude Code {result['harness']['version']} at its default retry settings; {args.reps} runs:")
        runs = []
        for n in range(1, args.reps + 1):
            server.steps[server.consumed :] = [Error(401)] * SCRIPTED_401S
            run = one_run(project, server, n)
            runs.append(run)
            print(
                f"  run {n}: {run['status']} ({run['cause']}), {run['model_requests']} model request(s), "
                f"start → first 401 {run['start_to_first_401_s']} s, "
                f"first 401 → blocked {run['first_401_to_blocked_s']} s"
            )
        project.close()
        times = [r["first_401_to_blocked_s"] for r in runs if r["first_401_to_blocked_s"] is not None]
        correct = all(r["correct"] for r in runs) and len(times) == len(runs)
        fast = bool(times) and max(times) < TARGET_SECONDS
        ok = correct and fast
        summary = {
            "median_s": round(median(times), 3) if times else None,
            "p90_s": round(percentile(times, 90), 3) if times else None,
            "max_s": round(max(times), 3) if times else None,
        }
        print(
            f"\n  first 401 → blocked: median {summary['median_s']} s, p90 {summary['p90_s']} s, "
            f"max {summary['max_s']} s  (target < {TARGET_SECONDS:g} s)  {verdict(fast)}"
        )
        print(f"  every run blocked, not authenticated, one model request: {verdict(correct)}")
        result["runs"] = runs
        result["first_401_to_blocked"] = summary
        result["verdicts"] = {"under_target": fast, "correct": correct}
        if args.baseline:
            server.steps[server.consumed :] = [Error(401)] * SCRIPTED_401S
            (base / "cwd").mkdir()
            before = baseline(server, base / "claude-home-baseline", base / "cwd")
            print(
                f"\n  baseline, the CLI alone at its defaults: first 401 → exit {before['first_401_to_exit_s']} s, "
                f"{before['model_requests']} model requests, exit {before['exit_code']}"
            )
            result["baseline_cli_alone"] = before
    finally:
        server.close()
        drop_scratch(base, args.keep)
    return finish("bench_fatal_verdict", result, ok)


if __name__ == "__main__":
    sys.exit(main())
