#!/usr/bin/env python
"""Where the test suite's CPU goes: every process it starts, summed by what it is.

Runs the README's test command (or the pytest arguments given) with the kernel's process
accounting on (``acct(2)``: one record per ended process, with its CPU time and its command
name), and every Python process of the project's venv named by what it runs (a ``.pth`` file
in the venv's site-packages writes ``/proc/self/comm`` at start: ``Ysup`` a supervisor,
``Ydmn`` a daemon, ``Ywkr`` a worker, ``Ycli`` a ``corral`` command, ``Yfake`` the fake agent,
``Ybench`` a benchmark, ``Ypy`` any other). Prints the CPU by name, the count and the mean.

Needs root (``CAP_SYS_PACCT``); the accounting file records every process of the machine that
ends meanwhile, so run it on a machine doing nothing else. The ``.pth`` file is removed at the end.

Usage::

    .venv/bin/python bench/suite_cpu.py                  # the README's command: -n 2
    .venv/bin/python bench/suite_cpu.py -- tests/turns -n 2
"""

from __future__ import annotations

import collections
import ctypes
import os
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMER = "_corral_suite_names"
NAMER_CODE = r"""
def _name():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            c = f.read()
    except OSError:
        return
    kinds = (
        (b"corral.engine.runtime.supervisor", "sup"),
        (b"fake_agent", "fake"),
        (b"daemon\0run", "dmn"),
        (b"worker\0", "wkr"),
        (b"bench/", "bench"),
        (b"-m\0pytest", "pytest"),
        (b"-m\0corral", "cli"),
        (b"bin/corral", "cli"),
    )
    kind = next((k for marker, k in kinds if marker in c), "py")
    try:
        with open("/proc/self/comm", "w") as f:
            f.write("Y" + kind)
    except OSError:
        pass
_name()
"""
#: ``struct acct_v3`` (linux/acct.h): 64 bytes, its CPU times in ``comp_t`` clock ticks, the name last.
RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")


def comp_t(value: int) -> int:
    """A ``comp_t``: 13 bits of mantissa, 3 of base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def summary(path: Path) -> list[tuple[str, float, int]]:
    """(name, CPU seconds, processes) by command name, the most CPU first."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    data = path.read_bytes()
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:  # the record's version
            continue
        name = fields[18].split(b"\0", 1)[0].decode("ascii", "replace")
        cpu[name] += (comp_t(fields[10]) + comp_t(fields[11])) / ticks
        count[name] += 1
    return [(name, seconds, count[name]) for name, seconds in cpu.most_common()]


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    pytest_args = argv or ["-n", "2"]
    site = Path(sysconfig.get_paths()["purelib"])
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.TemporaryDirectory(prefix="corral-suite-cpu-") as tmp:
        record = Path(tmp) / "acct"
        record.touch()
        (site / f"{NAMER}.py").write_text(NAMER_CODE)
        (site / f"zz{NAMER}.pth").write_text(f"import {NAMER}\n")
        try:
            if libc.acct(str(record).encode()) != 0:
                err = ctypes.get_errno()
                print(f"suite_cpu: process accounting could not start: {os.strerror(err)} (it needs root)")
                return 2
            began = time.monotonic()
            try:
                code = subprocess.run([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT).returncode
            finally:
                libc.acct(None)
            wall = time.monotonic() - began
        finally:
            (site / f"zz{NAMER}.pth").unlink(missing_ok=True)
            (site / f"{NAMER}.py").unlink(missing_ok=True)
        rows = summary(record)
    total = sum(seconds for _, seconds, _ in rows)
    print(f"\npytest {' '.join(pytest_args)}: exit {code}, {wall:.0f} s; CPU of ended processes: {total:.0f} s")
    # The kernel records each process's CPU in whole clock ticks, rounded down: a process that used less than
    # one tick (git's ~1 ms runs) counts as none, and every other loses half a tick on average.
    print(f"  (in whole clock ticks of 1/{os.sysconf('SC_CLK_TCK')} s, rounded down: short processes count as none)")
    for name, seconds, n in rows[:25]:
        share = 100 * seconds / total
        print(f"  {name:16} {seconds:8.1f} s  {share:5.1f} %  {n:7d} processes  {1000 * seconds / n:7.1f} ms each")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
