#!/usr/bin/env python
"""corral's MCP tools over streamable HTTP: call latency, with and without 50 ``wait`` calls open.

1. A scratch repository and CORRAL_HOME; the benchmark store of bench_cli.py (10,000 tasks,
   100,000 turns, see seed_store.py) with 51 more working tasks than its usual 70, each with
   its command in flight and a ``status.json`` naming this (live) process. One of them becomes
   the parent of 50 others (``parent_id`` set with one UPDATE after seeding: the seeder makes
   no working subtasks). A bearer token is minted for the parent's current command
   (``agent_tokens.mint``), so every call comes from the parent's agent and meets the agent
   gates as in real use.

2. The server: ``corral.mcp.http.start(home)`` — what the daemon runs in a thread — in a
   child process of its own (``bench_mcp.py --serve``), so its RSS is the server's alone and
   the client's work does not share its interpreter lock. The daemon's reconcile ticks are
   not running (they would mark the seeded working tasks lost: no supervisor runs for them),
   and the HTTP door never settles before a read (``Calling.settles=False``), so the store
   does not change during the run.

3. The client: the official SDK (``mcp.Client`` over ``streamable_http_client`` with an
   ``httpx2.AsyncClient`` carrying the token). On one open session, ``show`` of the parent
   (``{"task": <parent>}``, its latest 20 turns) and ``list`` (``{"which": "all", "limit": 50}``:
   a page of 50 of the agent's 51 visible rows) are called ``--calls`` times each, alternately,
   after ``--warmup`` untimed calls; each call timed from the request to the decoded result.
   Reported: p50 and p99 (nearest rank) in ms. Target: p50 under 20 ms.

4. The same with ``--waits`` (50) ``wait`` calls held open by the parent's agent, one per
   subtask, with ``timeout_seconds`` 240 (the most a call may ask, which outlasts the
   measurement); the subtasks never rest. The waits are started, seen registered in the
   parent's wait marker, then ``show`` and ``list`` are measured again. Any wait that returns
   before it is cancelled is an error.

5. The server process's RSS (psutil) before the first call, after the calls without waits,
   and with the waits open; its CPU use while the waits sit open and nothing else is asked
   (each wait looks at its task every 0.5 s).

6. For attribution (no targets): ``tools/list`` over the same session (the transport's floor);
   when a target is missed (or with ``--profile``) a sampling profile of every thread of the
   server over ``--sample-calls`` more calls of each tool; a what-if run against a second server
   whose listening socket is made with ``IPPROTO_TCP`` (so asyncio sets ``TCP_NODELAY`` on each
   connection; ``--no-what-if`` skips it); the ``show`` and ``list`` tool functions called in
   this process (``TOOLS[name].run`` with the caller the server would resolve, no HTTP), what a
   fresh project keeps after one ``list`` (tracemalloc), and a cProfile of those calls.

Usage::

    .venv/bin/python bench/bench_mcp.py                  # ~3 minutes on 2 CPUs
    .venv/bin/python bench/bench_mcp.py --calls 50 --tasks 2000 --turns 20000
    .venv/bin/python bench/bench_mcp.py --profile

Results are printed and written to bench/results/bench_mcp.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

P50_TARGET_MS = 20.0
SUBTASKS_DEFAULT = 50


#: Leaf functions of a thread that is waiting, not working (left out of the server's samples).
IDLE_LEAVES = frozenset({"select", "poll", "wait", "_wait_for_tstate_lock"})


class Sampler:
    """A sampling profiler of every thread of the server child (cProfile sees one thread only):
    every ``interval`` it records each other thread's stack; waiting threads are left out."""

    def __init__(self, interval: float = 0.001) -> None:
        import threading

        self.interval = interval
        self.stop_flag = threading.Event()
        self.samples = 0
        self.leaf: dict[str, int] = {}
        self.cum: dict[str, int] = {}
        self.threads: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self.thread.start()

    @staticmethod
    def _key(code: Any, line: int) -> str:
        path = code.co_filename
        for marker in ("/src/corral/", "/site-packages/", "/lib/python3.11/"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        return f"{path}:{code.co_firstlineno}({code.co_name})"

    def _run(self) -> None:
        import threading

        me = threading.get_ident()
        main = threading.main_thread().ident  # it only reads the benchmark's commands on stdin
        names = {}
        while not self.stop_flag.is_set():
            frames = sys._current_frames()
            for tid, frame in frames.items():
                if tid in (me, main) or frame.f_code.co_name in IDLE_LEAVES:
                    continue
                if tid not in names:
                    names = {t.ident: t.name for t in threading.enumerate()}
                kind = "event loop" if names.get(tid) == "corral-mcp" else "worker threads"
                self.samples += 1
                self.threads[kind] = self.threads.get(kind, 0) + 1
                leaf = self._key(frame.f_code, frame.f_lineno)
                self.leaf[leaf] = self.leaf.get(leaf, 0) + 1
                seen = set()
                f: Any = frame
                while f is not None:
                    k = self._key(f.f_code, 0)
                    if k not in seen:
                        seen.add(k)
                        self.cum[k] = self.cum.get(k, 0) + 1
                    f = f.f_back
            time.sleep(self.interval)

    def finish(self, n: int = 25) -> dict[str, Any]:
        self.stop_flag.set()
        self.thread.join()
        total = max(1, self.samples)

        def top(counts: dict[str, int]) -> list[list[Any]]:
            return [[k, round(100 * v / total, 1)] for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:n]]

        return {
            "samples": self.samples,
            "by_thread_pct": {k: round(100 * v / total, 1) for k, v in self.threads.items()},
            "leaf_pct": top(self.leaf),
            "cumulative_pct": top(self.cum),
        }


def serve() -> int:
    """The server child: ``corral.mcp.http.start`` as the daemon calls it; stops when stdin closes.

    ``sample`` on stdin starts a :class:`Sampler`; ``report`` stops it and prints its findings
    as one JSON line."""
    import logging

    from corral.mcp.http import start

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if "--nodelay" in sys.argv:
        # What-if: the listening socket made with IPPROTO_TCP. asyncio sets TCP_NODELAY only on a
        # socket whose proto is IPPROTO_TCP, and an accepted socket inherits the listener's proto
        # (0 from ``socket.socket(AF_INET, SOCK_STREAM)``): without it Nagle holds the response's
        # last small write until the client's delayed ACK (~40 ms on Linux).
        import socket as real
        import types

        import corral.mcp.http as http_door

        shim = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
        shim.socket = lambda family=-1, type=-1, proto=0, fileno=None: real.socket(
            family, type, proto or real.IPPROTO_TCP, fileno
        )
        http_door.socket = shim  # type: ignore[attr-defined,assignment]
    served = start(Path(os.environ["CORRAL_HOME"]), logging.getLogger("bench-mcp"))
    print(served.url, flush=True)
    sampler: Sampler | None = None
    for command in sys.stdin:
        if command.strip() == "sample":
            sampler = Sampler()
            print("sampling", flush=True)
        elif command.strip() == "report" and sampler is not None:
            print(json.dumps(sampler.finish()), flush=True)
            sampler = None
    served.stop()
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    sys.exit(serve())

from bench_cli import new_store  # noqa: E402
from benchlib import (  # noqa: E402
    drop_scratch,
    finish,
    load,
    machine,
    make_repo,
    parse_args,
    percentile,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import Shape  # noqa: E402


def stats(ms: list[float]) -> dict[str, Any]:
    return {
        "calls": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
    }


def mb(n: int) -> float:
    return round(n / 2**20, 1)


# -- the store ---------------------------------------------------------------------------------


def make_family(db: Path, subtasks: int) -> tuple[str, str, list[tuple[str, str]]]:
    """The oldest working task becomes the parent of the next ``subtasks`` working ones (one UPDATE)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        rows = conn.execute("SELECT id, ref FROM tasks WHERE status = 'working' ORDER BY created_at, id").fetchall()
        if len(rows) < subtasks + 1:
            raise SystemExit(f"only {len(rows)} working tasks seeded; {subtasks + 1} are needed")
        (pid, pref), children = rows[0], rows[1 : subtasks + 1]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "UPDATE tasks SET parent_id = ?, target_branch = NULL WHERE id = ?", [(pid, cid) for cid, _ in children]
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return pid, pref, [(cid, cref) for cid, cref in children]


# -- the server child ----------------------------------------------------------------------------


class Server:
    def __init__(self, env: dict[str, str], cwd: Path, log: Path, nodelay: bool = False) -> None:
        self.log = log
        self.err = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", *(["--nodelay"] if nodelay else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=env,
            cwd=cwd,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.proc.kill()
            raise SystemExit(f"the MCP server did not start:\n{log.read_text(errors='replace')[-3000:]}")
        import psutil  # type: ignore[import-untyped]

        self.ps = psutil.Process(self.proc.pid)

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def hwm(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def threads(self) -> int:
        return int(self.ps.num_threads())

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


# -- the client ----------------------------------------------------------------------------------


async def open_session(stack: AsyncExitStack, url: str, token: str, timeout: float) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
    )
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))


def check_show(parent_ref: str) -> Callable[[Any], str | None]:
    def check(res: Any) -> str | None:
        doc = res.structured_content or {}
        task = doc.get("task") or {}
        if res.is_error or task.get("ref") != parent_ref or task.get("status") != "working":
            return f"show answered {json.dumps(doc)[:600]}"
        return None

    return check


def check_list(rows: int, total: int) -> Callable[[Any], str | None]:
    def check(res: Any) -> str | None:
        doc = res.structured_content or {}
        got = doc.get("rows")
        if res.is_error or not isinstance(got, list) or len(got) != rows or doc.get("total") != total:
            return f"list answered {json.dumps(doc)[:600]}"
        return None

    return check


async def timed_calls(
    client: Any, calls: list[tuple[str, str, dict[str, Any], Callable[[Any], str | None]]], n: int, warmup: int
) -> dict[str, list[float]]:
    """Each call ``warmup + n`` times, alternately; the last ``n`` of each timed (ms)."""
    times: dict[str, list[float]] = {label: [] for label, *_ in calls}
    for i in range(warmup + n):
        for label, tool, args, check in calls:
            t0 = time.perf_counter()
            res = await (client.list_tools() if tool == "tools/list" else client.call_tool(tool, args))
            ms = (time.perf_counter() - t0) * 1000
            problem = check(res)
            if problem:
                raise SystemExit(f"{label}: {problem}")
            if i >= warmup:
                times[label].append(ms)
    return times


def result_bytes(res: Any) -> int:
    return sum(len(getattr(c, "text", "").encode()) for c in getattr(res, "content", []) or [])


def check_tools(res: Any) -> str | None:
    return None if len(res.tools) > 10 else f"tools/list answered {res}"


async def run_client(
    url: str,
    token: str,
    server: Server,
    parent_ref: str,
    children: list[str],
    protocol_dir: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    import anyio

    from corral.domain.agent_tools import WAIT_CALL_SECONDS
    from corral.engine.runtime.wait_markers import active_waits

    out: dict[str, Any] = {"rss_mb": {}, "hwm_mb": {}}
    out["rss_mb"]["started, no call yet"] = mb(server.rss())
    calls = [
        ("show", "show", {"task": parent_ref}, check_show(parent_ref)),
        ("list", "list", {"which": "all", "limit": args.page}, check_list(args.page, len(children) + 1)),
    ]
    async with AsyncExitStack() as stack:
        client = await open_session(stack, url, token, timeout=60)
        quiet = await timed_calls(client, calls, args.calls, args.warmup)
        out["quiet"] = {k: stats(v) for k, v in quiet.items()}
        out["result_bytes"] = {label: result_bytes(await client.call_tool(tool, a)) for label, tool, a, _ in calls}
        floor = await timed_calls(
            client, [("tools/list", "tools/list", {}, check_tools)], min(args.calls, 100), args.warmup
        )
        out["reference"] = {k: stats(v) for k, v in floor.items()}
        out["rss_mb"]["after the calls, no waits"] = mb(server.rss())
        out["threads_no_waits"] = server.threads()
        missed = any(st["p50_ms"] >= P50_TARGET_MS for st in out["quiet"].values())
        if args.sample_calls > 0 and (args.sample_server or (missed and not args.no_profile)):
            out["server_samples"] = {}
            for call in calls:
                server.ask("sample")
                await timed_calls(client, [call], args.sample_calls, 0)
                out["server_samples"][call[0]] = json.loads(server.ask("report"))
        if args.waits <= 0:
            return out

        wait_seconds = min(args.wait_seconds, WAIT_CALL_SECONDS)
        returned: list[str] = []
        begun = time.monotonic()
        async with AsyncExitStack() as wstack:
            sessions = [
                await open_session(wstack, url, token, timeout=wait_seconds + 60) for _ in range(args.wait_sessions)
            ]

            async def one_wait(i: int, ref: str) -> None:
                res = await sessions[i % len(sessions)].call_tool(
                    "wait", {"task": ref, "timeout_seconds": wait_seconds}
                )
                doc = res.structured_content or {}
                returned.append(f"{ref}: {json.dumps(doc)[:300]}")

            async with anyio.create_task_group() as tg:
                targets = children[: args.waits]
                for i, ref in enumerate(targets):
                    tg.start_soon(one_wait, i, ref)
                deadline = time.monotonic() + 60
                while len(await anyio.to_thread.run_sync(lambda: active_waits(protocol_dir))) < len(targets):
                    if time.monotonic() > deadline or returned:
                        raise SystemExit(f"the {len(targets)} waits were not all registered: {returned[:3]}")
                    await anyio.sleep(0.05)
                out["waits_registered_s"] = round(time.monotonic() - begun, 2)
                await anyio.sleep(1.0)  # every wait has looked at least once
                out["rss_mb"][f"{len(targets)} waits open, idle"] = mb(server.rss())
                c0, t0 = server.cpu(), time.monotonic()
                await anyio.sleep(args.idle_seconds)
                out["idle_cpu_pct"] = round(100 * (server.cpu() - c0) / (time.monotonic() - t0), 1)
                out["threads_with_waits"] = server.threads()
                busy = await timed_calls(client, calls, args.calls, args.warmup)
                out["with_waits"] = {k: stats(v) for k, v in busy.items()}
                out["rss_mb"][f"{len(targets)} waits open, after the calls"] = mb(server.rss())
                still = len(await anyio.to_thread.run_sync(lambda: active_waits(protocol_dir)))
                out["waits_open_at_end"] = still
                out["waits_held_s"] = round(time.monotonic() - begun, 1)
                if returned or still != len(targets):
                    raise SystemExit(f"waits ended early ({still} of {len(targets)} open): {returned[:3]}")
                tg.cancel_scope.cancel()
        # the wait sessions are closed: the server cancels their calls and clears the marker
        deadline = time.monotonic() + 10
        left = len(active_waits(protocol_dir))
        while left and time.monotonic() < deadline:
            await anyio.sleep(0.1)
            left = len(active_waits(protocol_dir))
        out["waits_left_after_disconnect"] = left
        await anyio.sleep(0.5)
        out["rss_mb"]["waits closed"] = mb(server.rss())
        out["hwm_mb"]["peak (VmHWM)"] = mb(server.hwm())
    return out


# -- in-process attribution ----------------------------------------------------------------------


def in_process(
    home: Path, token: str, parent_ref: str, page: int, n: int, profile_n: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The tools' own work, as the server's worker thread does it per call (resolve, then run)."""
    from corral.engine.operations import gates
    from corral.engine.runtime import agent_tokens
    from corral.mcp.calling import Args, Calling
    from corral.mcp.server import Projects
    from corral.mcp.tools import TOOLS

    projects = Projects()

    def resolve() -> Calling:
        grant = agent_tokens.find(home, token)
        assert grant is not None
        project = projects.get(grant.repo, grant.state)
        return Calling(lambda: projects.get(grant.repo, grant.state), gates.agent(project, grant), settles=False)

    show, lst = TOOLS["show"].run, TOOLS["list"].run
    assert show is not None and lst is not None
    jobs: dict[str, Callable[[], Any]] = {
        "show": lambda: show(resolve(), Args("show", {"task": parent_ref})),
        "list": lambda: lst(resolve(), Args("list", {"which": "all", "limit": page})),
        "resolve (token + gate)": resolve,
    }
    for job in jobs.values():
        job()
    times: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(n):
        for k, job in jobs.items():
            t0 = time.perf_counter()
            job()
            times[k].append((time.perf_counter() - t0) * 1000)
    timed: dict[str, Any] = {k: stats(v) for k, v in times.items()}
    # What one more worker thread's project keeps after one ``list``: the server opens a project
    # (a store connection, and its decode memo of every task it has read) per worker thread.
    import tracemalloc

    fresh = Projects()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    grant = agent_tokens.find(home, token)
    assert grant is not None
    project = fresh.get(grant.repo, grant.state)
    lst(Calling(lambda: project, gates.agent(project, grant), settles=False), Args("list", {"which": "all"}))
    kept = sum(st.size_diff for st in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    timed["one project's memory after one list (tracemalloc)"] = {"python_mb": mb(kept)}
    if profile_n <= 0:
        return timed, None
    profiles: dict[str, Any] = {}
    for k in ("show", "list"):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(profile_n):
            jobs[k]()
        prof.disable()
        profiles[k] = top_costs(prof, profile_n)
    return timed, profiles


def top_costs(prof: cProfile.Profile, calls: int, n: int = 14) -> dict[str, Any]:
    st = pstats.Stats(prof)
    entries = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values())

    def name(key: tuple[str, int, str]) -> str:
        path, line, func = key
        for marker in ("/src/corral/", "/site-packages/", "/lib/python3"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        return f"{path}:{line}({func})" if line else func

    def rows(index: int) -> list[dict[str, Any]]:
        ranked = sorted(entries.items(), key=lambda kv: kv[1][index], reverse=True)[:n]
        return [
            {
                "function": name(key),
                "calls_per_call": round(v[1] / calls, 1),
                "own_ms_per_call": round(1000 * v[2] / calls, 3),
                "cum_ms_per_call": round(1000 * v[3] / calls, 3),
            }
            for key, v in ranked
        ]

    return {"profiled_ms_per_call": round(1000 * total / calls, 2), "by_own_time": rows(2), "by_cumulative": rows(3)}


def print_profile(label: str, prof: dict[str, Any]) -> None:
    print(f"\n  {label}: {prof['profiled_ms_per_call']} ms per call under the profiler")
    print("    by cumulative time (ms per call):")
    for r in prof["by_cumulative"]:
        print(f"      {r['cum_ms_per_call']:8.2f}  {r['calls_per_call']:8.1f}×  {r['function']}")
    print("    by own time (ms per call):")
    for r in prof["by_own_time"][:10]:
        print(f"      {r['own_ms_per_call']:8.2f}  {r['calls_per_call']:8.1f}×  {r['function']}")


def print_samples(tool: str, smp: dict[str, Any], calls: int) -> None:
    threads = ", ".join(f"{k} {v} %" for k, v in smp["by_thread_pct"].items())
    print(f"\n  server samples over {calls} {tool} calls over HTTP ({smp['samples']:,} busy samples: {threads}):")
    print("    cumulative (share of busy samples):")
    for name, pct in smp["cumulative_pct"][:22]:
        print(f"      {pct:5.1f} %  {name}")
    print("    leaf:")
    for name, pct in smp["leaf_pct"][:10]:
        print(f"      {pct:5.1f} %  {name}")


# -- main ----------------------------------------------------------------------------------------


def line(label: str, s: dict[str, Any], target: bool = True) -> str:
    text = (
        f"  {label:<34} p50 {s['p50_ms']:7.2f} ms   p99 {s['p99_ms']:7.2f} ms   (max {s['max_ms']:.1f}, n={s['calls']})"
    )
    if target:
        text += f"   p50 < {P50_TARGET_MS:g} ms {verdict(s['p50_ms'] < P50_TARGET_MS)}"
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=200, help="timed calls of show and of list, per phase (default 200)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls of each first (default 10)")
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the store (default 10,000)")
    p.add_argument("--turns", type=int, default=100_000, help="turns in the store (default 100,000)")
    p.add_argument("--waits", type=int, default=SUBTASKS_DEFAULT, help="wait calls held open (default 50)")
    p.add_argument("--wait-sessions", type=int, default=1, help="client sessions the waits share (default 1)")
    p.add_argument("--wait-seconds", type=float, default=240.0, help="each wait's timeout_seconds (default 240)")
    p.add_argument("--idle-seconds", type=float, default=5.0, help="how long the server's idle CPU is read (default 5)")
    p.add_argument("--page", type=int, default=50, help="list's limit (default 50)")
    p.add_argument("--inproc-calls", type=int, default=30, help="in-process tool calls for attribution (default 30)")
    p.add_argument("--profile", action="store_true", help="profile the in-process calls even when targets pass")
    p.add_argument("--profile-calls", type=int, default=50, help="calls per profiled tool (default 50)")
    p.add_argument(
        "--sample-server",
        action="store_true",
        help="sample the server's threads over --calls more calls of each tool (default: when a target is missed)",
    )
    p.add_argument("--sample-calls", type=int, default=40, help="calls of each tool sampled in the server (default 40)")
    p.add_argument(
        "--no-what-if",
        action="store_true",
        help="skip the reference run (min(--calls, 50) calls) against a server whose listening socket gets TCP_NODELAY",
    )
    p.add_argument("--no-profile", action="store_true", help="never profile or sample, even when a target is missed")
    scratch_options(p)
    quick = {"calls": 2, "warmup": 1, "tasks": 400, "turns": 3_000, "waits": 2, "wait_seconds": 5.0}
    quick.update({"idle_seconds": 0.5, "page": 5, "inproc_calls": 2, "no_what_if": True, "no_profile": True})
    args = parse_args(p, quick, argv)
    args.sample_server = args.sample_server or args.profile
    subtasks = max(args.waits, args.page, 1)

    base = scratch_dir("mcp", args)
    result: dict[str, Any] = {
        "benchmark": "bench_mcp",
        "machine": machine(),
        "targets": {"p50_ms": P50_TARGET_MS},
        "settings": {k: v for k, v in vars(args).items() if k not in ("tmp", "keep")},
        "load_before": load(),
        "note": "the daemon's reconcile ticks are not running (they would mark the seeded working tasks lost: "
        "no supervisor runs for them); the HTTP door does not settle before reads",
    }
    ok = True
    server: Server | None = None
    try:
        repo = make_repo(base / "repo")
        shape = Shape(tasks=args.tasks, turns=args.turns)
        shape.working += subtasks + 1
        print(f"Seeding {shape.tasks:,} tasks / {shape.turns:,} turns ({shape.working} working) …", flush=True)
        home, env, manifest = new_store(base, "mcp", shape, repo)
        parent_id, parent_ref, family = make_family(Path(manifest["database"]), subtasks)
        children = [ref for _, ref in family]
        print(
            f"  seeded in {manifest['seconds']} s ({manifest['db_bytes'] / 1e6:.0f} MB); "
            f"{parent_ref} has {len(children)} working subtasks"
        )
        result["store"] = {k: manifest[k] for k in ("tasks", "by_status", "turns", "db_bytes", "seconds")}

        os.environ.update(env)  # this process opens the project as the server does: same home, no user config
        from corral.engine.project import Project
        from corral.engine.runtime import agent_tokens

        project = Project.open(repo)
        with project.store.read() as tx:
            command_id = tx.current_command_ids([parent_id])[parent_id]
        token, _grant = agent_tokens.mint(
            home, task_id=parent_id, task_ref=parent_ref, command_id=command_id, state=project.paths.root,
            repo=project.repo,
        )  # fmt: skip
        protocol_dir = project.paths.protocol_dir(parent_id)

        server = Server(env, repo, base / "server.log")
        print(f"Serving {server.url} in a child process (corral.mcp.http.start).")
        print("  Note: the daemon's reconcile ticks are not running in this benchmark (they would mark the")
        print("  seeded working tasks lost: no supervisor runs for them).")
        import anyio

        started = time.monotonic()
        got = anyio.run(run_client, server.url, token, server, parent_ref, children, protocol_dir, args)
        result["http_seconds"] = round(time.monotonic() - started, 1)
        result["http"] = got
        result["load_during"] = load()
        server.stop()
        server = None

        print(f"\nOver streamable HTTP, one session, {args.calls} calls each after {args.warmup} warm-up, alternately:")
        print(f"  (show {parent_ref}: latest 20 turns; list {{which: all, limit: {args.page}}})")
        for phase, title in (("quiet", "no waits open"), ("with_waits", f"{args.waits} waits open")):
            if phase not in got:
                continue
            print(f" {title}:")
            for tool, s in got[phase].items():
                passed = s["p50_ms"] < P50_TARGET_MS
                s["pass"] = passed
                ok &= passed
                print(line(tool, s))
        if "with_waits" in got:
            print(
                f"  waits: registered {got['waits_registered_s']} s after the first was sent, held "
                f"{got['waits_held_s']} s, {got['waits_open_at_end']} open at the end, none returned; "
                f"{got['waits_left_after_disconnect']} left in the marker after their sessions closed"
            )
            print(
                f"  server CPU with the waits open and no other call: {got['idle_cpu_pct']} % of a core "
                f"(over {args.idle_seconds:g} s); threads {got['threads_no_waits']} → {got['threads_with_waits']}"
            )
        print("\nServer RSS (psutil):")
        for k, v in {**got["rss_mb"], **got["hwm_mb"]}.items():
            print(f"  {k:<38} {v:7.1f} MB")

        if "reference" in got:
            print(" reference (no target):")
            for tool, s in got["reference"].items():
                print(line(f"{tool} (the transport's floor)", s, target=False))
        print(f"  result sizes: {', '.join(f'{k} {v:,} B' for k, v in got['result_bytes'].items())}")
        for tool, smp in got.get("server_samples", {}).items():
            print_samples(tool, smp, args.sample_calls)
        if not args.no_what_if:
            what_if = Server(env, repo, base / "server-nodelay.log", nodelay=True)
            try:
                quick = argparse.Namespace(**{**vars(args), "waits": 0, "sample_server": False, "sample_calls": 0})
                quick.calls = min(args.calls, 50)
                got2 = anyio.run(run_client, what_if.url, token, what_if, parent_ref, children, protocol_dir, quick)
            finally:
                what_if.stop()
            result["what_if_nodelay"] = {**got2["quiet"], **got2["reference"]}
            print("\nWhat-if (no target): the same calls, no waits, against a server whose listening socket is made")
            print("with IPPROTO_TCP, so asyncio gives each connection TCP_NODELAY (src/ unchanged):")
            for tool, s in result["what_if_nodelay"].items():
                print(line(tool, s, target=False))
        want_profile = args.profile or (not ok and not args.no_profile)
        print(f"\nIn this process, no HTTP (resolve + TOOLS[...].run), {args.inproc_calls} calls each:")
        timed, profiles = in_process(
            home, token, parent_ref, args.page, args.inproc_calls, args.profile_calls if want_profile else 0
        )
        for k, s in timed.items():
            if "python_mb" in s:
                print(f"  {k}: {s['python_mb']} MB of Python objects kept")
            else:
                print(line(k, s, target=False))
        result["in_process"] = timed
        if profiles:
            print(f"\nWhere the time goes (cProfile, {args.profile_calls} in-process calls each):")
            for k, prof in profiles.items():
                print_profile(k, prof)
            result["profile"] = profiles
    finally:
        if server is not None:
            server.stop()
        drop_scratch(base, args.keep)
    return finish("bench_mcp", result, ok)


if __name__ == "__main__":
    sys.exit(main())
