#!/usr/bin/env python
"""The README's first command from a fresh clone: install + ``corral demo``, with and without the team extra.

1. Clones this repository's committed HEAD into a scratch directory (a fresh clone: no venv, no build
   directory), once per run of each variant.
2. Runs the README's first command exactly as the README's ``<!-- main-command -->`` block gives it
   (``python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/corral demo``), and the same with
   ``'.[team]'`` in place of ``.``: the install a team's worker makes. The install and the demo are timed
   apart (the command is split at its last ``&&``), in their own CORRAL_HOME.
3. Measures the venv each leaves: its size on disk (``du``) and its installed distributions.

pip's cache is the person's own, as a second install on the same machine has it: the first run of each
variant may download, so ``--reps`` runs alternate the variants and the median is reported (every run
is kept in the results).

Targets: the plain install is smaller than the team install (the extra is really left out: no psycopg,
psycopg-pool or procrastinate in it), and the demo succeeds in both.

Usage::

    .venv/bin/python bench/bench_first_command.py            # ~1-2 minutes
    .venv/bin/python bench/bench_first_command.py --reps 3

Results are printed and written to bench/results/bench_first_command.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (
    command_ms,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    median,
    parse_args,
    report_floors,
    scratch_dir,
    scratch_options,
    startup_floors,
    verdict,
)

ROOT = Path(__file__).resolve().parents[1]
TEAM_DISTRIBUTIONS = ("psycopg", "psycopg-binary", "psycopg-pool", "procrastinate")


def first_command() -> str:
    """The README's first command, as a new user copies it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- main-command -->\s*```sh\n(.+?)\n```", text, re.S)
    if found is None:
        raise SystemExit("README.md has no main command")
    return found.group(1).strip()


def variant_command(command: str, team: bool) -> tuple[str, str]:
    """(the install part, the demo part) of the first command; with ``team``, the extra installed too."""
    install, _, demo = command.rpartition("&&")
    if team:
        install, n = re.subn(r"pip install (-q )?\.(\s|$)", r"pip install \1'.[team]'\2", install)
        if n != 1:
            raise SystemExit(f"cannot add the team extra to {install!r}")
    return install.strip(), demo.strip()


def du_bytes(path: Path) -> int:
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


def run_once(base: Path, n: int, team: bool, command: str) -> dict[str, Any]:
    name = f"{'team' if team else 'plain'}-{n}"
    clone = base / name
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = hermetic_env(base / f"home-{name}", pycache=None)
    install, demo = variant_command(command, team)
    began = time.monotonic()
    installed = subprocess.run(["bash", "-c", install], cwd=clone, env=env, capture_output=True, text=True)
    install_s = time.monotonic() - began
    if installed.returncode != 0:
        raise SystemExit(f"{install} failed:\n{installed.stdout}{installed.stderr}")
    began = time.monotonic()
    demoed = subprocess.run(["bash", "-c", demo], cwd=clone, env=env, capture_output=True, text=True)
    demo_s = time.monotonic() - began
    listed = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    dists = sorted(d["name"].lower() for d in json.loads(listed.stdout))
    return {
        "variant": "team" if team else "plain",
        "install_s": round(install_s, 2),
        "demo_s": round(demo_s, 2),
        "total_s": round(install_s + demo_s, 2),
        "demo_exit": demoed.returncode,
        "venv_bytes": du_bytes(clone / ".venv"),
        "distributions": len(dists),
        "team_distributions": [d for d in dists if d in TEAM_DISTRIBUTIONS],
    }


def quick_demo(base: Path, command: str) -> int:
    """``--quick``: the demo part alone, with this checkout's own venv in place of a fresh install (which
    takes a minute): it runs whole and leaves nothing behind."""
    where = base / "quick"
    where.mkdir()
    (where / ".venv").symlink_to(sys.prefix)
    _, demo = variant_command(command, team=False)
    env = hermetic_env(base / "home-quick", pycache=base / "pycache")
    done = subprocess.run(["bash", "-c", demo], cwd=where, env=env, capture_output=True, text=True)
    print(f"  {demo}: exit {done.returncode} (the install is left out of a quick run)")
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
    result: dict[str, Any] = {"demo_exit": done.returncode}
    report_floors(result, startup_floors(env, where, reps=2))
    return 1 if done.returncode else 0


def main(argv: list[str] | None = None) -> int:
    parser = scratch_options(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    parser.add_argument("--reps", type=int, default=2, help="runs of each variant, alternated (default 2)")
    args = parse_args(parser, quick={"reps": 1}, argv=argv)
    command = first_command()
    print(f"The README's first command: {command}")
    base = scratch_dir("first-command", args)
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "command": command, "runs": []}
    if args.quick:
        try:
            failed = quick_demo(base, command)
        finally:
            drop_scratch(base, args.keep)
        return finish("bench_first_command", result, True) or failed
    try:
        floor_env = hermetic_env(base / "home-floor", pycache=None)
        venv_ms = command_ms(["python3", "-m", "venv", "--clear", str(base / "floor-venv")], floor_env, base, reps=1)
        floors = {"python3_m_venv_ms": venv_ms, **startup_floors(floor_env, base, reps=3)}
        for n in range(args.reps):
            for team in (False, True):
                run = run_once(base, n, team, command)
                result["runs"].append(run)
                print(
                    f"  {run['variant']:<5} install {run['install_s']:6.1f} s  demo {run['demo_s']:5.1f} s  "
                    f"venv {run['venv_bytes'] / 1e6:6.1f} MB  {run['distributions']} distributions"
                    f"  (demo exit {run['demo_exit']})"
                )
    finally:
        drop_scratch(base, args.keep)
    summary = {}
    for variant in ("plain", "team"):
        runs = [r for r in result["runs"] if r["variant"] == variant]
        summary[variant] = {
            "install_s": median([r["install_s"] for r in runs]),
            "demo_s": median([r["demo_s"] for r in runs]),
            "total_s": median([r["total_s"] for r in runs]),
            "venv_mb": round(median([r["venv_bytes"] for r in runs]) / 1e6, 1),
            "distributions": runs[-1]["distributions"],
            "team_distributions": runs[-1]["team_distributions"],
            "demo_ok": all(r["demo_exit"] == 0 for r in runs),
        }
    result["summary"] = summary
    plain, team = summary["plain"], summary["team"]
    lighter = plain["venv_mb"] < team["venv_mb"] and not plain["team_distributions"]
    demos = plain["demo_ok"] and team["demo_ok"]
    print()
    for variant, s in summary.items():
        print(
            f"{variant:<5} median: install {s['install_s']:.1f} s + demo {s['demo_s']:.1f} s = {s['total_s']:.1f} s; "
            f"venv {s['venv_mb']:.1f} MB, {s['distributions']} distributions"
        )
    saved = team["venv_mb"] - plain["venv_mb"]
    print(f"The plain install leaves the team's engine out ({saved:.1f} MB smaller): {verdict(lighter)}")
    print(f"corral demo succeeds after both: {verdict(demos)}")
    report_floors(result, floors, "the venv the command makes before pip runs, and a start of this checkout's corral")
    return finish("bench_first_command", result, lighter and demos)


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())
