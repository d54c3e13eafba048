#!/usr/bin/env python
"""Durable status transitions per second on one SQLite file, beside the disk's raw fsync rate.

The store commits every write transaction durably (WAL, ``synchronous=FULL``): one
status transition is one ``BEGIN IMMEDIATE … COMMIT`` and at least one sync of the
WAL. So the ceiling is the disk's sync rate, and the question is how close the store
gets to it.

1. Seeds a store (10,000 tasks / 100,000 turns by default; ``--seed-tasks 0`` for an
   empty one) in a scratch directory, and opens it with ``SQLiteStore``.
2. Measures, interleaved in short slices (``--slice``, default 0.2 s) so that all see
   the same disk (a shared disk's sync latency drifts by 10x within seconds), for
   ``--seconds`` (default 12 s: 15 rounds, since a shared disk's sync drifts between rounds) in total:

   * fsync: write a 4 KiB block at offset 0 of a preallocated file in the same
     directory, then ``os.fsync`` — the raw rate the target refers to;
   * fdatasync: the same with ``os.fdatasync`` (what SQLite calls on Linux), the physical limit;
   * a one-row SQLite commit: ``UPDATE`` of one row of a one-table database in WAL mode with
     ``synchronous=FULL``, as the store opens its own (the anchor of the target);
   * transitions: each its own write transaction through the store, alternating
     legally (domain/status.py): working → blocked via ``tx.park`` and
     blocked → working via ``tx.set_status``, with ``expected_from`` as corral's
     engine passes it.

   Each stream's rate is its count over its own time; the ratio is also given per
   round (median of the per-slice ratios), which is robust to drift.
3. Diagnostics, on a copy of the same seeded store: the same loop on tmpfs (``/dev/shm``),
   where syncs cost nothing, gives the store's CPU cost per transition (this thread's CPU time,
   beside the one-row commit's there, and beside the same statements sent straight to SQLite: what
   the store's own Python adds); the statements the store sends per transition; with ``strace``
   installed, the number of fsync/fdatasync calls and the bytes written per transition
   (1 sync is the minimum for a durable commit), and the WAL's frames (pages) written per
   transition beside per one-row commit; and a commit of one row in each of two tables beside
   the one-row commit, interleaved: two pages, the ceiling of any layout that writes a task's row
   and its status change (two b-trees).

Target (issue 34): transitions/s ≥ 0.9 × the one-row SQLite commit's rate in the same run.
Also reported: the ratio to raw fdatasync, per-transition latency (median, p99) and a check
that every transition left its status-change record.

Usage::

    .venv/bin/python bench/bench_transitions.py
    .venv/bin/python bench/bench_transitions.py --dir ~/.local/share/corral   # the disk you use
    .venv/bin/python bench/bench_transitions.py --seed-tasks 0 --seconds 10

Results are printed and written to bench/results/bench_transitions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import finish, load, machine, median, parse_args, percentile, verdict
from corral.domain.actors import Actor
from corral.domain.clock import stamp_text, utcnow
from corral.domain.status import Status
from corral.store import NewTask, SQLiteStore, sqltx
from seed_store import Shape, seed

RATIO_TARGET = 0.9  # of a one-row SQLite WAL commit
BLOCK = 4096


class Stream:
    """Something done repeatedly; it keeps its own count, time and latencies across slices."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.elapsed = 0.0

    def step(self) -> None:
        raise NotImplementedError

    def run(self, seconds: float) -> tuple[int, float]:
        n0 = len(self.lat)
        start = now = time.perf_counter()
        end = start + seconds
        while now < end:
            self.step()
            after = time.perf_counter()
            self.lat.append(after - now)
            now = after
        self.elapsed += now - start
        return len(self.lat) - n0, now - start

    def summary(self) -> dict[str, Any]:
        return {
            "count": len(self.lat),
            "seconds": round(self.elapsed, 3),
            "per_second": round(len(self.lat) / self.elapsed, 1),
            "median_ms": round(median(self.lat) * 1000, 3),
            "p99_ms": round(percentile(self.lat, 99) * 1000, 3),
        }


class SyncProbe(Stream):
    """Overwrite one 4 KiB block of a preallocated file and sync it."""

    def __init__(self, path: Path, sync: Callable[[int], None]) -> None:
        super().__init__()
        self.path = path
        self.sync = sync
        self.block = os.urandom(BLOCK)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.pwrite(self.fd, self.block, 0)
        os.fsync(self.fd)  # the file exists and has its size before timing starts

    def step(self) -> None:
        os.pwrite(self.fd, self.block, 0)
        self.sync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink()


class OneRowCommit(Stream):
    """The anchor: one durable one-row ``UPDATE`` in WAL mode with ``synchronous=FULL``, its own transaction."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        self.db.execute("INSERT INTO t VALUES (1, 0)")

    def step(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("UPDATE t SET v = v + 1 WHERE id = 1")
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class TwoTableCommit(OneRowCommit):
    """One row updated in each of two one-row tables, one transaction: two pages, the least a change that writes a
    row of two tables (a task and its status change) can write; a reference beside the anchor, not a target."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.db.execute("CREATE TABLE u (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        self.db.execute("INSERT INTO u VALUES (1, 0)")

    def step(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("UPDATE t SET v = v + 1 WHERE id = 1")
        self.db.execute("UPDATE u SET v = v + 1 WHERE id = 1")
        self.db.execute("COMMIT")


def two_pages(directory: Path, seconds: float, slice_: float = 0.05) -> dict[str, Any]:
    """The two-table commit beside the one-row commit, interleaved in short slices on the same disk: the ceiling
    of the ratio for any layout that writes two tables' pages per change (the per-round median of the ratios)."""
    directory.mkdir(parents=True, exist_ok=True)
    one, two = OneRowCommit(directory / "one-row.db"), TwoTableCommit(directory / "two-table.db")
    ratios = []
    try:
        for _ in range(max(1, round(seconds / (2 * slice_)))):
            n_o, t_o = one.run(slice_)
            n_2, t_2 = two.run(slice_)
            ratios.append((n_2 / t_2) / (n_o / t_o))
    finally:
        one.close()
        two.close()
    return {
        "ratio": round(median(ratios), 3),
        "rounds": len(ratios),
        "two_table": two.summary(),
        "one_row": one.summary(),
    }


class Transitions(Stream):
    """One task alternating working ⇄ blocked, one durable write transaction per transition."""

    def __init__(self, store: SQLiteStore, ref: str = "bench-transitions") -> None:
        super().__init__()
        self.store = store
        with store.write() as tx:
            task = tx.insert_task(NewTask(ref=ref, goal="Benchmark transitions"), Actor.HUMAN)
            tx.insert_session(task.id, branch=f"corral/{ref}")
        with store.write() as tx:
            tx.set_status(task.id, Status.WORKING, Actor.HUMAN, "start", expected_from=Status.BACKLOG)
        with store.read() as tx:
            self.before = len(tx.status_changes(task.id))
        self.task_id = task.id
        self.status = Status.WORKING

    def step(self) -> None:
        if self.status is Status.WORKING:
            with self.store.write() as tx:
                change = tx.park(self.task_id, Actor.SYSTEM, None, expected_from=Status.WORKING)
            assert change is not None and change.to_status is Status.BLOCKED
            self.status = Status.BLOCKED
        else:
            with self.store.write() as tx:
                tx.set_status(self.task_id, Status.WORKING, Actor.HUMAN, "unblock", expected_from=Status.BLOCKED)
            self.status = Status.WORKING

    def verify(self) -> int:
        """Every transition made left exactly one status-change record."""
        with self.store.read() as tx:
            recorded = len(tx.status_changes(self.task_id)) - self.before
            final = tx.get_task(self.task_id)
        assert final is not None
        if recorded != len(self.lat) or final.status is not self.status:
            raise SystemExit(f"{len(self.lat)} transitions made but {recorded} recorded (task is {final.status})")
        return recorded


class DirectStatements(Stream):
    """The statements the store sends for the same transitions, sent straight to SQLite on the store's connection
    (BEGIN IMMEDIATE, the compare-and-set UPDATE, the status change's INSERT, COMMIT): beside the store's loop, what
    its own Python adds to a transition."""

    def __init__(self, store: SQLiteStore, ref: str) -> None:
        super().__init__()
        self.task = Transitions(store, ref=ref)  # a task of its own, made and started through the store
        self.db = store._db
        self.blocked = self.working = ""
        for park, src, dst, actor in ((True, Status.WORKING, Status.BLOCKED, Actor.SYSTEM),
                                      (False, Status.BLOCKED, Status.WORKING, Actor.HUMAN)):  # fmt: skip
            way = sqltx._cas_way(src, dst, actor, park)
            assert way, f"{src} → {dst} is not a compare-and-set change"
            if park:
                self.blocked = way[1]
            else:
                self.working = way[1]
        self.at = stamp_text(utcnow())
        self.parked = False

    def step(self) -> None:
        db, task_id, at = self.db, self.task.task_id, self.at
        db.execute("BEGIN IMMEDIATE")
        if self.parked:
            db.execute(self.working, ("working", None, at, at, task_id, "blocked"))
            db.execute(sqltx._INSERT_CHANGE, (task_id, task_id, "blocked", "working", "human", "unblock", at))
        else:
            db.execute(self.blocked, ("blocked", None, at, at, task_id, "working"))
            db.execute(sqltx._INSERT_CHANGE, (task_id, task_id, "working", "blocked", "system", None, at))
        db.execute("COMMIT")
        self.parked = not self.parked


def transitions(store: SQLiteStore, seconds: float) -> dict[str, Any]:
    """The transition loop alone for ``seconds`` on a task of its own (used by the diagnostics)."""
    t = Transitions(store, ref=f"bench-transitions-{os.getpid()}")
    t.run(seconds)
    return {**t.summary(), "recorded": t.verify()}


_PROBE = """
import json, sys
sys.path.insert(0, {bench!r})
from bench_transitions import transitions
from corral.store import SQLiteStore
store = SQLiteStore({db!r})
print(json.dumps(transitions(store, {seconds!r})))
store.close()
"""


def copy_store(db: Path, directory: Path) -> Path:
    """A copy of the (closed, checkpointed) store ``db`` in ``directory``: the headline's store for a diagnostic."""
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / "corral.db"
    if db.exists():
        shutil.copyfile(db, copy)
    return copy


def count_syncs(directory: Path, source: Path, seconds: float = 1.0) -> dict[str, Any] | None:
    """Run the transition loop under ``strace -c`` on a copy of the store and count sync calls and
    bytes written per transition."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    out = directory / "strace.txt"
    db = copy_store(source, directory / "probe")
    code = _PROBE.format(bench=str(Path(__file__).resolve().parent), db=str(db), seconds=seconds)
    cmd = [strace, "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,pwrite64", "-o", str(out)]
    proc = subprocess.run([*cmd, sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stderr or "strace failed").strip()[-300:]}
    made = json.loads(proc.stdout.strip().splitlines()[-1])["count"]
    calls: dict[str, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1] in ("fsync", "fdatasync", "sync_file_range", "pwrite64"):
            calls[parts[-1]] = int(parts[3])
    syncs = sum(n for name, n in calls.items() if name != "pwrite64")
    return {
        "transitions": made,
        "calls": calls,
        "per_transition": round(syncs / made, 3) if made else None,
        "pwrites_per_transition": round(calls.get("pwrite64", 0) / made, 2) if made else None,
    }


def _frames(wal: Path, page_size: int) -> float:
    """Frames in a WAL file: its 32-byte header, then a 24-byte header and a page per frame."""
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - 32) / (page_size + 24)


def wal_frames(directory: Path, source: Path, count: int = 100, runs: int = 5) -> dict[str, Any]:
    """Pages written to the WAL per transition (on a copy of the same store) beside per one-row commit: the WAL is
    emptied first, and fewer frames are written than an automatic checkpoint waits for (1,000). The transitions'
    figure is the mean of ``runs`` runs of ``count`` (a leaf split writes several pages now and then)."""
    db = copy_store(source, directory / "frames")
    store = SQLiteStore(db)
    try:
        tr = Transitions(store, ref=f"bench-frames-{os.getpid()}")
        page = store._db.execute("PRAGMA page_size").fetchone()[0]
        for _ in range(10):  # the task's pages found and split as a running store's are
            tr.step()
        frames = 0.0
        for _ in range(runs):
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for _ in range(count):
                tr.step()
            frames += _frames(db.with_name(db.name + "-wal"), page)
        per_transition = frames / (count * runs)
    finally:
        store.close()
    one = OneRowCommit(directory / "frames" / "one-row.db")
    try:
        one.step()
        one.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(count):
            one.step()
        per_commit = _frames(
            one.path.with_name(one.path.name + "-wal"), one.db.execute("PRAGMA page_size").fetchone()[0]
        )
    finally:
        one.close()
    return {
        "transition": round(per_transition, 2),
        "one_row_commit": round(per_commit / count, 2),
        "count": count * runs,
    }


def cpu_ceiling(source: Path, seconds: float) -> dict[str, Any] | None:
    """The same loop on tmpfs, on a copy of the store, where a sync costs nothing, interleaved with the one-row
    commit there: the store's CPU cost per transition beside the floor's per commit (this thread's CPU time, so
    another process on the machine does not count)."""
    if not Path("/dev/shm").is_dir():
        return None
    tmp = Path(tempfile.mkdtemp(prefix="corral-bench-cpu-", dir="/dev/shm"))
    try:
        store = SQLiteStore(copy_store(source, tmp))
        one = OneRowCommit(tmp / "one-row.db")
        try:
            tr = Transitions(store, ref=f"bench-cpu-{os.getpid()}")
            direct = DirectStatements(store, ref=f"bench-cpu-direct-{os.getpid()}")
            cpu: dict[str, list[float]] = {"transition": [], "one_row_commit": [], "direct_statements": []}
            rounds = max(1, round(seconds / 0.15))
            for _ in range(rounds):
                for name, stream in (("one_row_commit", one), ("transition", tr), ("direct_statements", direct)):
                    before, made = time.thread_time(), len(stream.lat)
                    stream.run(0.05)
                    cpu[name].append((time.thread_time() - before) / (len(stream.lat) - made))
            out = {**tr.summary(), "recorded": tr.verify()}
            for name, per in cpu.items():  # the quietest quarter of the rounds: the least disturbed by others
                out[f"cpu_us_{name}"] = round(percentile(per, 25) * 1e6, 2)
            return out
        finally:
            one.close()
            store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _Sent:
    """A store's connection that notes each statement the store sends it (SQLite's own trace would also name
    the statements a trigger runs, under the statement that fired it)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.sent: list[str] = []

    def execute(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
        self.sent.append(sql.split(None, 1)[0].upper())
        return self.db.execute(sql, args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def statements(source: Path, directory: Path, count: int = 100) -> dict[str, Any]:
    """Statements the store sends per transition (on a copy of the same store), besides its BEGIN and COMMIT;
    the one-row commit sends one."""
    db = copy_store(source, directory / "statements")
    store = SQLiteStore(db)
    try:
        tr = Transitions(store, ref=f"bench-statements-{os.getpid()}")
        real = store._db
        store._db = sent = _Sent(real)  # type: ignore[assignment]
        try:
            for _ in range(count):
                tr.step()
        finally:
            store._db = real
    finally:
        store.close()
    kinds: dict[str, int] = {}
    for verb in sent.sent:
        kinds[verb] = kinds.get(verb, 0) + 1
    others = sum(n for verb, n in kinds.items() if verb not in ("BEGIN", "COMMIT"))
    return {"per_transition": round(others / count, 2), "kinds": kinds, "count": count}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=None, help="where to put the scratch store (default: the system temp dir)")
    p.add_argument("--seconds", type=float, default=12.0, help="total measuring time, all streams (default 12 s)")
    p.add_argument("--slice", type=float, default=0.2, help="length of one stream's turn (default 0.2 s)")
    p.add_argument("--seed-tasks", type=int, default=10_000, help="tasks to seed first (default 10,000; 0: none)")
    p.add_argument("--seed-turns", type=int, default=None, help="turns to seed (default 10 per task)")
    p.add_argument("--no-diagnostics", action="store_true", help="skip the tmpfs and strace runs")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parse_args(p, {"seconds": 0.6, "slice": 0.05, "seed_tasks": 300, "seed_turns": 1_000}, argv)

    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="corral-bench-transitions-", dir=args.dir))
    result: dict[str, Any] = {
        "benchmark": "bench_transitions",
        "machine": machine(),
        "directory": str(scratch),
        "load_before": load(),
    }
    try:
        db = scratch / "corral.db"
        if args.seed_tasks:
            shape = Shape(tasks=args.seed_tasks, turns=args.seed_turns or 10 * args.seed_tasks)
            if shape.tasks < shape.nonterminal + 1000:
                shape = Shape(tasks=args.seed_tasks, turns=shape.turns, working=1, interrupted=1, blocked=2,
                              conflict=0, submitted=0, backlog=1, big_turns=10)  # fmt: skip
            print(f"Seeding {shape.tasks:,} tasks / {shape.turns:,} turns …", flush=True)
            m = seed(db, shape)
            result["store"] = {k: m[k] for k in ("tasks", "turns", "status_changes", "db_bytes", "seconds")}
            print(f"  seeded in {m['seconds']} s, {m['db_bytes'] / 1e6:.0f} MB")
            os.sync()  # let the seed's writeback finish before timing any sync
        store = SQLiteStore(db)
        journal = store._db.execute("PRAGMA journal_mode").fetchone()[0]  # a read-only look at its settings
        level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[store._db.execute("PRAGMA synchronous").fetchone()[0]]
        result["store_settings"] = {"journal_mode": journal, "synchronous": level}
        print(f"Store: {db} (journal_mode={journal}, synchronous={level})")

        fs = SyncProbe(scratch / "fsync-probe.bin", os.fsync)
        fds = SyncProbe(scratch / "fdatasync-probe.bin", os.fdatasync)
        one = OneRowCommit(scratch / "one-row.db")
        tr = Transitions(store)
        rounds = max(1, round(args.seconds / (4 * args.slice)))
        print(
            f"\nInterleaving fsync, fdatasync, a one-row SQLite commit and transitions: "
            f"{rounds} rounds of {args.slice:g} s each …"
        )
        per_round = []
        for _ in range(rounds):
            fs.run(args.slice)
            fds.run(args.slice)
            n_o, t_o = one.run(args.slice)
            n_t, t_t = tr.run(args.slice)
            per_round.append((n_t / t_t) / (n_o / t_o))
        recorded = tr.verify()
        fs.close()
        fds.close()
        one.close()
        store.close()

        f, d, o, t = fs.summary(), fds.summary(), one.summary(), {**tr.summary(), "recorded": recorded}
        ratio = t["per_second"] / o["per_second"]
        round_ratio = median(per_round)
        ok = ratio >= RATIO_TARGET
        result["ok"] = ok
        print(f"  4 KiB pwrite + fsync      {f['per_second']:9.1f} /s   median {f['median_ms']:.3f} ms   "
              f"p99 {f['p99_ms']:.3f} ms")  # fmt: skip
        print(f"  4 KiB pwrite + fdatasync  {d['per_second']:9.1f} /s   median {d['median_ms']:.3f} ms   "
              f"p99 {d['p99_ms']:.3f} ms")  # fmt: skip
        print(f"  one-row SQLite WAL commit {o['per_second']:9.1f} /s   median {o['median_ms']:.3f} ms   "
              f"p99 {o['p99_ms']:.3f} ms")  # fmt: skip
        print(f"  transition (working ⇄ blocked) {t['per_second']:9.1f} /s   median {t['median_ms']:.3f} ms   "
              f"p99 {t['p99_ms']:.3f} ms   ({t['count']} made, {recorded} recorded)")  # fmt: skip
        print(
            f"\ntransitions/s {t['per_second']:.1f}  vs  one-row SQLite commits/s {o['per_second']:.1f}: "
            f"ratio {ratio:.3f} (median per-round ratio {round_ratio:.3f}; target ≥ {RATIO_TARGET})   {verdict(ok)}"
        )
        print(
            f"  beside raw fdatasync/s {d['per_second']:.1f}: transitions {t['per_second'] / d['per_second']:.3f}×, "
            f"the one-row commit {o['per_second'] / d['per_second']:.3f}×"
        )
        result.update(
            {
                "fsync": f,
                "fdatasync": d,
                "one_row_commit": o,
                "transitions": t,
                "ratio": round(ratio, 3),
                "median_round_ratio": round(round_ratio, 3),
                "round_ratios": [round(r, 3) for r in per_round],
                "target_ratio": RATIO_TARGET,
            }
        )

        if not args.no_diagnostics:
            print("\nDiagnostics (no targets):")
            ceiling = cpu_ceiling(db, min(2.0, args.seconds))
            if ceiling:
                print(
                    f"  same loop on tmpfs (a copy of the same store, syncs free): {ceiling['per_second']:.1f} /s, "
                    f"median {ceiling['median_ms']:.3f} ms; CPU per transition {ceiling['cpu_us_transition']} µs "
                    f"beside {ceiling['cpu_us_one_row_commit']} µs per one-row commit and "
                    f"{ceiling['cpu_us_direct_statements']} µs for its statements sent straight to SQLite"
                )
            sent = statements(db, scratch)
            print(
                f"  statements per transition (besides BEGIN and COMMIT): {sent['per_transition']} "
                f"{sent['kinds']}, per one-row commit: 1"
            )
            result["statements"] = sent
            syncs = count_syncs(scratch, db, min(1.0, args.seconds))
            if syncs and "error" not in syncs:
                print(
                    f"  per transition (strace, a copy of the same store): {syncs['per_transition']} syncs, "
                    f"{syncs['pwrites_per_transition']} pwrites {syncs['calls']}, {syncs['transitions']} transitions"
                )
            elif syncs:
                print(f"  sync count unavailable: {syncs['error']}")
            frames = wal_frames(scratch, db)
            print(
                f"  WAL frames (pages) written per transition: {frames['transition']}, per one-row commit: "
                f"{frames['one_row_commit']} (a copy of the same store, {frames['count']} transitions)"
            )
            result["wal_frames"] = frames
            pair = two_pages(scratch / "two-pages", min(2.0, args.seconds))
            print(
                f"  a commit of one row in each of two tables (2 pages): {pair['ratio']:.3f}× the one-row commit "
                f"(median of {pair['rounds']} interleaved rounds): the most a change writing two tables can reach"
            )
            result["two_table_commit"] = pair
            result["cpu_ceiling_tmpfs"] = ceiling
            result["syncs"] = syncs
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return finish("bench_transitions", result, bool(result.get("ok")))


if __name__ == "__main__":
    sys.exit(main())
