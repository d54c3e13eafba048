#!/usr/bin/env python
"""A fatal verdict in seconds: from the model server's first 401 to the task reading ``blocked``, per harness.

1. Makes a scratch git repository and CORRAL_HOME per harness, and a loopback scripted model
   server answering every request with HTTP 401: Anthropic Messages for Claude Code and Pi
   (tests/support/model_server.py; Pi through a custom provider in its ``models.json``), the
   Responses API for Codex (tests/support/responses_server.py; a provider in
   ``$CODEX_HOME/config.toml``).

2. ``--reps`` times per harness: creates a task and starts it with the real binary (pinned in
   ``.ci/install-agents``) at its DEFAULT retry settings — Claude Code on its own would retry the
   401 ten times over about 170 s, Codex five times. A watcher thread stamps the moment the
   server receives the first model request (its 401 goes out at once), and ``control.wait``
   (polling every 50 ms, reconciling as ``corral wait`` does) stamps the moment the task reads
   ``blocked``. It checks the cause is ``harness-not-authenticated`` and that the server saw
   exactly one model request.

3. Floors, measured in the same run: the harness's own start (``--version``), the bare interpreter and
   ``corral --version``.

4. With ``--baseline``, also runs Claude Code alone at its defaults against the same kind of
   server and times its first 401 to its exit: what the verdict took before corral read its
   retry lines.

Target: every run under 10 s from the first 401 to ``blocked``, for every harness.

Usage::

    .venv/bin/python bench/bench_fatal_verdict.py             # ~1 minute, all three harnesses
    .venv/bin/python bench/bench_fatal_verdict.py --harness codex --reps 10
    .venv/bin/python bench/bench_fatal_verdict.py --baseline  # adds ~3 minutes

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

from tests.support import codex as codex_support
from tests.support import pi as pi_support
from tests.support.claude import claude_argv, claude_bin, claude_env, claude_version
from tests.support.model_server import Error, ScriptedServer
from tests.support.responses_server import Error as ResponsesError
from tests.support.responses_server import ResponsesServer

from benchlib import (
    command_ms,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    percentile,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
    verdict,
)

TARGET_SECONDS = 10.0
HARNESSES = ("claude", "codex", "pi")
DISPLAY = {"claude": "Claude Code", "codex": "Codex", "pi": "Pi"}
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


def one_run(project: Any, server: Any, n: int, harness: str, model: str | None) -> dict[str, Any]:
    from corral.domain.actors import Actor
    from corral.engine.operations import control, tasks, turns

    task = tasks.create(project, f"Fatal verdict run {n}", actor=Actor.HUMAN, harness=harness, model=model)
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


class Rig:
    """One harness at its default retry settings, pointed at a loopback server answering 401."""

    def __init__(self, name: str, base: Path) -> None:
        self.name = name
        self.model: str | None = None
        home = base / f"{name}-home"
        if name == "claude":
            self.binary = claude_bin()
            self.version = claude_version(self.binary)
            self.server: Any = ScriptedServer([])
            self.env = claude_env(self.server, home, extra={"CLAUDE_CODE_MAX_RETRIES": None})
            self.env["HOME"] = str(home)
            self.env["CORRAL_CLAUDE_BIN"] = str(self.binary)
        elif name == "codex":
            self.binary = codex_support.codex_bin()
            self.version = codex_support.codex_version(self.binary)
            self.server = ResponsesServer([])
            # CODEX_HOME outside the temporary directory, as a user's ~/.codex is (its sandbox helper).
            self._home = codex_support.codex_home_outside_tmp()
            codex_home = self._home.__enter__()
            codex_support.write_provider_config(codex_home, self.server)
            self.env = {
                "CODEX_HOME": str(codex_home),
                codex_support.KEY_VARIABLE: codex_support.TEST_API_KEY,
                "CORRAL_CODEX_BIN": str(self.binary),
            }
        else:
            self.binary = pi_support.pi_bin()
            self.version = pi_support.pi_version(self.binary)
            self.server = ScriptedServer([])
            agent_dir = pi_support.write_user_provider(home / "pi-agent", self.server)
            self.env = {
                "PI_CODING_AGENT_DIR": str(agent_dir),
                pi_support.KEY_VARIABLE: pi_support.TEST_API_KEY,
                "CORRAL_PI_BIN": str(self.binary),
            }
            self.model = f"{pi_support.PROVIDER}/{pi_support.MODEL}"

    def script_401s(self) -> None:
        error = ResponsesError(401) if self.name == "codex" else Error(401)
        self.server.steps[self.server.consumed :] = [error] * SCRIPTED_401S

    def close(self) -> None:
        self.server.close()
        if self.name == "codex":
            self._home.__exit__(None, None, None)


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
    p.add_argument("--reps", type=int, default=5, help="timed runs per harness (default 5)")
    p.add_argument(
        "--harness", choices=HARNESSES, action="append", help="only this harness (repeatable; default: all three)"
    )
    p.add_argument("--baseline", action="store_true", help="also time Claude Code alone at its defaults (~3 minutes)")
    scratch_options(p)
    args = parse_args(p, {"reps": 1, "harness": ["claude"]}, argv)

    base = scratch_dir("fatal", args)
    result: dict[str, Any] = {
        "benchmark": "bench_fatal_verdict",
        "machine": machine(),
        "targets": {"first_401_to_blocked_max_s": TARGET_SECONDS},
        "load_before": load(),
        "harnesses": {},
    }
    ok = True
    saved = dict(os.environ)
    try:
        for name in args.harness or HARNESSES:
            ok &= measure_harness(name, base, args.reps, result)
        if args.baseline:
            server = ScriptedServer([Error(401)] * SCRIPTED_401S)
            try:
                (base / "cwd").mkdir()
                before = baseline(server, base / "claude-home-baseline", base / "cwd")
            finally:
                server.close()
            print(
                f"\n  baseline, Claude Code alone at its defaults: first 401 → exit {before['first_401_to_exit_s']} s, "
                f"{before['model_requests']} model requests, exit {before['exit_code']}"
            )
            result["baseline_cli_alone"] = before
    finally:
        os.environ.clear()
        os.environ.update(saved)
        drop_scratch(base, args.keep)
    return finish("bench_fatal_verdict", result, ok)


def measure_harness(name: str, base: Path, reps: int, result: dict[str, Any]) -> bool:
    rig = Rig(name, base)
    try:
        repo = make_repo(base / f"repo-{name}")
        env = hermetic_env(base / f"corral-home-{name}")
        env.update(rig.env)
        os.environ.clear()
        os.environ.update(env)  # the detached supervisor, and the CLI it launches, inherit it
        from corral.engine.project import Project

        project = Project.open(repo)
        print(f"\n{DISPLAY[name]} {rig.version} at its default retry settings; {reps} runs:")
        runs = []
        for n in range(1, reps + 1):
            rig.script_401s()
            run = one_run(project, rig.server, n, name, rig.model)
            runs.append(run)
            print(
                f"  run {n}: {run['status']} ({run['cause']}), {run['model_requests']} model request(s), "
                f"start → first 401 {run['start_to_first_401_s']} s, "
                f"first 401 → blocked {run['first_401_to_blocked_s']} s"
            )
        project.close()
        floors = {f"{name}_version_ms": command_ms([str(rig.binary), "--version"], env, repo, reps=3)}
        floors.update(startup_floors(env, repo, reps=3))
        report_floors(
            result.setdefault("harnesses", {}).setdefault(name, {}), floors, "the harness's own start, corral's"
        )
    finally:
        rig.close()
    times = [r["first_401_to_blocked_s"] for r in runs if r["first_401_to_blocked_s"] is not None]
    correct = all(r["correct"] for r in runs) and len(times) == len(runs)
    fast = bool(times) and max(times) < TARGET_SECONDS
    summary = {
        "median_s": round(median(times), 3) if times else None,
        "p90_s": round(percentile(times, 90), 3) if times else None,
        "max_s": round(max(times), 3) if times else None,
    }
    print(
        f"  first 401 → blocked: median {summary['median_s']} s, p90 {summary['p90_s']} s, "
        f"max {summary['max_s']} s  (target < {TARGET_SECONDS:g} s)  {verdict(fast)}"
    )
    print(f"  every run blocked, not authenticated, one model request: {verdict(correct)}")
    result["harnesses"][name] |= {
        "version": rig.version,
        "retry_settings": "defaults",
        "runs": runs,
        "first_401_to_blocked": summary,
        "verdicts": {"under_target": fast, "correct": correct},
    }
    return fast and correct


if __name__ == "__main__":
    sys.exit(main())
