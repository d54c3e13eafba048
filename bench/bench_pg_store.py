#!/usr/bin/env python
"""Durable status transitions per second through the ``Store`` API on PostgreSQL, beside pgbench.

One client. Each transition is one write transaction of ``PostgresStore`` (BEGIN with the
project's advisory lock, the status read, the update, its status-change record, COMMIT), as
corral's engine makes it: working → blocked via ``tx.park`` and blocked → working via
``tx.set_status`` with ``expected_from``. The reference is pgbench's TPC-B-like transaction
(``pgbench -c 1``, scale 1: three updates, a select and an insert, one durable commit) on the
same server, in the same rounds: pgbench and the store alternate in slices of ``--slice``
seconds for ``--rounds`` rounds, so both see the same disk; the ratio is the median of the
per-round ratios.

Target: transitions/s ≥ 0.5 × pgbench's tps.

The server: ``--url`` or ``CORRAL_TEST_PG_URL``, else one started for the run (initdb into a
temporary directory, loopback, fsync on, the server's default durability) as in the tests.

Usage::

    .venv/bin/python bench/bench_pg_store.py
    .venv/bin/python bench/bench_pg_store.py --rounds 5 --slice 4

Results are printed and written to bench/results/bench_pg_store.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.postgres import Server, admin, with_database

from benchlib import finish, machine, median, parse_args, percentile
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.store import NewTask
from corral.store.postgres import PostgresStore

TARGET = 0.5


def pgbench(url: str, seconds: float) -> float:
    out = subprocess.run(
        ["pgbench", "-c", "1", "-j", "1", "-T", str(max(1, round(seconds))), "-n", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"tps = ([0-9.]+)", out)
    if not found:
        raise RuntimeError(f"no tps in pgbench's output:\n{out}")
    return float(found.group(1))


def transitions(store: PostgresStore, task_id: str, seconds: float, latencies: list[float]) -> tuple[int, float]:
    done = 0
    start = time.perf_counter()
    end = start + seconds
    with store.read() as tx:
        status = tx.get_task(task_id).status  # type: ignore[union-attr]
    while True:
        t0 = time.perf_counter()
        if t0 >= end:
            break
        with store.write() as tx:
            if status is Status.WORKING:
                tx.park(task_id, Actor.SYSTEM, "bench", expected_from=Status.WORKING)
                status = Status.BLOCKED
            else:
                tx.set_status(task_id, Status.WORKING, Actor.HUMAN, "bench", expected_from=Status.BLOCKED)
                status = Status.WORKING
        latencies.append(time.perf_counter() - t0)
        done += 1
    return done, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("CORRAL_TEST_PG_URL"), help="a PostgreSQL server to use")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slice", type=float, default=4.0, help="seconds per stream per round")
    args = parse_args(p, {"rounds": 1, "slice": 0.2})

    server = None if args.url else Server()
    base = args.url or (server.url if server else "")
    bench_db = f"corral_bench_{uuid.uuid4().hex[:8]}"
    try:
        admin(base, f'CREATE DATABASE "{bench_db}"')
        url = with_database(base, bench_db)
        subprocess.run(["pgbench", "-i", "-s", "1", "-q", url], capture_output=True, check=True)
        store = PostgresStore(url, schema="corral_bench")
        with store.write() as tx:
            task = tx.insert_task(NewTask(ref="bench", goal="bench"), Actor.HUMAN)
            tx.insert_session(task.id)
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start")
        with store.read() as tx:
            before = len(tx.status_changes(task.id))
        rounds: list[dict[str, float]] = []
        latencies: list[float] = []
        total = 0
        for _ in range(args.rounds):
            tps = pgbench(url, args.slice)
            count, took = transitions(store, task.id, args.slice, latencies)
            total += count
            rate = count / took
            rounds.append({"pgbench_tps": tps, "transitions_per_s": rate, "ratio": rate / tps})
        with store.read() as tx:
            recorded = len(tx.status_changes(task.id)) - before
        store.close()
    finally:
        try:
            admin(base, f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
        finally:
            if server is not None:
                server.stop()

    ratio = median([r["ratio"] for r in rounds])
    result: dict[str, Any] = {
        "machine": machine(),
        "server": "given" if args.url else "started for the run (fsync on)",
        "rounds": rounds,
        "pgbench_tps_median": median([r["pgbench_tps"] for r in rounds]),
        "transitions_per_s_median": median([r["transitions_per_s"] for r in rounds]),
        "ratio_median": ratio,
        "target": TARGET,
        "latency_ms": {"median": median(latencies) * 1000, "p99": percentile(latencies, 99) * 1000},
        "transitions": total,
        "status_changes_recorded": recorded,
    }
    print(f"pgbench -c 1 (TPC-B, scale 1): {result['pgbench_tps_median']:.0f} tps")
    print(f"Store transitions:             {result['transitions_per_s_median']:.0f} /s")
    print(f"ratio (median of rounds):      {ratio:.2f} (target ≥ {TARGET})")
    print(f"latency: median {result['latency_ms']['median']:.2f} ms, p99 {result['latency_ms']['p99']:.2f} ms")
    print(f"every transition recorded:     {recorded == total} ({recorded} of {total})")
    return finish("bench_pg_store", result, ratio >= TARGET and recorded == total)


if __name__ == "__main__":
    raise SystemExit(main())
