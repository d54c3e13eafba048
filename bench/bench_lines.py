#!/usr/bin/env python
"""One 64 MB line through the supervisor's line splitter (``corral.engine.runtime.lines.LineBuffer``).

An agent may print a line of any length (a tool result with a whole file in it, a
runaway loop without newlines). The splitter must stay linear and keep at most
``MAX_LINE_BYTES`` of it; the supervisor still writes every byte to ``output.log``.

Each case runs in its own process (a bare spawner, see benchlib.Spawner, so the peak RSS is
the child's own): it imports the splitter, then feeds it the stream in ``--chunk``-byte
chunks (64 KiB by default: what one read of a pipe returns), and reports the feeding time.

* **64 MB, one line** (targets: under 1 s, peak RSS within 16 MB of the floor)
* **64 MB of 1 KiB lines** (reference: the rate for ordinary stream-json output)
* **floor**: the same process feeding nothing (interpreter, import, one chunk)
* **reference**: the splitter this replaced (``pending += chunk`` and a split of the whole
  buffer on every read) on an ``--old-mb`` line (default 8 MB): its time grows with the
  square of the line (the whole 64 MB took about 16 s and 146 MB).

This measures the splitter alone; the supervisor's own figures (RSS while streaming, copy
rate) are bench_supervisor.py's.

Usage::

    .venv/bin/python bench/bench_lines.py              # ~10 s
    .venv/bin/python bench/bench_lines.py --mb 256 --old-mb 0

Results are printed and written to bench/results/bench_lines.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Spawner, finish, hermetic_env, load, machine, parse_args, verdict

TIME_TARGET_S = 1.0
RSS_TARGET_MB = 16.0  # above the floor

# The measured child: argv is mode, megabytes, chunk size. It prints the feeding time (s),
# the lines returned and what was kept of the longest.
_CHILD = r"""
import sys, time
from corral.engine.runtime.lines import LineBuffer, TruncatedLine
mode, mb, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
total = mb * 1024 * 1024
if mode == "lines":
    line = b"x" * 1023 + b"\n"
    chunk = line * (size // 1024)
else:
    chunk = b"x" * size
feeds = total // len(chunk) if total else 0
lines = kept = longest = 0
start = time.perf_counter()
if mode == "old":
    pending = b""
    for _ in range(feeds):
        pending += chunk
        if b"\n" in pending:
            *done, pending = pending.split(b"\n")
            lines += len(done)
    pending += b"\n"
    *done, pending = pending.split(b"\n")
    lines += len(done)
    kept = longest = max(len(d) for d in done)
else:
    buf = LineBuffer()
    for _ in range(feeds):
        for got in buf.feed(chunk):
            lines += 1
            kept = max(kept, len(got))
    for got in buf.feed(b"\n") + buf.flush():
        lines += 1
        kept = max(kept, len(got))
        longest = max(longest, got.length if isinstance(got, TruncatedLine) else len(got))
elapsed = time.perf_counter() - start
print(f"{elapsed:.6f} {lines} {kept} {longest}")
"""


def run(spawner: Spawner, scratch: Path, mode: str, mb: int, chunk: int) -> dict[str, Any]:
    out, err, child = scratch / "stdout", scratch / "stderr", scratch / "child.py"
    if not child.exists():
        child.write_text(_CHILD)
    r = spawner.run([sys.executable, str(child), mode, str(mb), str(chunk)], out, err)
    if r["rc"] != 0:
        raise SystemExit(f"{mode} {mb} MB failed:\n{err.read_text(errors='replace')[-2000:]}")
    seconds, lines, kept, longest = out.read_text().split()
    return {
        "mode": mode,
        "mb": mb,
        "seconds": float(seconds),
        "mb_per_s": round(mb / float(seconds), 1) if float(seconds) > 0 else None,
        "lines": int(lines),
        "kept_bytes": int(kept),
        "longest": int(longest),
        "peak_rss_mb": round(r["rss_mb"], 1),
        "process_ms": round(r["ms"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=64, help="size of the one line, MB (default 64)")
    p.add_argument("--chunk", type=int, default=64 * 1024, help="bytes per feed (default 65536)")
    p.add_argument("--old-mb", type=int, default=8, help="line for the old splitter, MB (0: skip; default 8)")
    p.add_argument("--reps", type=int, default=3, help="runs per case, the best kept (default 3)")
    args = parse_args(p, {"mb": 2, "old_mb": 0, "reps": 1}, argv)

    base = Path(tempfile.mkdtemp(prefix="corral-bench-lines-"))
    env = hermetic_env(base / "home", pycache=base / "pycache")
    spawner = Spawner(env, base)
    result: dict[str, Any] = {"benchmark": "bench_lines", "machine": machine(), "load_before": load()}
    cases = [("floor", "line", 0), ("one line", "line", args.mb), ("1 KiB lines", "lines", args.mb)]
    if args.old_mb:
        cases += [(f"old splitter, one {args.old_mb} MB line", "old", args.old_mb)]
        cases += [(f"new splitter, one {args.old_mb} MB line", "line", args.old_mb)]
    try:
        run(spawner, base, "line", 1, args.chunk)  # warm the bytecode cache
        stats: dict[str, dict[str, Any]] = {}
        for name, mode, mb in cases:
            runs = [run(spawner, base, mode, mb, args.chunk) for _ in range(args.reps)]
            stats[name] = min(runs, key=lambda r: r["seconds"]) | {
                "all_seconds": [round(r["seconds"], 4) for r in runs],
                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            }
    finally:
        spawner.close()
        shutil.rmtree(base, ignore_errors=True)
    floor = stats["floor"]["peak_rss_mb"]
    print(f"Feeding in {args.chunk:,}-byte chunks, best of {args.reps} (load average {result['load_before']}):")
    for name, s in stats.items():
        rate = f"{s['mb_per_s']:8.1f} MB/s" if s["mb_per_s"] else " " * 13
        print(
            f"  {name:<32} {s['seconds'] * 1000:9.1f} ms  {rate}  peak RSS {s['peak_rss_mb']:6.1f} MB  "
            f"({s['lines']:,} lines, longest kept {s['kept_bytes']:,} B)"
        )
    one = stats["one line"]
    time_ok = one["seconds"] < TIME_TARGET_S
    rss_ok = one["peak_rss_mb"] - floor < RSS_TARGET_MB
    shape_ok = one["lines"] == 1 and one["longest"] == args.mb * 1024 * 1024 and one["kept_bytes"] == 1024 * 1024
    ok = time_ok and rss_ok and shape_ok
    print(f"\n  {args.mb} MB line: {one['seconds']:.3f} s (target < {TIME_TARGET_S:g} s)  {verdict(time_ok)}")
    print(
        f"  peak RSS {one['peak_rss_mb']:.1f} MB, {one['peak_rss_mb'] - floor:.1f} MB over the floor "
        f"(target < {RSS_TARGET_MB:g} MB)  {verdict(rss_ok)}"
    )
    print(f"  one line, its first 1 MiB kept, marked as {one['longest']:,} B long  {verdict(shape_ok)}")
    result.update(
        {
            "chunk": args.chunk,
            "targets": {"seconds": TIME_TARGET_S, "rss_over_floor_mb": RSS_TARGET_MB},
            "cases": stats,
            "rss_over_floor_mb": round(one["peak_rss_mb"] - floor, 1),
        }
    )
    return finish("bench_lines", result, ok)


if __name__ == "__main__":
    sys.exit(main())
