#!/usr/bin/env python
"""corral's web dashboard against 10,000 tasks: the board's first response, its weight, how soon an
open page shows a status change, and the server's memory with 20 pages open.

1. A scratch repository and CORRAL_HOME holding the benchmark store of bench_cli.py (10,000
   tasks, 100,000 turns, seed_store.py): 330 unfinished (70 working, their ``status.json``
   naming this live process), the rest finished; the board shows every unfinished task and
   the last 100 finished.

2. The server: ``corral.dashboard.web.start(home)`` — what the daemon runs in a thread — in a
   child process of its own (``--serve``), so its RSS is the server's alone. The daemon's ticks
   do not run (they would mark the seeded working tasks lost), so the store changes only when
   this benchmark changes it.

3. The board's first response: ``GET /`` with the session cookie, the first request, ``--settle``
   (3) s after the server started (it loads its modules and opens the projects meanwhile, as a
   daemon does before a person opens the URL; the board itself is read and rendered anew), timed
   from the request to the last
   byte (target < 300 ms); then the median of ``--renders`` more, each after a change in the
   store, so each is a full read and render too (not the shared render of an unchanged board):
   each waits out the server's stamp poll (``POLL_SECONDS``) first, and counts only when its
   page no longer shows the closed task, the proof that it was read and rendered anew.
   Page weight: the HTML, and with the CSS, htmx and the page's stream script.

4. Delay from a status change to the open page showing it: the board open in Debian's
   chromium (Playwright, headless); ``--changes`` (20) backlog tasks are closed one at a time
   through the engine (``tasks.abandon``, as the dashboard's own Close does), each timed from the
   moment before the call until the page no longer shows the task's card in its column
   (``wait_for_function``, checked each animation frame). Target: median < 1 s.

5. Server RSS with ``--pages`` (20) board pages open in the browser, each on its own event
   stream, after one more change was pushed to them all.

Usage::

    .venv/bin/python bench/bench_dashboard.py                 # ~1 minute on 2 CPUs
    .venv/bin/python bench/bench_dashboard.py --tasks 2000 --turns 20000

Results are printed and written to bench/results/bench_dashboard.json.
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

FIRST_TARGET_MS = 300.0
DELAY_TARGET_MS = 1000.0
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
]


def serve() -> int:
    """The child: the dashboard on loopback, its URL on stdout, until stdin closes."""
    from corral.dashboard import web
    from corral.engine.paths import corral_home

    served = web.start(corral_home())
    print(served.url, flush=True)
    sys.stdin.read()
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
    median,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    verdict,
)
from seed_store import Shape  # noqa: E402


class Server:
    def __init__(self, env: dict[str, str], cwd: Path, log: Path) -> None:
        self.err = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve"],
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
            raise SystemExit(f"the dashboard did not start:\n{log.read_text(errors='replace')[-3000:]}")
        import psutil  # type: ignore[import-untyped]

        self.ps = psutil.Process(self.proc.pid)
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def get(self, path: str, cookie: str | None = None) -> tuple[int, bytes, float, dict[str, str]]:
        """(status, body, seconds from the request to the last byte, headers)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Host": f"{self.host}:{self.port}", **({"Cookie": cookie} if cookie else {})}
        started = time.perf_counter()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        took = time.perf_counter() - started
        conn.close()
        return response.status, body, took, {k.lower(): v for k, v in response.getheaders()}

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def backlog_tasks(repo: Path, n: int) -> list[tuple[str, str]]:
    from corral.domain.status import Status
    from corral.engine.project import Project

    project = Project.open(repo)
    try:
        with project.store.read() as tx:
            found = tx.tasks([Status.BACKLOG])
    finally:
        project.close()
    return [(t.id, t.ref) for t in found[:n]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the store (default 10,000)")
    p.add_argument("--turns", type=int, default=100_000, help="turns in the store (default 100,000)")
    p.add_argument("--renders", type=int, default=10, help="board renders after a change (default 10)")
    p.add_argument("--changes", type=int, default=20, help="status changes timed on the open page (default 20)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds between the server's start and the first GET")
    p.add_argument("--pages", type=int, default=20, help="board pages open for the RSS figure (default 20)")
    scratch_options(p)
    quick = {"tasks": 400, "turns": 3_000, "renders": 1, "changes": 1, "settle": 0.5, "pages": 1}
    args = parse_args(p, quick, argv)

    base = scratch_dir("dashboard", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "args": vars(args)}
    server: Server | None = None
    try:
        repo = make_repo(base / "repo")
        home, env, manifest = new_store(base, "dash", Shape(tasks=args.tasks, turns=args.turns), repo)
        result["store"] = {k: manifest[k] for k in ("tasks", "turns", "by_status", "db_bytes")}
        print(f"Seeded {manifest['tasks']} tasks, {manifest['turns']} turns in {manifest['seconds']} s.")
        os.environ.update({k: v for k, v in env.items() if k.startswith("CORRAL_")})  # this process's engine calls

        server = Server(env, repo, base / "server.log")
        from corral.dashboard.security import Keys, secret, signed_url

        keys = Keys(home, secret(home))
        cookie = f"{keys.cookie_name}={keys.cookie_value()}"
        time.sleep(args.settle)  # the server's warm-up (its modules and projects) is done
        rss_idle = server.rss()

        # -- 3. the first response, then renders after a change --------------------------------------
        status, body, took, _ = server.get(keys.prefix + "/", cookie)
        assert status == 200, status
        first_ms = took * 1000
        changes = backlog_tasks(repo, args.renders + args.changes + 1)
        if len(changes) < args.renders + args.changes + 1:
            raise SystemExit(f"only {len(changes)} backlog tasks; more are needed")
        from corral.dashboard.hub import POLL_SECONDS
        from corral.domain.actors import Actor
        from corral.engine.operations import tasks
        from corral.engine.project import Project

        project = Project.open(repo)
        renders = []
        for task_id, _ref in changes[: args.renders]:
            tasks.abandon(project, task_id, reason="bench", actor=Actor.HUMAN, how="close")
            for _ in range(20):
                time.sleep(POLL_SECONDS)  # the server's stamp of the store is read anew after this
                status, body, took, _ = server.get(keys.prefix + "/", cookie)
                assert status == 200
                if f'id="card-{task_id}"'.encode() not in body:  # this render read the change
                    renders.append(took * 1000)
                    break
            else:
                raise SystemExit(f"the board still shows task {task_id} after it was closed")
        weights = {"html": len(body)}
        for asset in ("/static/dashboard.css", "/static/htmx-2.0.11.min.js", "/static/dashboard.js"):
            asset = keys.prefix + asset
            _, data, _, _ = server.get(asset)
            weights[asset.rsplit("/", 1)[1]] = len(data)
        weights["total"] = sum(weights.values())
        statics = [server.get(keys.prefix + "/static/dashboard.css")[2] * 1000 for _ in range(5)]
        result["board"] = {
            "first_ms": round(first_ms, 1),
            "after_change_median_ms": round(median(renders), 1),
            "after_change_max_ms": round(max(renders), 1),
            "bytes": weights,
            "first_pass": first_ms < FIRST_TARGET_MS,
        }
        first_ok = first_ms < FIRST_TARGET_MS
        print(
            f"Board first response {first_ms:.0f} ms (target < {FIRST_TARGET_MS:.0f}) {verdict(first_ok)};"
            f" after a change: median {median(renders):.0f} ms, max {max(renders):.0f} ms"
        )
        print(f"Page weight: HTML {weights['html'] / 1024:.0f} KiB, with assets {weights['total'] / 1024:.0f} KiB")
        note = f"a static file from the same server, no read or render; it looks for a change every {POLL_SECONDS} s"
        report_floors(result, {"static_file_get_ms": round(median(statics), 1)}, note)

        # -- 4. status change to the open page, 5. RSS with pages open ---------------------------------
        from playwright.sync_api import sync_playwright

        delays = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            contexts = [browser.new_context() for _ in range(args.pages)]
            page = contexts[0].new_page()
            page.goto(signed_url(server.url, home))
            page.wait_for_selector("#board section[data-needs=backlog]")
            time.sleep(1.0)  # the page's event stream is open
            for task_id, _ref in changes[args.renders : args.renders + args.changes]:
                card = f"#board section[data-needs=backlog] #card-{task_id}"
                page.wait_for_selector(card)
                started = time.perf_counter()
                tasks.abandon(project, task_id, reason="bench", actor=Actor.HUMAN, how="close")
                page.wait_for_function("(s) => !document.querySelector(s)", arg=card, polling="raf", timeout=30_000)
                delays.append((time.perf_counter() - started) * 1000)
            # One page per context: a browser profile holds at most 6 connections to one host over
            # HTTP/1.1, and each open page holds one for its event stream (docs/dashboard.md).
            pages = [page]
            for context in contexts[1:]:
                extra = context.new_page()
                extra.goto(signed_url(server.url, home))
                extra.wait_for_selector("#board section[data-needs=backlog]")
                pages.append(extra)
            time.sleep(1.0)
            last_id = changes[-1][0]
            tasks.abandon(project, last_id, reason="bench", actor=Actor.HUMAN, how="close")
            for each in pages:
                each.wait_for_function("(s) => !document.querySelector(s)", arg=f"#card-{last_id}", timeout=30_000)
            time.sleep(1.0)
            rss_pages = server.rss()
            browser.close()
        project.close()
        result["delay"] = {
            "changes": len(delays),
            "median_ms": round(median(delays), 1),
            "max_ms": round(max(delays), 1),
            "min_ms": round(min(delays), 1),
            "pass": median(delays) < DELAY_TARGET_MS,
        }
        result["rss"] = {"idle_mb": round(rss_idle / 2**20, 1), f"{args.pages}_pages_mb": round(rss_pages / 2**20, 1)}
        print(
            f"Status change → open page: median {median(delays):.0f} ms (target < {DELAY_TARGET_MS:.0f})"
            f" {verdict(median(delays) < DELAY_TARGET_MS)}; min {min(delays):.0f}, max {max(delays):.0f} ms"
        )
        print(f"Server RSS: {rss_idle / 2**20:.0f} MB idle, {rss_pages / 2**20:.0f} MB with {args.pages} pages open")
        ok = bool(result["board"]["first_pass"] and result["delay"]["pass"])
    finally:
        if server is not None:
            server.stop()
        drop_scratch(base, args.keep)
    return finish("bench_dashboard", result, ok)


if __name__ == "__main__":
    sys.exit(main())
