#!/usr/bin/env python
"""Workers on several hosts (docs/workers.md): claim latency, throughput with 1-3 workers, failover.

A team on one machine, as the end-to-end tests build it: one PostgreSQL server (started for the
run by ``tests/support/postgres.Server``: initdb into a scratch directory, loopback, fsync on),
a bare remote, a laptop clone with ``dispatch = "workers"``, and worker hosts, each its own clone,
HOME, CORRAL_HOME, user settings file and fake agent (``corral.testing.fake_agent`` as ``claude``). Every host runs
the real ``corral``; a worker is ``corral worker --json`` in its own session, its events
(one JSON document a line) read from its stdout. Each scenario gets a fresh database.

1. **Claim latency** (``--latency-turns``, one idle worker): ``corral start`` on the laptop, one
   turn at a time, each waited for. Per turn, from the lease's ``queued_at`` (the enqueue's
   commit, ``corral show --json``) to the worker's ``claim`` event, to the supervisor's start
   (``started_at`` of its ``status.json``) and to the agent's start (the fake agent's own
   record). Also from the spawn of ``corral start`` (what a person waits on, CLI start-up and
   the branch's push included). Target: queued → supervisor start p50 under 500 ms.
2. **Throughput** (``--turns``, ``--workers``): the turns are queued first (by a helper on the
   laptop, in-process: create + start), then the workers start together (each ``worker_turns``,
   default 2). Turns/s from the first ``claim`` to the last ``turn-done``, the ratio to one
   worker, the machine's CPU busy share over that window and the CPU split between the workers,
   PostgreSQL and the rest (supervisors, agents, git), and per turn the claim → agent start and
   agent start → turn-done medians: what the turns wait on. Every turn must end ``turn-done``
   exactly once, none lost or failed (FAIL otherwise); ``--grace-period`` sets the workers' own.
3. **Failover** (``--failover-reps`` with a 4 s lease as the tests, and one with the default 30 s
   unless ``--no-long-lease``): a worker and the supervisors it started are SIGKILLed mid-turn
   (the agent keeps the turn alive), another worker already runs; the time from the kill to the other's
   ``claim`` of the resumed turn, and from the dead worker's last heartbeat. Target: under
   lease + 2 s from the kill.

Usage::

    .venv/bin/python bench/bench_workers.py                          # ~15-25 min on 2 cores
    .venv/bin/python bench/bench_workers.py --turns 60 --latency-turns 10 --failover-reps 1 --no-long-lease

Results are printed and written to bench/results/bench_workers.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.postgres import Server, admin, with_database

import benchlib
from benchlib import (
    corral_command,
    drop_scratch,
    finish,
    load,
    machine,
    median,
    parse_args,
    percentile,
    pycache_prefix,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
)
from corral.testing.fake_agent import wrapper_script

LATENCY_TARGET_MS = 500.0
FAILOVER_SLACK_S = 2.0
SHORT_LEASE = 4.0  # as the end-to-end tests: a test outlives it, a loaded machine's late beat never loses one
DEFAULT_LEASE = 30.0  # the lease_seconds setting's default
STALL_S = 40.0  # no turn ended for this long: the throughput run is over (a lost turn's resume included)

#: A short turn: the agent starts, says it is done. No commit: the branch push is a no-op push.
SHORT: list[dict[str, Any]] = [{"init": True}, {"result": "Done."}]
#: A turn that stays alive until killed: the one a dead host leaves behind.
LONG: list[dict[str, Any]] = [{"init": True}, {"keepalive": 300}]

# The laptop's helper that queues many turns quickly: one process, the engine's own create and start.
_ENQUEUER = r"""
import json, sys, time
from corral.engine.operations import tasks, turns
from corral.engine.project import Project, default_actor

project = Project.open(sys.argv[1])
actor = default_actor()
for ref in sys.argv[2:]:
    task = tasks.create(project, "Task " + ref, actor=actor, ref=ref)
    turns.start(project, ref, actor=actor)
    print(json.dumps({"ref": ref, "task": task.id, "at": time.time()}), flush=True)
project.close()
"""


# -- CPU accounting --------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, str, list[int]]]:
    """pid → (ppid, comm, [utime, stime, cutime, cstime] in ticks) of every process (zombies too)."""
    table = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        fields = tail.split()
        table[int(Path(stat).parent.name)] = (
            int(fields[1]),
            head.partition("(")[2],
            [int(x) for x in fields[11:15]],
        )
    return table


def tree_cpu(roots: list[int]) -> tuple[float, float]:
    """CPU seconds (user+sys) of ``roots`` themselves, and of every process they started.

    The second counts the children they reaped (cutime/cstime) and every descendant still
    alive or a zombie (its own time and its reaped children's)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    own = started = 0
    for root in roots:
        if root not in table:
            continue
        ut, st, cut, cst = table[root][2]
        own += ut + st
        started += cut + cst
        stack = list(children.get(root, ()))
        while stack:
            pid = stack.pop()
            started += sum(table[pid][2])
            stack.extend(children.get(pid, ()))
    return own / _TICK, started / _TICK


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) / _TICK, total / _TICK


# -- a team on one machine (as the tests' tests/workers/team.py) ----------------------------------
def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def base_env(scratch: Path) -> dict[str, str]:
    """What every host's corral runs with: no CORRAL_ variable of the caller's, git identity, the default sandbox."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    for key in ("PYTHONDONTWRITEBYTECODE", "GIT_DIR", "GIT_WORK_TREE", "PYTHONPROFILEIMPORTTIME"):
        env.pop(key, None)
    gitconfig = scratch / "gitconfig"
    if not gitconfig.exists():
        gitconfig.write_text("[init]\n\tdefaultBranch = main\n[user]\n\tname = Bench\n\temail = bench@example.com\n")
    if (prefix := pycache_prefix(scratch / "pycache")) is not None:
        env["PYTHONPYCACHEPREFIX"] = prefix  # bytecode cached, never in src/ (a quick run reads the install's)
    env.update(
        {
            "NO_COLOR": "1",
            "LC_ALL": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_TERMINAL_PROMPT": "0",
            # Turns run with the sandbox as a person has it, without the home daemon's tools (each host's
            # daemon would serve only them; bench_mcp measures the tools).
            "CORRAL_AGENT_TOOLS": "0",
        }
    )
    return env


class Host:
    """One machine of the team: a clone, a home, settings of its own, and (for a worker) its process."""

    def __init__(self, team: Team, name: str, settings: dict[str, Any]) -> None:
        self.name = name
        self.team = team
        self.root = team.root / "hosts" / name
        self.root.mkdir(parents=True)
        self.clone = self.root / "clone"
        git(self.root, "clone", "-q", str(team.remote), str(self.clone))
        self.home = self.root / "home"
        self.home.mkdir()
        self.config = self.root / "config.toml"
        # Where Claude Code keeps its state: a sandboxed turn sees it (not /tmp, nor the rest of the home).
        state = self.home / ".claude" / "cache"
        state.mkdir(parents=True)
        self.scenario = state / "scenario.json"
        self.record = state / "record"
        self.bin = wrapper_script(self.root / "bin")
        lines = [f'database_url = "{team.url}"', f'worker_host = "{name}"', f'claude_bin = "{self.bin}"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.script(SHORT)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "worker.jsonl"
        self._events: list[dict[str, Any]] = []
        self._read = 0

    def env(self) -> dict[str, str]:
        env = dict(self.team.env)
        env.update(
            {
                "HOME": str(self.home),
                "CORRAL_HOME": str(self.home / "corral"),
                "CORRAL_CONFIG_FILE": str(self.config),
                "CORRAL_FAKE_SCENARIO": str(self.scenario),
                "CORRAL_FAKE_RECORD": str(self.record),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            }
        )
        return env

    def script(self, steps: list[dict[str, Any]]) -> None:
        self.scenario.write_text(json.dumps({"invocations": [], "default": steps}))

    def corral(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*corral_command(), *args], cwd=self.clone, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: corral {' '.join(args)} -> {done.returncode}\n{done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.corral(*args, "--json").stdout)

    def enqueue(self, refs: list[str]) -> list[dict[str, Any]]:
        """Create and start ``refs`` (queued for the workers) in one process; one record per turn."""
        done = subprocess.run(
            [sys.executable, "-c", _ENQUEUER, str(self.clone), *refs],
            cwd=self.clone,
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: queueing failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def create(self, refs: list[str]) -> None:
        script = (
            "import sys\nfrom corral.engine.operations import tasks\n"
            "from corral.engine.project import Project, default_actor\n"
            "p = Project.open(sys.argv[1])\n"
            "for ref in sys.argv[2:]:\n    tasks.create(p, 'Task ' + ref, actor=default_actor(), ref=ref)\n"
            "p.close()\n"
        )
        subprocess.run([sys.executable, "-c", script, str(self.clone), *refs], env=self.env(), check=True)

    # -- a worker ----------------------------------------------------------------------------
    def start_worker(self, prefix: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [*prefix, *corral_command(), "worker", "--json"],
            cwd=self.clone,
            env=self.env(),
            stdout=self.log.open("ab"),
            stderr=(self.root / "worker.stderr").open("ab"),
            start_new_session=True,
        )

    def events(self) -> list[dict[str, Any]]:
        """Every event so far (read on from where the last call stopped)."""
        if self.log.exists():
            with self.log.open("rb") as fh:
                fh.seek(self._read)
                chunk = fh.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._read += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue  # a library's warning line, not an event
                if isinstance(doc, dict) and "event" in doc:
                    self._events.append(doc)
        return self._events

    def find(self, kind: str, **match: Any) -> dict[str, Any] | None:
        for event in self.events():
            if event.get("event") == kind and all(event.get(k) == v for k, v in match.items()):
                return event
        return None

    def wait_event(self, kind: str, timeout: float = 60, every: float = 0.01, **match: Any) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}'s worker exited:\n{self.output()}")
            return self.find(kind, **match)

        found: dict[str, Any] = until(f"{self.name}: {kind} {match}", check, timeout=timeout, every=every)
        return found

    def output(self) -> str:
        err = self.root / "worker.stderr"
        return (self.log.read_text() if self.log.exists() else "")[-3000:] + (
            err.read_text()[-3000:] if err.exists() else ""
        )

    def calls(self) -> list[dict[str, Any]]:
        record = self.record / "invocations.jsonl"
        if not record.exists():
            return []
        return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]

    def status_files(self) -> list[Path]:
        return list((self.home / "corral").rglob("status.json"))

    def supervisors(self) -> list[int]:
        pids = []
        for status in self.status_files():
            try:
                pids.append(int(json.loads(status.read_text())["pid"]))
            except (ValueError, KeyError, OSError):
                continue
        return pids

    def signal_all(self, sig: signal.Signals) -> None:
        """The worker and every supervisor (and agent) it started, as a host that dies."""
        targets = [self.proc.pid] if self.proc is not None else []
        targets += self.supervisors()
        for pid in targets:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass

    def stop_worker(self, timeout: float = 60) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal_all(signal.SIGKILL)
            self.proc.wait(10)


class Team:
    """A seed repository's bare remote and the hosts on it, all on one fresh database of ``server``."""

    def __init__(self, base: Path, name: str, server: Server, env: dict[str, str], lease: float) -> None:
        self.root = base / name
        self.root.mkdir()
        self.env = env
        self.lease = lease
        self.server = server
        self.database = f"corral_bench_{uuid.uuid4().hex[:10]}"
        admin(server.url, f'CREATE DATABASE "{self.database}"')
        self.url = with_database(server.url, self.database)
        seed = self.root / "seed"
        seed.mkdir()
        git(seed, "init", "-q", "-b", "main")
        (seed / "README.md").write_text("# team\n")
        git(seed, "add", "README.md")
        git(seed, "-c", "user.name=Bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "initial")
        self.remote = self.root / "remote.git"
        git(self.root, "clone", "-q", "--bare", str(seed), str(self.remote))
        self.hosts: list[Host] = []

    def host(self, name: str, **settings: Any) -> Host:
        host = Host(self, name, {"lease_seconds": self.lease, **settings})
        self.hosts.append(host)
        return host

    def laptop(self) -> Host:
        return self.host("laptop", dispatch="workers")

    def worker(self, name: str, **settings: Any) -> Host:
        clone = self.root / "hosts" / name / "clone"
        return self.host(name, worker_projects=[str(clone)], **settings)

    def close(self) -> None:
        for host in self.hosts:
            try:
                host.stop_worker(timeout=30)
            except Exception:  # a bench's cleanup goes on to the next host
                host.signal_all(signal.SIGKILL)
        # Supervisors of killed workers may live on: stop every one this team started.
        for host in self.hosts:
            host.signal_all(signal.SIGKILL)
        try:
            admin(self.server.url, f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        except Exception as exc:  # the server is stopped at the end anyway
            print(f"  (could not drop {self.database}: {exc})")


def until(what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {timeout} s (last: {last!r})")


def epoch_of(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def stats_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50": median(ms), "p95": percentile(ms, 95), "min": min(ms), "max": max(ms)}


# -- 1. claim latency ----------------------------------------------------------------------------
def bench_latency(base: Path, server: Server, env: dict[str, str], turns: int, trace_turns: int) -> dict[str, Any]:
    team = Team(base, "latency", server, env, SHORT_LEASE)
    try:
        laptop = team.laptop()
        worker = team.worker("w1")
        warm = 0 if benchlib.QUICK else 1  # a quick run's figures are not judged: its one turn is the timed one
        refs = [f"lat{i}" for i in range(turns + warm + (trace_turns + 1 if trace_turns else 0))]
        laptop.create(refs)
        worker.start_worker()
        worker.wait_event("started")
        # The first turn is a warm-up (the worker's first claim, its first worktree).
        rows = _timed_turns(laptop, worker, refs[: turns + warm])[warm:]
        out: dict[str, Any] = {"turns": len(rows), "warm_up_turns": warm, **_summary(rows)}
        if trace_turns:
            # Apart from the figures above: strace slows every exec a little.
            worker.stop_worker()
            trace = team.root / "worker.strace"
            strace = ("strace", "-f", "-ttt", "--seccomp-bpf", "-e", "trace=execve", "-o", str(trace))
            worker.start_worker(prefix=strace)
            worker.wait_event("started", timeout=120)
            traced = _timed_turns(laptop, worker, refs[turns + warm :], calls_before=turns + warm)[1:]
            worker.stop_worker()
            out["traced"] = {"turns": len(traced), **_summary(traced), "execs": _execs(trace, traced)}
        return out
    finally:
        team.close()


def _timed_turns(laptop: Host, worker: Host, refs: list[str], calls_before: int = 0) -> list[dict[str, float]]:
    """Start each of ``refs`` on the laptop and follow it to its end on the idle ``worker``: its times."""
    rows = []
    for n, ref in enumerate(refs, start=calls_before):
        spawned = time.time()
        started = laptop.json("start", ref)
        returned = time.time()
        task_id = started["task"]["id"]
        claim = worker.wait_event("claim", task=task_id, timeout=30)

        def nth_call(n: int = n) -> dict[str, Any] | None:
            calls = worker.calls()
            return calls[n] if len(calls) > n else None

        call = until(f"agent of {ref}", nth_call, every=0.01)
        supervisor = _supervisor_start(worker, task_id)
        worker.wait_event("turn-done", task=task_id, timeout=60, every=0.05)
        lease = laptop.json("show", ref)["lease"]
        queued = epoch_of(lease["queued_at"])
        nan = float("nan")
        rows.append(
            {
                "spawn_to_queued": queued - spawned,
                "start_command": returned - spawned,
                "queued_to_claim": epoch_of(claim["at"]) - queued,
                "queued_to_claim_commit": epoch_of(lease["claimed_at"]) - queued,
                "queued_to_supervisor": (supervisor - queued) if supervisor is not None else nan,
                "queued_to_agent": float(call["at"]) - queued,
                "spawn_to_supervisor": (supervisor - spawned) if supervisor is not None else nan,
                # Absolute times, for the trace's windows.
                "claim_at": epoch_of(claim["at"]),
                "supervisor_at": supervisor if supervisor is not None else nan,
                "agent_at": float(call["at"]),
            }
        )
    return rows


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in rows[0]:
        if key.endswith("_at"):
            continue
        values = [r[key] for r in rows if r[key] == r[key]]  # NaN: the status file was gone
        if values:
            out[key + "_ms"] = stats_ms(values)
    out["supervisor_start_seen"] = sum(1 for r in rows if r["queued_to_supervisor"] == r["queued_to_supervisor"])
    return out


def _execs(trace: Path, rows: list[dict[str, float]]) -> dict[str, Any]:
    """What the worker ran between each traced turn's claim and its supervisor's start (from strace)."""
    began: dict[int, tuple[float, str]] = {}
    spans: list[tuple[float, float, str]] = []
    for line in trace.read_text(errors="replace").splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        pid, at, rest = int(parts[0]), float(parts[1]), parts[2]
        if rest.startswith("execve(") and rest.rstrip().endswith("= 0") and pid not in began:
            argv = rest.split("[", 1)[1].split("]", 1)[0]
            words = [w.strip().strip('"') for w in argv.split(",")]
            label = os.path.basename(words[0])
            if label == "git":
                label += " " + next((w for w in words[1:] if not w.startswith("-")), "")
            elif label.startswith("python"):
                label = "python " + " ".join(w for w in words[1:3])
            began[pid] = (at, label)
        elif rest.startswith("+++ exited") and pid in began:
            start, label = began.pop(pid)
            spans.append((start, at, label))
    per_turn: list[dict[str, Any]] = []
    for row in rows:
        lo, hi = row["claim_at"], row["supervisor_at"]
        if hi != hi:
            hi = row["agent_at"]
        inside = [(a, b, label) for a, b, label in spans if lo <= a <= hi]
        # A process inside another's span is its child (git fetch's sh and upload-pack): counted in it.
        inside = [s for s in inside if not any(o is not s and o[0] <= s[0] and s[1] <= o[1] for o in inside)]
        per_turn.append(
            {
                "window_ms": (hi - lo) * 1000,
                "execs": len(inside),
                "exec_ms": sum((min(b, hi) - a) * 1000 for a, b, _ in inside),
                # Until the window's end: the supervisor's span is its start-up, to its status file.
                "commands": [[label, round((min(b, hi) - a) * 1000, 1)] for a, b, label in sorted(inside)],
            }
        )
    return {"per_turn": per_turn}


def _supervisor_start(worker: Host, task_id: str) -> float | None:
    """The supervisor's ``started_at`` in the task's protocol status file on the worker (None: gone)."""
    for status in worker.status_files():
        if task_id not in str(status):
            continue
        try:
            doc = json.loads(status.read_text())
        except (ValueError, OSError):
            continue
        if doc.get("started_at"):
            return epoch_of(doc["started_at"])
    return None


# -- 2. throughput ---------------------------------------------------------------------------------
def bench_throughput(
    base: Path,
    server: Server,
    env: dict[str, str],
    workers: int,
    turns: int,
    worker_turns: int,
    grace: float | None,
) -> dict[str, Any]:
    team = Team(base, f"throughput-{workers}", server, env, SHORT_LEASE)
    try:
        laptop = team.laptop()
        extra = {} if grace is None else {"grace_period": grace}
        hosts = [team.worker(f"w{i}", worker_turns=worker_turns, **extra) for i in range(workers)]
        refs = [f"t{i}" for i in range(turns)]
        t0 = time.monotonic()
        queued = laptop.enqueue(refs)
        enqueue_s = time.monotonic() - t0
        assert len(queued) == turns, f"{len(queued)} of {turns} turns queued"
        busy0, total0 = machine_cpu()
        pg0 = sum(tree_cpu([server.postmaster()]))
        spawned = time.time()
        for host in hosts:
            host.start_worker()
        pids = [h.proc.pid for h in hosts if h.proc is not None]

        # Done: every task's turn recorded (turn-done). A turn lost or failed on a worker is resumed
        # by corral (queued again) or rests interrupted: the run ends when no turn ended for STALL s.
        last_end = [time.monotonic(), 0]

        def all_done() -> bool:
            for h in hosts:
                if h.proc is not None and h.proc.poll() is not None:
                    raise RuntimeError(f"{h.name}'s worker exited:\n{h.output()}")
            ends = [e for h in hosts for e in h.events() if e["event"].startswith("turn-")]
            if len(ends) != last_end[1]:
                last_end[:] = [time.monotonic(), len(ends)]
            done = {e["task"] for e in ends if e["event"] == "turn-done"}
            return len(done) >= turns or time.monotonic() - last_end[0] > STALL_S

        until(f"{turns} turns done", all_done, timeout=120 + turns * 5, every=0.25)
        # Read while the workers live: a reaped worker's /proc entry, and its children's times, are gone.
        workers_own, workers_started = tree_cpu(pids)
        busy1, total1 = machine_cpu()
        pg1 = sum(tree_cpu([server.postmaster()]))
        events = [e for h in hosts for e in h.events()]
        claims = {e["task"]: epoch_of(e["at"]) for e in events if e["event"] == "claim"}
        done = {e["task"]: epoch_of(e["at"]) for e in events if e["event"].startswith("turn-")}
        outcomes: dict[str, int] = {}
        for e in events:
            if e["event"].startswith("turn-"):
                outcomes[e["event"]] = outcomes.get(e["event"], 0) + 1
        done_tasks = {e["task"] for e in events if e["event"] == "turn-done"}
        first_claim = min(claims.values())
        last_done = max(epoch_of(e["at"]) for e in events if e["event"] == "turn-done")
        window = last_done - first_claim
        agents = sorted(float(c["at"]) for h in hosts for c in h.calls())
        per_host = {h.name: sum(1 for e in h.events() if e["event"] == "turn-done") for h in hosts}
        jiffies = total1 - total0  # every CPU's
        # Claim → agent start and agent start → done per turn: agents are matched to tasks by cwd.
        by_task = {}
        for h in hosts:
            for c in h.calls():
                for q in queued:
                    if f"/{q['ref']}" in c["cwd"] or c["cwd"].endswith(q["ref"]):
                        by_task[q["task"]] = float(c["at"])
        claim_to_agent = [by_task[t] - claims[t] for t in by_task if t in claims]
        agent_to_done = [done[t] - by_task[t] for t in by_task if t in done]
        return {
            "workers": workers,
            "worker_turns": worker_turns,
            "turns": turns,
            "enqueue_s": enqueue_s,
            "spawn_to_first_claim_s": first_claim - spawned,
            "window_s": window,
            "turns_done": len(done_tasks),
            "turns_per_s": len(done_tasks) / window,
            "outcomes": outcomes,
            "clean": len(done_tasks) == turns and outcomes == {"turn-done": turns},
            "grace_period": grace,
            "turns_by_worker": per_host,
            "agents_started": len(agents),
            "cpu_busy_share": (busy1 - busy0) / jiffies if jiffies else 0.0,  # the machine's, spawn → last done
            "cpu_s": {
                "machine": busy1 - busy0,
                "workers": workers_own,
                "started_by_workers": workers_started,
                "postgres": pg1 - pg0,
                "other": (busy1 - busy0) - workers_own - workers_started - (pg1 - pg0),
            },
            "team_cpu_s_per_turn": (workers_own + workers_started + pg1 - pg0) / turns,
            "claim_to_agent_ms": stats_ms(claim_to_agent) if claim_to_agent else None,
            "agent_to_done_ms": stats_ms(agent_to_done) if agent_to_done else None,
            "matched_agents": len(by_task),
        }
    finally:
        team.close()


# -- 3. failover ---------------------------------------------------------------------------------
def bench_failover(base: Path, server: Server, env: dict[str, str], lease: float, n: int) -> dict[str, Any]:
    team = Team(base, f"failover-{int(lease)}-{n}", server, env, lease)
    try:
        laptop = team.laptop()
        doomed = team.worker("doomed")
        rescuer = team.worker("rescuer")
        doomed.script(LONG)
        rescuer.script(SHORT)
        laptop.create(["long"])
        doomed.start_worker()
        doomed.wait_event("started")
        task_id = laptop.json("start", "long")["task"]["id"]
        doomed.wait_event("claim", task=task_id)
        until("the doomed host's agent runs", doomed.calls, timeout=60)
        rescuer.start_worker()
        rescuer.wait_event("started")
        time.sleep(min(lease / 3, 2.0))  # both heartbeat as in a steady state
        doomed.signal_all(signal.SIGKILL)
        killed = time.time()
        claim = rescuer.wait_event("claim", task=task_id, timeout=lease + 120, every=0.02)
        claimed = epoch_of(claim["at"])
        until("the rescuer's agent runs", rescuer.calls, timeout=60, every=0.02)
        agent = float(rescuer.calls()[0]["at"])
        rescuer.wait_event("turn-done", task=task_id, timeout=120)
        beats = {w["host"]: w for w in laptop.json("workers")["workers"]}
        last_beat = epoch_of(beats["doomed"]["heartbeat_at"])
        return {
            "lease_s": lease,
            "kill_to_claim_s": claimed - killed,
            "last_heartbeat_to_claim_s": claimed - last_beat,
            "kill_to_agent_s": agent - killed,
            "heartbeat_age_at_kill_s": killed - last_beat,
        }
    finally:
        team.close()


# -- the whole -------------------------------------------------------------------------------------
def main() -> int:
    p = scratch_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--latency-turns", type=int, default=30, help="turns timed one at a time (default 30)")
    p.add_argument("--turns", type=int, default=1000, help="turns per throughput run (default 1,000)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3], help="worker counts (default 1 2 3)")
    p.add_argument("--worker-turns", type=int, default=2, help="each worker's worker_turns (default 2)")
    p.add_argument("--failover-reps", type=int, default=3, help="failovers with a 4 s lease (default 3)")
    p.add_argument(
        "--grace-period",
        type=float,
        default=None,
        help="the workers' grace_period in the throughput runs (default: corral's own)",
    )
    p.add_argument("--trace-turns", type=int, default=3, help="latency turns more under strace (0: none)")
    p.add_argument("--no-long-lease", action="store_true", help="skip the failover with the default 30 s lease")
    p.add_argument("--only", choices=("latency", "throughput", "failover"), nargs="+", default=None)
    quick = {
        "latency_turns": 1,
        "turns": 2,  # one for each of the worker's two slots
        "workers": [1],
        "failover_reps": 1,
        "trace_turns": 0,
        "no_long_lease": True,
    }
    args = parse_args(p, quick)
    only = set(args.only or ("latency", "throughput", "failover"))

    base = scratch_dir("workers", args)
    env = base_env(base)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "server": "started for the run (fsync on)"}
    ok = True
    server = Server(max_connections=200)
    try:
        if "latency" in only:
            lat = bench_latency(base, server, env, args.latency_turns, args.trace_turns)
            result["latency"] = lat
            key = "queued_to_supervisor_ms" if "queued_to_supervisor_ms" in lat else "queued_to_agent_ms"
            good = lat[key]["p50"] < LATENCY_TARGET_MS
            ok &= good
            print(f"\nClaim latency, one idle worker, {lat['turns']} turns (ms)       p50      p95")
            for name in (
                "queued_to_claim",
                "queued_to_claim_commit",
                "queued_to_supervisor",
                "queued_to_agent",
                "spawn_to_queued",
                "start_command",
                "spawn_to_supervisor",
            ):
                if name + "_ms" in lat:
                    s = lat[name + "_ms"]
                    mark = (
                        f"  {'PASS' if good else 'FAIL'} (p50 < {LATENCY_TARGET_MS:.0f})" if name + "_ms" == key else ""
                    )
                    print(f"  {name:<40} {s['p50']:8.0f} {s['p95']:8.0f}{mark}")
            print(f"  (supervisor status files seen for {lat['supervisor_start_seen']} of {lat['turns']} turns)")
            if "traced" in lat:
                tr = lat["traced"]
                traced = tr.get("queued_to_supervisor_ms", tr["queued_to_agent_ms"])["p50"]
                print(f"  under strace ({tr['turns']} turns, slower): queued -> supervisor p50 {traced:.0f} ms")
                print("  claim -> supervisor start: the window, the processes run in it (ms each):")
                for turn in tr["execs"]["per_turn"]:
                    cmds = ", ".join(f"{label} {ms:.0f}" for label, ms in turn["commands"])
                    print(f"    {turn['window_ms']:.0f} ms, {turn['execs']} execs ({turn['exec_ms']:.0f} ms): {cmds}")
            print(f"  load now {load()}")

        if "throughput" in only:
            runs = []
            for count in args.workers:
                run = bench_throughput(base, server, env, count, args.turns, args.worker_turns, args.grace_period)
                runs.append(run)
                ok &= run["clean"]
                cpu = run["cpu_s"]
                print(
                    f"\nThroughput, {count} worker(s) x {args.worker_turns}: {run['turns_done']} of {run['turns']} "
                    f"turns done in {run['window_s']:.1f} s = {run['turns_per_s']:.2f} turns/s "
                    f"(queued in {run['enqueue_s']:.0f} s beforehand); load now {load()}"
                )
                print(
                    f"  machine CPU busy {run['cpu_busy_share'] * 100:.0f} %; CPU s: workers {cpu['workers']:.1f}, "
                    f"their supervisors/agents/git {cpu['started_by_workers']:.1f}, postgres {cpu['postgres']:.1f}, "
                    f"other processes of the machine {cpu['other']:.1f} "
                    f"({run['team_cpu_s_per_turn']:.2f} CPU s per turn)"
                )
                print(
                    f"  outcomes {run['outcomes']} {'PASS' if run['clean'] else 'FAIL'} (each done once, none lost); "
                    f"done by worker {run['turns_by_worker']}"
                )
                if run["claim_to_agent_ms"]:
                    print(
                        f"  per turn: claim -> agent p50 {run['claim_to_agent_ms']['p50']:.0f} ms, "
                        f"agent -> turn-done p50 {run['agent_to_done_ms']['p50']:.0f} ms"
                    )
            one = next((r for r in runs if r["workers"] == 1), None)
            if one:
                for r in runs:
                    r["ratio_to_1"] = r["turns_per_s"] / one["turns_per_s"]
                print("  ratio to 1 worker: " + ", ".join(f"{r['workers']}: {r['ratio_to_1']:.2f}x" for r in runs))
            result["throughput"] = runs

        if "failover" in only:
            plans = [(SHORT_LEASE, i) for i in range(args.failover_reps)]
            if not args.no_long_lease:
                plans.append((DEFAULT_LEASE, 0))
            fails = []
            for lease, n in plans:
                f = bench_failover(base, server, env, lease, n)
                good = f["kill_to_claim_s"] < lease + FAILOVER_SLACK_S
                f["pass"] = good
                ok &= good
                fails.append(f)
                print(
                    f"\nFailover, lease {lease:.0f} s: kill -> claim {f['kill_to_claim_s']:.2f} s "
                    f"{'PASS' if good else 'FAIL'} (< {lease + FAILOVER_SLACK_S:.0f} s); last beat -> claim "
                    f"{f['last_heartbeat_to_claim_s']:.2f} s; kill -> agent {f['kill_to_agent_s']:.2f} s; load {load()}"
                )
            result["failover"] = fails
        floors = startup_floors(env, base, reps=3)
        report_floors(result, floors, "under every supervisor and command a claim starts; a failover waits its lease")
    finally:
        server.stop()
        drop_scratch(base, args.keep)
    return finish("bench_workers", result, ok)


if __name__ == "__main__":
    raise SystemExit(main())
