#!/usr/bin/env python
"""The protocol writer's encoding and the receipt's fit, on the receipt of ``tests/failures/test_bounded_receipts.py``.

The receipt of the test "a receipt corral writes is always one it reads": every variable part far
over the protocol's bound at once (a 20 MB result, 9 MB texts, 300,000 conflicted files, 40,000
attempts, 150,000 changed and protected paths, 200,000 commits). In this process, ``--reps`` rounds,
each interleaving:

1. a floor: a fixed loop of Python bytecode (15 million additions), so a loaded machine shows as a
   slower floor in the same round;
2. the indenting encoder the writer used before (``json.dumps(..., ensure_ascii=False, indent=1)``,
   lone surrogates escaped): ``json``'s pure-Python path, one generator step per value;
3. the writer's encoding now (``wire.encode``: ``json``'s C encoder, then msgspec's formatter);
4. the fit of the receipt (``receipt_fit.fit``), which measures it as the writer encodes it;
5. the test's whole path after the receipt is built: measured, refused by the writer unshrunk,
   fitted, written and read back (what the test costs beside building its receipt).

CPU time (``time.process_time``) and wall time of each, medians over the rounds. Targets: the two
encodings' bytes are the same; the encoding now takes at most two thirds of the indenting encoder's
CPU; the fitted receipt is within the protocol's bound; the test's path takes at most 4x the floor's
CPU. Measured on the 2-CPU machine: with the indenting encoder, before the fit skipped measuring a
receipt (or a shrunk one) surely over the bound, the test's path took 3.3-3.5 s of CPU, 8.7x the
floor's; now 1.2 s, 3.1x.

Usage::

    .venv/bin/python bench/bench_receipt_fit.py            # ~1 minute
    .venv/bin/python bench/bench_receipt_fit.py --reps 9
    .venv/bin/python bench/bench_receipt_fit.py --quick    # tiny sizes: runs, judges nothing

Results are printed and written to bench/results/bench_receipt_fit.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from msgspec.structs import replace

from benchlib import finish, load, machine, median, parse_args, verdict
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import receipt_fit
from corral.engine.runtime.wire import encode

PATH = "node_modules/@vendor/package-{pkg:04d}/dist/esm/module-{mod:02d}.js"


def huge_receipt(scale: float) -> proto.Receipt:
    """The test's receipt; ``scale`` shrinks its lists and texts for a quick run."""

    def n(count: int) -> int:
        return max(1, int(count * scale))

    attempt = proto.AttemptRecord(number=1, started_at="2026-01-01T00:00:00Z", ended_at=None, outcome="failed")
    paths = tuple(PATH.format(pkg=i // 100, mod=i % 100) for i in range(n(150_000)))
    return proto.Receipt(
        command_id="c1",
        task_id="t1",
        kind="work",
        status=proto.ReceiptStatus.COMPLETED,
        result="r" * n(20 * 1024 * 1024),
        failure_reason="f" * n(9 * 1024 * 1024),
        check=proto.CheckResult(command="make test", exit_code=1, timed_out=False, timeout=60, tail="t" * n(9_000_000)),
        sync=proto.SyncReport("conflict", "main", tuple(f"conflicted/{i:07d}.txt" for i in range(n(300_000)))),
        attempts=tuple(replace(attempt, number=k) for k in range(1, n(40_000) + 1)),
        git=proto.GitFacts(
            head="h",
            changed_paths=paths,
            protected_changes=paths,
            commits=tuple(f"{i:040x}" for i in range(n(200_000))),
            changed_count=len(paths),
        ),
    )


def indenting(data: dict[str, Any]) -> bytes:
    """The writer's bytes as the indenting encoder made them (before ``wire.encode``)."""
    text = json.dumps({"protocol_version": proto.PROTOCOL_VERSION, **data}, ensure_ascii=False, indent=1)
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def the_tests_path(receipt: proto.Receipt, directory: Path) -> int:
    """What the test does with its receipt: measure it, see the writer refuse it, fit, write and read it back."""
    assert receipt_fit.encoded_size(receipt) > proto.MAX_BYTES or QUICK_SIZES
    try:
        proto.write(directory, receipt)
    except proto.TooLarge:
        pass
    proto.write(directory, receipt_fit.fit(receipt))
    back = proto.read(directory / proto.RESPONSE, proto.Receipt)
    assert isinstance(back, proto.Receipt)
    return (directory / proto.RESPONSE).stat().st_size


#: A quick run's receipt is small enough to fit: the test's path then writes it as it is.
QUICK_SIZES = False


def floor() -> int:
    total = 0
    for i in range(15_000_000):
        total += i
    return total


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """CPU seconds, wall seconds and the value of ``fn()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return time.process_time() - cpu, time.perf_counter() - wall, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="rounds, each interleaving the floor and every path")
    parser.add_argument("--scale", type=float, default=1.0, help="the receipt's size, as a share of the test's")
    args = parse_args(parser, quick={"reps": 1, "scale": 0.01})
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "reps": args.reps, "scale": args.scale}
    receipt = huge_receipt(args.scale)
    data = receipt.to_json()
    global QUICK_SIZES
    QUICK_SIZES = args.scale < 0.5
    runs: dict[str, list[tuple[float, float]]] = {"floor": [], "indenting": [], "encode": [], "fit": [], "test": []}
    scratch = Path(tempfile.mkdtemp(prefix="bench-receipt-fit-"))
    same = True
    fitted_size = 0
    for rnd in range(args.reps):
        cpu, wall, _ = timed(floor)
        runs["floor"].append((cpu, wall))
        cpu, wall, before = timed(lambda: indenting(data))
        runs["indenting"].append((cpu, wall))
        cpu, wall, now = timed(lambda: encode(data))
        runs["encode"].append((cpu, wall))
        same = same and before == now
        cpu, wall, fitted = timed(lambda: receipt_fit.fit(receipt))
        runs["fit"].append((cpu, wall))
        fitted_size = len(encode(fitted.to_json()))
        cpu, wall, _ = timed(lambda: the_tests_path(receipt, scratch))
        runs["test"].append((cpu, wall))
        print(
            f"round {rnd + 1}: "
            + ", ".join(f"{name} {r[-1][0]:.3f} s CPU / {r[-1][1]:.3f} s wall" for name, r in runs.items())
            + f"  (load {load()[0]})"
        )
    figures = {
        name: {"cpu_s": round(median([c for c, _ in r]), 4), "wall_s": round(median([w for _, w in r]), 4)}
        for name, r in runs.items()
    }
    result["figures"] = figures
    result["encoded_bytes"] = len(encode(data))
    result["fitted_bytes"] = fitted_size
    shutil.rmtree(scratch, ignore_errors=True)
    ratio = figures["indenting"]["cpu_s"] / max(figures["encode"]["cpu_s"], 1e-9)
    result["cpu_ratio_indenting_to_encode"] = round(ratio, 2)
    floors = figures["test"]["cpu_s"] / max(figures["floor"]["cpu_s"], 1e-9)
    result["test_path_cpu_in_floors"] = round(floors, 2)
    checks = {
        "the same bytes as the indenting encoder": same,
        "the encoding at most two thirds of the indenting encoder's CPU": ratio >= 1.5,
        "the fitted receipt within the protocol's bound": fitted_size <= proto.MAX_BYTES,
        "the test's path at most 4x the floor's CPU": floors <= 4,
    }
    result["checks"] = checks
    encoded = result["encoded_bytes"]
    print(f"\nThe receipt encodes to {encoded:,} bytes; fitted, {fitted_size:,} (bound {proto.MAX_BYTES:,}).")
    for name, fig in figures.items():
        print(f"  {name:10} median {fig['cpu_s']:.3f} s CPU, {fig['wall_s']:.3f} s wall")
    print(f"  the indenting encoder takes {ratio:.1f}x the CPU of the encoding now")
    print(f"  the test's path takes {floors:.1f}x the floor's CPU")
    for what, ok in checks.items():
        print(f"  {verdict(ok)}  {what}")
    return finish("bench_receipt_fit", result, all(checks.values()))


if __name__ == "__main__":
    sys.exit(main())
