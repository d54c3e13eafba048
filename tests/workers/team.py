"""A team on one machine: a real PostgreSQL database, a shared bare remote, a reviewer's clone and
worker hosts, each a separate clone with its own HOME, CORRAL_HOME, user settings and fake agent.

Every host runs the real ``corral``; a worker is ``corral worker --json``, a process in its own
session, so a test can kill, stop or resume it (and the supervisors it started) like a host. A
reviewer's host (``dispatch = "workers"``) starts no process that outlives its command, so a
command a test gives it from its main thread runs in the test process, exact as a process
(:mod:`tests.support.inprocess`, the host's environment, working directory and pipes). Every other
host's commands are processes of their own: a supervisor one launches must be reparented when the
command ends, as on a real host, never left a child of the test (a child that dies stays a zombie
the test never reaps, and reads as alive).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tests.conftest as suite
from corral.testing.fake_agent import wrapper_script
from tests.support import inprocess


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def work(name: str, *, then: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """An agent's turn: it writes ``name``, commits it, and answers (``then`` runs between)."""
    return [
        {"init": True},
        {"write": {"path": name, "content": f"{name}\n"}},
        *(then or []),
        {"commit": f"add {name}"},
        {"result": f"wrote {name}"},
    ]


#: An agent's turn that writes draft.txt, leaves it uncommitted and works on (until stopped or killed).
DRAFTING: list[dict[str, Any]] = [
    {"init": True},
    {"write": {"path": "draft.txt", "content": "half done\n"}},
    {"keepalive": 120},
]


class Host:
    """One machine of the team: a clone, a home, settings of its own, and (for a worker) its process."""

    def __init__(self, root: Path, name: str, remote: Path, url: str, settings: dict[str, Any]) -> None:
        self.name = name
        self.root = root / name
        self.root.mkdir(parents=True)
        self.clone = self.root / "clone"
        git(root, "clone", "-q", str(remote), str(self.clone))
        self.home = self.root / "home"
        self.home.mkdir()
        #: Where its corral keeps its state, as its processes see it (a test may give two hosts one path).
        self.corral_home = self.home / "corral"
        self.config = self.root / "config.toml"
        self.scenario = self.root / "scenario.json"
        self.record = self.root / "record"
        self.bin = wrapper_script(self.root / "bin")
        lines = [f'database_url = "{url}"', f'worker_host = "{name}"', f'claude_bin = "{self.bin}"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.script(work("work.txt"))
        #: Whether its commands may run in the test process: a reviewer's host launches no supervisor.
        self.in_process = settings.get("dispatch") == "workers"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "worker.jsonl"
        #: More of the environment of every process this host runs (its commands, its worker, its daemon).
        self.extra_env: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "HOME": str(self.home),
                "CORRAL_HOME": str(self.corral_home),
                "CORRAL_CONFIG_FILE": str(self.config),
                "CORRAL_FAKE_SCENARIO": str(self.scenario),
                "CORRAL_FAKE_RECORD": str(self.record),
            }
        )
        env.pop("CORRAL_CLAUDE_BIN", None)
        env.update(self.extra_env)
        return env

    def script(self, steps: list[dict[str, Any]], *, first: list[list[dict[str, Any]]] | None = None) -> None:
        """Every invocation of this host's agent runs ``steps`` (the first ones, ``first`` in order)."""
        self.scenario.write_text(json.dumps({"invocations": first or [], "default": steps}))

    def corral(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = self.env()
        if not self.in_process or suite._EVERY_CALL_A_PROCESS or inprocess.unfit(env) is not None:
            done = subprocess.run(
                [sys.executable, "-m", "corral", *args],
                cwd=self.clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        else:
            code, out, err = inprocess.run(args, cwd=self.clone, env=env, stdin=b"", timeout=timeout)
            done = subprocess.CompletedProcess(
                [sys.executable, "-m", "corral", *args],
                code,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
            )
        if check:
            assert done.returncode == 0, (
                f"{self.name}: corral {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.corral(*args, "--json").stdout)

    def at_once(self, calls: list[tuple[str, ...]], *, people: int = 4, timeout: float = 120) -> list[str]:
        """Each of ``calls`` (a command's arguments) made by one of ``people`` people at once, each a process of
        its own making its share in turn; their stdouts, in order. The processes are forked from this one,
        with corral already imported, so none pays an interpreter's start-up: what runs at once is the commands.
        """
        env = self.env()
        if not self.in_process or suite._EVERY_CALL_A_PROCESS or inprocess.unfit(env) is not None:
            with ThreadPoolExecutor(people) as threads:
                return [d.stdout for d in threads.map(lambda args: self.corral(*args, timeout=timeout), calls)]
        _preload({args[0] for args in calls})
        with ProcessPoolExecutor(people, mp_context=multiprocessing.get_context("fork")) as pool:
            done = list(pool.map(_forked_call, calls, [self.clone] * len(calls), [env] * len(calls)))
        for args, (code, out, err) in zip(calls, done, strict=True):
            assert code == 0, f"{self.name}: corral {' '.join(args)} -> {code}\n{out}{err}"
        return [out for _, out, _ in done]

    # -- a worker --------------------------------------------------------------------------
    def start_worker(self, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        """``prefix``: what runs it (``ip netns exec NS``: a host on a network of its own); ``env``: more
        of its environment."""
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "corral", "worker", "--json"],
            cwd=self.clone,
            env={**self.env(), **(env or {})},
            stdout=self.log.open("ab"),
            stderr=(self.root / "worker.stderr").open("ab"),
            start_new_session=True,
        )

    def calls(self) -> list[dict[str, Any]]:
        """Every invocation of this host's agent, as the fake agent recorded it (argv, prompt, pid)."""
        record = self.record / "invocations.jsonl"
        if not record.exists():
            return []
        return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # a warning line of a library, not an event
        return found

    def wait_event(self, kind: str, timeout: float = 30, **match: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == kind and all(event.get(k) == v for k, v in match.items()):
                    return event
            assert self.proc is None or self.proc.poll() is None, f"{self.name}'s worker exited:\n{self.output()}"
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: no {kind} {match} within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        err = self.root / "worker.stderr"
        return (self.log.read_text() if self.log.exists() else "")[-3000:] + (
            err.read_text()[-3000:] if err.exists() else ""
        )

    def supervisors(self) -> list[int]:
        """The pids of the supervisors this host's corral started (its protocol dirs' status files)."""
        pids = []
        for status in (self.home / "corral").rglob("status.json"):
            try:
                pids.append(int(json.loads(status.read_text())["pid"]))
            except (ValueError, KeyError, OSError):
                continue
        return pids

    def signal_all(self, sig: signal.Signals) -> None:
        """The worker and every supervisor and agent it started, as a host that dies or freezes: their process
        groups, and every other process of this host's (its ``HOME`` in its environment): an agent runs in a
        process group of its own, which the supervisor's does not reach."""
        targets = [self.proc.pid] if self.proc is not None else []
        targets += self.supervisors()
        for pid in targets:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def processes(self) -> list[int]:
        """This host's processes still there: those started with its ``HOME``."""
        mine = b"\0HOME=" + str(self.home).encode() + b"\0"
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    env = b"\0" + f.read()
            except OSError:
                continue
            if mine in env:
                found.append(int(entry.name))
        return found

    def stop_daemon(self) -> None:
        """The daemon a launch on this host started (a turn whose agent had corral's tools), if any."""
        if (self.corral_home / "daemon").is_dir():
            self.corral("daemon", "stop", check=False)

    def stop_worker(self, timeout: float = 60) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal_all(signal.SIGKILL)
            self.proc.wait(10)


#: What a reviewer's ``create`` and ``start`` load beyond the CLI's own modules (the shared store, its job
#: queue, the hand-over to workers): loaded once in the test process before :meth:`Host.at_once` forks, so
#: that each of its people does not load them again (about a quarter of a second of CPU each).
_LOADED_BY = {
    "create": ("corral.engine.operations.tasks",),
    "start": ("corral.engine.operations.turns", "corral.engine.shared_store.handover", "corral.adapters.jobs"),
}

#: What any command of a reviewer's host loads: its store is the shared one.
_SHARED_STORE = ("corral.engine.shared_store.team_placement", "corral.store.postgres")


def _preload(commands: set[str]) -> None:
    """The modules the commands ``commands`` load, loaded here (a command not listed loads its own, as before)."""
    import importlib

    from corral.cli import root

    for command in sorted(commands):
        found = root.COMMANDS.get(command)
        if found is not None:
            importlib.import_module(f"corral.cli.commands.{found[0]}")
        for name in (*_LOADED_BY.get(command, ()), *_SHARED_STORE):
            importlib.import_module(name)


def _forked_call(args: tuple[str, ...], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """One call of :meth:`Host.at_once`, in a process forked from the test's (its main thread)."""
    code, out, err = inprocess.run(args, cwd=cwd, env=env, stdin=b"", timeout=120)
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (ended, its parent gone and not reaped by this machine's init) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"
