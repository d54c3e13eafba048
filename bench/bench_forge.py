"""Accept through the forge, against the scripted GitHub (tests/support/forge_server.py) and the real ``gh``.

Three figures (issue 35):

1. **Merge to complete, daemon running**: a task waits on the forge (``merging``, its check pending); the home
   daemon runs at the default ``forge_poll`` (30 s); the forge's check passes and its auto-merge lands the pull
   request. Timed from that merge until the task reads ``complete`` in the store (read without a settle, so only
   the daemon's tick moves it). Target: under 35 s. (``--quick`` lowers ``forge_poll`` to its least, 5 s.)
2. **Merge to complete after an explicit accept**: the same, but the person runs ``corral accept`` once the
   forge merged; timed over that command. Target: under 3 s.
3. **Watching 100 pending pull requests**: the remote sync's one batched GraphQL query for 100 open pull requests,
   through ``gh``, repeated; its wall time and CPU (this process and ``gh``), and the requests a minute it makes
   at the default poll (one query a poll: 60 / forge_poll). Reported (issue 35 sets it no target).

Floors, measured in the same run: the bare interpreter and ``corral --version`` (under the accept), ``gh --version``
(under a poll), and the poll interval (under the daemon's figure).

    .venv/bin/python bench/bench_forge.py [--runs 3] [--pulls 100]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.forge_server import ForgeServer

from benchlib import (
    command_ms,
    corral_command,
    drop_scratch,
    every,
    fake_claude,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
    stop_daemon,
    verdict,
)

DAEMON_TARGET_S = 35.0
ACCEPT_TARGET_S = 3.0
SCENARIO = {"invocations": [[{"init": True}, {"write": {"path": "f.txt", "content": "f\n"}}, {"commit": "f"},
                             {"result": "wrote f.txt"}]]}  # fmt: skip


def _run(args: list[str], repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done


def _status(repo: Path, env: dict[str, str], ref: str) -> str:
    """The task's status as stored: read with no settle, so only the daemon (or a command) has moved it."""
    code = (
        "import sys\nfrom corral.engine.project import Project\np = Project.open(sys.argv[1])\n"
        "with p.store.read() as tx:\n    print(tx.task_by_ref(sys.argv[2]).status.value)\n"
    )
    return _run([sys.executable, "-c", code, str(repo), ref], repo, env).stdout.strip()


def _pending_task(root: Path, base: Path, ref: str, poll: float | None) -> tuple[Path, dict[str, str], ForgeServer]:
    """A project with the forge on and a task ``ref`` whose accept waits on its pending check."""
    repo = make_repo(root / "repo")
    extra = {"CORRAL_FORGE": "gh", **({"CORRAL_FORGE_POLL": str(poll)} if poll else {})}
    env = hermetic_env(root / "home", pycache=base / "pycache", extra=extra)
    fake_claude(root, env, SCENARIO)
    forge = ForgeServer(root / "forge", required_checks=("ci",))
    env.update(forge.env())
    gitconfig = Path(env["HOME"]) / ".gitconfig"
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", forge.remote_url], check=True)
    subprocess.run(["git", "config", "--file", str(gitconfig), f"url.{forge.bare}.insteadOf", forge.remote_url],
                   check=True)  # fmt: skip
    _run(["git", "push", "-q", "origin", "main"], repo, env)
    cmd = corral_command()
    _run([*cmd, "create", "Forge change", "--ref", ref], repo, env)
    _run([*cmd, "start", ref, "--wait"], repo, env)
    said = _run([*cmd, "accept", ref], repo, env).stdout
    assert "merging" in said, said
    return repo, env, forge


def daemon_run(base: Path, index: int, timeout: float, poll: float | None) -> float:
    repo, env, forge = _pending_task(base / f"daemon-{index}", base, "watched", poll)
    try:
        _run([*corral_command(), "daemon", "start"], repo, env)
        time.sleep(1.0)  # the daemon's first tick has looked (and found the check pending)
        forge.finish_checks(forge.pull().number)  # the forge's auto-merge lands it now
        merged = time.perf_counter()
        while time.perf_counter() - merged < timeout:
            if _status(repo, env, "watched") == "complete":
                return time.perf_counter() - merged
            time.sleep(every(0.25, 1.0))  # each look a Python process of its own
        raise SystemExit(f"the task did not complete within {timeout:.0f} s of the forge's merge")
    finally:
        stop_daemon(env, repo)
        forge.close()


def accept_run(base: Path, index: int, floors: dict[str, float]) -> float:
    repo, env, forge = _pending_task(base / f"accept-{index}", base, "asked", None)
    try:
        forge.finish_checks(forge.pull().number)
        if not floors:
            floors.update(startup_floors(env, repo))
            floors["gh_version_ms"] = round(command_ms(["gh", "--version"], env, repo), 1)
        began = time.perf_counter()
        _run([*corral_command(), "accept", "asked"], repo, env)
        took = time.perf_counter() - began
        assert _status(repo, env, "asked") == "complete"
        return took
    finally:
        stop_daemon(env, repo)
        forge.close()


def watch_cost(base: Path, pulls: int, polls: int) -> dict[str, float]:
    from corral.adapters.gh_forge import GhForge, parse_remote
    from corral.adapters.process import SubprocessRunner

    forge = ForgeServer(base / "watch-forge", required_checks=("ci",))
    saved = dict(os.environ)
    os.environ.update(forge.env())
    try:
        seed = make_repo(base / "watch-repo")
        subprocess.run(["git", "-C", str(seed), "push", "-q", str(forge.bare), "main"], check=True)
        tip = subprocess.run(["git", "-C", str(forge.bare), "rev-parse", "main"], capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
        for n in range(pulls):
            subprocess.run(["git", "-C", str(forge.bare), "update-ref", f"refs/heads/b{n}", tip], check=True)
            forge.rest("POST", "/api/v3/repos/acme/widgets/pulls", {"head": f"b{n}", "base": "main", "title": "t"})
        found = parse_remote(forge.remote_url)
        assert found is not None
        gh = GhForge(SubprocessRunner(), found)
        numbers = sorted(forge.pulls)
        before_requests = len(forge.requests)
        own0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        walls = []
        for _ in range(polls):
            began = time.perf_counter()
            states = gh.pulls(numbers)
            walls.append(time.perf_counter() - began)
            assert len(states) == pulls
        own1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime) + (
            kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime
        )
        requests_per_poll = (len(forge.requests) - before_requests) / polls
    finally:
        os.environ.clear()
        os.environ.update(saved)
        forge.close()
    return {
        "pulls": pulls,
        "poll_wall_s": median(walls),
        "poll_cpu_s": cpu / polls,  # this process (including the scripted forge's answers) and gh
        "requests_per_poll": requests_per_poll,
        "requests_per_minute_at_default_poll": requests_per_poll * 60 / 30.0,
    }


def main() -> int:
    parser = scratch_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pulls", type=int, default=100)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--forge-poll", type=float, default=None, help="forge_poll for the daemon (default: its own)")
    args = parse_args(parser, {"runs": 1, "pulls": 3, "polls": 1, "forge_poll": 5.0})
    base = scratch_dir("forge", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load()}
    try:
        daemon = [daemon_run(base, i, 90.0, args.forge_poll) for i in range(args.runs)]
        floors: dict[str, float] = {}
        accepted = [accept_run(base, i, floors) for i in range(args.runs)]
        watch = watch_cost(base, args.pulls, args.polls)
    finally:
        drop_scratch(base, args.keep)
    worst_daemon, worst_accept = max(daemon), max(accepted)
    ok_daemon, ok_accept = worst_daemon < DAEMON_TARGET_S, worst_accept < ACCEPT_TARGET_S
    poll = args.forge_poll or 30.0
    print(f"forge merge → complete, daemon polling every {poll:.0f} s: worst {worst_daemon:.1f} s, median "
          f"{median(daemon):.1f} s (target < {DAEMON_TARGET_S:.0f} s) {verdict(ok_daemon)}")  # fmt: skip
    print(f"forge merge → complete by `corral accept`: worst {worst_accept:.2f} s (target < {ACCEPT_TARGET_S:.0f} s) "
          f"{verdict(ok_accept)}")  # fmt: skip
    print(f"watching {watch['pulls']} pending pull requests: {watch['requests_per_poll']:.0f} request a poll, "
          f"{watch['requests_per_minute_at_default_poll']:.0f} a minute at the default poll; a poll "
          f"{watch['poll_wall_s'] * 1000:.0f} ms wall, {watch['poll_cpu_s'] * 1000:.0f} ms CPU "
          "(reported)")  # fmt: skip
    report_floors(result, floors, f"the daemon's figure stands on its poll: a look every {poll:.0f} s")
    result.update({"daemon_s": daemon, "accept_s": accepted, "watch": watch, "forge_poll_s": poll})
    return finish("forge", result, ok_daemon and ok_accept)


if __name__ == "__main__":
    sys.exit(main())
