"""The ``claude-500`` case of bench_time_to_rest: the real Claude Code CLI whose model answers HTTP 500 forever.

A loopback scripted model server (tests/support/model_server.py) answers every model request with
HTTP 500; the pinned ``claude`` binary (found as the seam tests find it, tests/support/claude.py)
runs at its own and corral's DEFAULT settings. From ``corral start`` (time 0) it samples, once a
second, the supervisor's ``status.json`` (phase, attempt, retry state) and, every few seconds,
``corral show``'s text, keeping each distinct "Stopped because"/retrying line. It stops when the task
is at rest for good or after ``observe`` seconds, then stops the task's processes by the pids corral
recorded (``reap_turn``), the daemon a run started, and the server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from benchlib import corral_command, hermetic_env, make_repo

#: Every request answered 500: far more steps than any run can take (one per model request).
STEPS = 100_000
SHOW_EVERY = 5.0


def _env(base: Path, server: Any) -> dict[str, str]:
    from tests.support.claude import claude_bin, claude_env

    home = base / f"claude-500-{len(list(base.glob('claude-500-*-repo')))}-home"
    env = hermetic_env(home, base / "pycache", {"CORRAL_HARNESS": "claude"})
    env.pop("CORRAL_AUTO_RESUME", None)  # the default: auto-resume on
    mine = claude_env(server, home.with_name(home.name + "-claude"), extra={"CLAUDE_CODE_MAX_RETRIES": None})
    for key in [k for k in env if k not in mine and not k.startswith("CORRAL_")]:
        env.pop(key)  # what claude_env drops (an outer ANTHROPIC_*, CLAUDE_*): never passed on
    env.update({k: v for k, v in mine.items() if not k.startswith("CORRAL_") and k not in ("COLUMNS", "NO_COLOR")})
    env["CORRAL_CLAUDE_BIN"] = str(claude_bin())
    return env


def _retry_lines(text: str) -> list[str]:
    keep = re.compile(r"Stopped because|retrying|Retrying|waiting to retry|Attempt \d+ of|Action required", re.I)
    return [line.strip() for line in text.splitlines() if keep.search(line)]


def run_claude_500(base: Path, n: int, observe: float, settings: dict[str, str] | None = None) -> dict[str, Any]:
    """One run; ``settings`` (CORRAL_* variables) only for a variant that says so, the case itself is at defaults."""
    from tests.support.model_server import Error, ScriptedServer

    server = ScriptedServer([Error(500, "Internal server error")] * STEPS)
    repo = make_repo(base / f"claude-500-{n}-repo")
    env = _env(base, server)
    env.update(settings or {})
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return _measure(repo, env, f"claude-500-run-{n}", observe, server)
    finally:
        subprocess.run([*corral_command(), "daemon", "stop"], cwd=repo, env=env, capture_output=True)
        os.environ.clear()
        os.environ.update(saved)
        server.close()


def _measure(repo: Path, env: dict[str, str], ref: str, observe: float, server: Any) -> dict[str, Any]:
    from corral.domain.status import Status
    from corral.engine.operations.auto_resume import resumable
    from corral.engine.project import Project
    from corral.engine.resolve import resolve_task
    from corral.engine.runtime import protocol as proto
    from corral.engine.runtime.processes import reap_turn

    corral = corral_command()
    subprocess.run([*corral, "create", "Say hello.", "--ref", ref], cwd=repo, env=env, check=True, capture_output=True)
    began, began_wall = time.monotonic(), time.time()
    subprocess.run([*corral, "start", ref], cwd=repo, env=env, check=True, capture_output=True)
    project = Project.open(repo)
    with project.store.read() as tx:
        task_id = resolve_task(tx, ref).id
    status_file = project.paths.protocol_dir(task_id) / proto.STATUS
    phases: list[dict[str, Any]] = []  # each change of (phase, attempt, retry) in status.json
    shows: list[dict[str, Any]] = []  # each distinct retry / Stopped-because text of `corral show`
    seen: set[str] = set()
    rest_seen = None
    show: tuple[float, subprocess.Popen[str]] | None = None
    last_show = -SHOW_EVERY
    last_key: Any = None
    try:
        while (now := time.monotonic() - began) < observe:
            raw = proto.read_raw(status_file) or {}
            retry = raw.get("retry") or None
            key = (raw.get("phase"), raw.get("attempt"), json.dumps(retry, sort_keys=True))
            if key != last_key:
                last_key = key
                phases.append({"t": round(now, 1), "phase": key[0], "attempt": key[1], "retry": retry})
            # `corral show` runs beside the 1 s poll (it settles, as any read does, and may auto-resume).
            if show is None and now - last_show >= SHOW_EVERY:
                last_show = now
                show = (
                    now,
                    subprocess.Popen(
                        [*corral, "show", ref],
                        cwd=repo,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                    ),
                )
            if show is not None and show[1].poll() is not None:
                asked, proc = show
                show = None
                lines = _retry_lines(proc.communicate()[0])
                shape = "\n".join(_shape(line) for line in lines)
                if lines and shape not in seen:
                    seen.add(shape)
                    shows.append({"t": round(asked, 1), "lines": lines})
                with project.store.read() as tx:
                    task = resolve_task(tx, ref)
                if task.status is not Status.WORKING and not resumable(project, task.id):
                    rest_seen = time.monotonic() - began
                    if shows and shows[-1]["lines"] == lines:
                        shows[-1]["at_rest"] = True
                    else:
                        shows.append({"t": round(asked, 1), "lines": lines, "at_rest": True})
                    break
            time.sleep(1.0)
        if show is not None:
            show[1].wait()
        with project.store.read() as tx:
            task = resolve_task(tx, ref)
            moves = tx.status_changes(task.id)
        # Still retrying: its supervisor and CLI are stopped by the pids corral recorded for them.
        reaped = [] if rest_seen is not None else reap_turn(project, task_id)
        receipt = project.paths.turn_dir(task_id, 1) / "response.json"
        deadline = time.monotonic() + 10
        while not receipt.exists() and time.monotonic() < deadline:  # the stopped supervisor writes it on its way out
            time.sleep(0.2)
        attempts = _receipt_attempts(project.paths.turns_dir(task_id), began_wall)
    finally:
        project.close()
    cause = task.resting_cause
    return {
        "case": "claude-500",
        "observed_s": round(time.monotonic() - began, 1),
        "status": task.status.value,
        "cause": cause.code if cause else None,
        "at_rest_s": round(moves[-1].at.timestamp() - began_wall, 1) if rest_seen is not None and moves else None,
        "seen_at_rest_s": round(rest_seen, 1) if rest_seen is not None else None,
        "attempts": attempts,
        "attempt_starts_status_json": [(p["t"], p["attempt"]) for p in phases if p["phase"] == "work"],
        "status_json_changes": phases,
        "schedule": _schedule(phases, began_wall),
        "show_samples": shows,
        "model_requests": len(server.script_requests),
        "status_changes": [f"{c.from_status.value if c.from_status else '-'}→{c.to_status.value}" for c in moves],
        "reaped_pids": reaped,
    }


def _shape(line: str) -> str:
    """A show line with its clocks and countdowns blanked (``0:06``, ``05:01:07``, ``next in 5 s``, ``(in 59m55s)``,
    ``due in 0.6 s``), attempt numbers kept: two samples differ when the attempt or the wording does."""
    line = re.sub(r"\b\d+:\d\d(:\d\d)?\b", "#:#", line)
    line = re.sub(r"\bin (\d+h\d\dm|\d+m\d\ds|\d+s)\b", "in #", line)
    return re.sub(r"(in|after|for) \d+(\.\d+)? ?(s|m|min|h)\b", r"\1 # \3", line)


def _schedule(phases: list[dict[str, Any]], began_wall: float) -> list[dict[str, Any]]:
    """corral's own schedule as each wait's status.json told it: the next attempt's start and the moment it
    stops retrying (seconds from ``corral start``), the most attempts that fit, the waits left."""
    from datetime import datetime

    def at(stamp: str | None) -> float | None:
        return round(datetime.fromisoformat(stamp).timestamp() - began_wall, 1) if stamp else None

    told = []
    for p in phases:
        retry = p.get("retry") or {}
        if p["phase"] == "retrying" and retry.get("by") == "corral":
            told.append(
                {
                    "attempt": retry.get("attempt"),
                    "next_at_s": at(retry.get("next_at")),
                    "gives_up_by_s": at(retry.get("gives_up_by")),
                    "at_most": retry.get("at_most"),
                    "waits_left_s": (retry.get("waits_left_ms") or 0) / 1000,
                }
            )
    return told


def _receipt_attempts(turns_dir: Path, began_wall: float) -> list[dict[str, Any]]:
    """Every attempt of every turn, from the supervisor's receipts (``turns/<n>/response.json``)."""
    from datetime import datetime

    def at(stamp: str | None) -> float | None:
        return round(datetime.fromisoformat(stamp).timestamp() - began_wall, 1) if stamp else None

    found = []
    for receipt in sorted(turns_dir.glob("*/response.json"), key=lambda p: int(p.parent.name)):
        doc = json.loads(receipt.read_text())
        for a in doc.get("attempts", []):
            failure = a.get("failure") or {}
            found.append(
                {
                    "turn": int(receipt.parent.name),
                    "n": a["number"],
                    "start_s": at(a.get("started_at")),
                    "end_s": at(a.get("ended_at")),
                    "class": a.get("failure_class"),
                    "code": failure.get("code"),
                    "exit": failure.get("exit_code"),
                }
            )
    return found


def report(run: dict[str, Any]) -> None:
    """Print a claude-500 run: its attempts, where it rested (or that it was still retrying), the ``show`` lines."""
    rest = (
        f"at rest at {run['at_rest_s']} s ({run['status']}, {run['cause']})"
        if run["seen_at_rest_s"]
        else (f"still {run['status']} after {run['observed_s']} s (stopped by the bench)")
    )
    print(f"claude-500: {rest}; model requests {run['model_requests']}, attempts {len(run['attempts'])}")
    print(f"  attempt starts (status.json, 1 s poll): {run['attempt_starts_status_json']}")
    for told in run.get("schedule", []):
        print(
            f"  after attempt {told['attempt']}: next at {told['next_at_s']} s, stops retrying by "
            f"{told['gives_up_by_s']} s, at most {told['at_most']} attempts, waits left {told['waits_left_s']:g} s"
        )
    for a in run["attempts"]:
        print(
            f"  attempt {a['turn']}.{a['n']}: {a['start_s']} → {a['end_s']} s"
            f"  {a['class']} {a['code']} exit {a['exit']}"
        )
    print(f"  {' '.join(run['status_changes'])}")
    for sample in run["show_samples"]:
        print(f"  show at {sample['t']} s{' (at rest)' if sample.get('at_rest') else ''}:")
        for line in sample["lines"]:
            print(f"    {line}")
