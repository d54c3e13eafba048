#!/usr/bin/env python
"""corral's web dashboard against 10,000 tasks: a page asked for right after a change, a real render each time.

1. The store and the server of bench_dashboard.py: a scratch repository and CORRAL_HOME holding the
   benchmark store of bench_cli.py (10,000 tasks, 100,000 turns, seed_store.py; 330 unfinished), and
   ``corral.dashboard.web.start(home)`` in a child process of its own (its ``--serve``), without the
   daemon's ticks, so the store changes only when this benchmark changes it.

2. The board right after a change: ``--renders`` (20) times, a backlog task is closed through the engine
   (``tasks.abandon``, as the dashboard's own Close does) and ``GET /`` is sent at once, with no wait for
   any poll of the server's, timed from the request to the last byte (target: median < 300 ms). Every page
   must no longer show the closed task's card: a page that still does was served from a render made before
   the change (stale), and fails the run.

3. A task page right after a change to that task: ``--renders`` times, a backlog task is closed and its page
   (``GET /p/<state>/t/<task>``) sent at once, timed the same way; its status must be ``abandoned``.

Usage::

    .venv/bin/python bench/bench_dashboard_render.py              # ~1 minute on 2 CPUs
    .venv/bin/python bench/bench_dashboard_render.py --quick      # tiny sizes: checks that it runs

Results are printed and written to bench/results/bench_dashboard_render.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import new_store
from bench_dashboard import Server, backlog_tasks
from benchlib import (
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
from seed_store import Shape

TARGET_MS = 300.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the store (default 10,000)")
    p.add_argument("--turns", type=int, default=100_000, help="turns in the store (default 100,000)")
    p.add_argument("--renders", type=int, default=20, help="pages asked for right after a change, each kind")
    p.add_argument("--settle", type=float, default=3.0, help="seconds between the server's start and the first GET")
    scratch_options(p)
    args = parse_args(p, {"tasks": 400, "turns": 3_000, "renders": 2, "settle": 0.5}, argv)

    base = scratch_dir("dashboard-render", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "args": vars(args)}
    server: Server | None = None
    ok = False
    try:
        repo = make_repo(base / "repo")
        home, env, manifest = new_store(base, "dash", Shape(tasks=args.tasks, turns=args.turns), repo)
        result["store"] = {k: manifest[k] for k in ("tasks", "turns", "by_status", "db_bytes")}
        print(f"Seeded {manifest['tasks']} tasks, {manifest['turns']} turns in {manifest['seconds']} s.")
        os.environ.update({k: v for k, v in env.items() if k.startswith("CORRAL_")})  # this process's engine calls

        server = Server(env, repo, base / "server.log")
        from corral.dashboard.security import Keys, secret
        from corral.domain.actors import Actor
        from corral.engine.operations import tasks
        from corral.engine.project import Project

        keys = Keys(home, secret(home))
        cookie = f"{keys.cookie_name}={keys.cookie_value()}"
        time.sleep(args.settle)  # the server's warm-up (its modules and projects) is done
        status, _, first, _ = server.get(keys.prefix + "/", cookie)
        assert status == 200, status
        project = Project.open(repo)
        state = project.paths.root.name
        closing = backlog_tasks(repo, 2 * args.renders)
        if len(closing) < 2 * args.renders:
            raise SystemExit(f"only {len(closing)} backlog tasks; more are needed")

        board: list[float] = []
        stale = 0
        for task_id, _ref in closing[: args.renders]:
            tasks.abandon(project, task_id, reason="bench", actor=Actor.HUMAN, how="close")
            status, body, took, _ = server.get(keys.prefix + "/", cookie)  # at once: no poll waited out
            assert status == 200, status
            board.append(took * 1000)
            stale += f'id="card-{task_id}"'.encode() in body

        pages: list[float] = []
        for task_id, _ref in closing[args.renders :]:
            server.get(f"{keys.prefix}/p/{state}/t/{task_id}", cookie)  # the page as it was, rendered once
            tasks.abandon(project, task_id, reason="bench", actor=Actor.HUMAN, how="close")
            status, body, took, _ = server.get(f"{keys.prefix}/p/{state}/t/{task_id}", cookie)
            assert status == 200, status
            pages.append(took * 1000)
            stale += b'id="task-status" data-status="abandoned"' not in body
        project.close()
        unchanged = [server.get(keys.prefix + "/", cookie)[2] * 1000 for _ in range(5)]  # the shared render
        statics = [server.get(keys.prefix + "/static/dashboard.css")[2] * 1000 for _ in range(5)]

        board_ok = median(board) < TARGET_MS
        page_ok = median(pages) < TARGET_MS
        result["first_board_ms"] = round(first * 1000, 1)
        result["board_after_change"] = {
            "median_ms": round(median(board), 1),
            "max_ms": round(max(board), 1),
            "pass": board_ok,
        }
        result["task_page_after_change"] = {
            "median_ms": round(median(pages), 1),
            "max_ms": round(max(pages), 1),
            "pass": page_ok,
        }
        result["stale_pages"] = stale
        print(f"Board first response {first * 1000:.0f} ms.")
        print(
            f"Board right after a change: median {median(board):.0f} ms, max {max(board):.0f} ms"
            f" (target < {TARGET_MS:.0f}) {verdict(board_ok)}"
        )
        print(
            f"Task page right after a change: median {median(pages):.0f} ms, max {max(pages):.0f} ms"
            f" (target < {TARGET_MS:.0f}) {verdict(page_ok)}"
        )
        print(f"Pages served from a render older than the change: {stale} {verdict(stale == 0)}")
        floors = {
            "static_file_get_ms": round(median(statics), 1),
            "unchanged_board_get_ms": round(median(unchanged), 1),
        }
        report_floors(result, floors, "the same server's round trip with no render, and the board with no change")
        ok = board_ok and page_ok and stale == 0
    finally:
        if server is not None:
            server.stop()
        drop_scratch(base, args.keep)
    return finish("bench_dashboard_render", result, ok)


if __name__ == "__main__":
    sys.exit(main())
