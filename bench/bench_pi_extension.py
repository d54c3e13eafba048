#!/usr/bin/env python
"""What corral's Pi extension costs a confined Pi turn (docs/harnesses.md, "Pi's trusted path").

Real corral turns of the real Pi, confined (bubblewrap), against the scripted model server, each
scripted to call ``bash`` ``--calls`` times (``true``) and answer. Two kinds of turn, alternated
``--runs`` times after one warm-up of each:

- **with the extension**: corral's tools on, so Pi loads ``corral_tools.ts`` (jiti transpiles it; the tools'
  schemas are read from ``mcp_tools.json``, nothing asked of the endpoint) and its ``bash`` is corral's, run by
  the daemon in a sandbox of its own per command, the turn's (its MCP session opened on the first call);
- **without**: corral's tools off, so Pi runs as before, its built-in ``bash`` in its own process.

Figures: the launch, from the attempt's start (the receipt's ``started_at``: the supervisor
spawning bwrap) to the model server's first request; and a shell call, the time between two
consecutive model requests (the answer streamed, the call made, its result sent back: the same but
for the call itself), median over every call of every run.

For the launch alone, Pi by itself (no corral, no sandbox): the argv ``PiHarness.work`` builds for a
confined turn with corral's tools against one without, spawn to first model request, ``--launches``
times alternated; and, for scale, the same with the extension's entry written as an ES module
(``.mjs``, which Pi's jiti imports without transpiling) instead of TypeScript. What the ``.ts`` entry adds over
the ``.mjs`` one is babel's run over it (jiti's transpile cache is off, so no file a turn could write is run),
whatever the entry holds: a types-only re-export costs about what the entry does.

Targets: the extension adds under 100 ms to the launch (median) and under 20 ms to a shell call (median).

    .venv/bin/python bench/bench_pi_extension.py [--runs 5] [--calls 10] [--launches 15]

Results are printed and written to bench/results/bench_pi_extension.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import pi as pi_support
from tests.support.model_server import ScriptedServer, Text, ToolUse

from benchlib import (
    corral_command,
    drop_scratch,
    finish,
    hermetic_env,
    load,
    machine,
    make_repo,
    median,
    parse_args,
    percentile,
    report_floors,
    scratch_dir,
    scratch_options,
    stop_daemon,
    verdict,
)

LAUNCH_TARGET_MS = 100.0
CALL_TARGET_MS = 20.0
MODES = ("with", "without")


def corral(env: dict[str, str], repo: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*corral_command(), *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def one_turn(
    env: dict[str, str], repo: Path, home: Path, server: ScriptedServer, ref: str, calls: int
) -> dict[str, Any]:
    """One confined Pi turn of ``calls`` shell calls: its launch and each call's interval, in ms."""
    before = len(server.script_requests)
    server.steps.extend([*(ToolUse("bash", {"command": "true"}) for _ in range(calls)), Text("done")])
    made = corral(env, repo, "create", f"Bench {ref}", "--ref", ref, "--harness", "pi", "--model",
                  f"{pi_support.PROVIDER}/{pi_support.MODEL}")  # fmt: skip
    if made.returncode != 0:
        raise SystemExit(f"corral create failed: {made.stderr}")
    ran = corral(env, repo, "start", ref, "--wait", "--timeout", "150")
    shown = json.loads(corral(env, repo, "show", ref, "--json").stdout)
    requests = server.script_requests[before:]
    if shown["task"]["status"] != "blocked" or len(requests) != calls + 1:
        logs = corral(env, repo, "logs", ref).stdout[-3000:]
        raise SystemExit(
            f"the {ref} turn did not run its script ({shown['task']['status']}, {len(requests)} of {calls + 1} "
            f"model requests): {ran.stderr[-1000:]}\n{logs}"
        )
    [receipt] = home.glob(f"projects/*/tasks/{shown['task']['id']}/turns/*/response.json")
    started = datetime.fromisoformat(json.loads(receipt.read_text())["attempts"][0]["started_at"]).timestamp()
    errors = [r for r in requests[1:] if any(b.get("is_error") for b in r.tool_results()[-1:])]
    if errors:
        raise SystemExit(f"a shell call of {ref} failed: {errors[0].tool_results()[-1]}")
    return {
        "launch_ms": (requests[0].at - started) * 1000,
        "call_ms": [(b.at - a.at) * 1000 for a, b in itertools.pairwise(requests)],
        "tools_offered": sorted(t["name"] for t in requests[0].body.get("tools", [])),
    }


def pi_alone(
    pi: Path, base: Path, server: ScriptedServer, env: dict[str, str], n: int, warm: bool = True
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Pi's launch by itself, spawn to first model request (ms), and the CPU time of its whole run (ms: what
    a machine with a core to spare would wait, whatever else runs): without corral's tools, with its
    extension, and with the extension's entry as an ES module."""
    from corral.adapters.harness.base import AgentTools, TurnRequest
    from corral.adapters.harness.pi import PiHarness
    from corral.pi_extension import DOOR, EXTENSION

    entry = base / "entry.mjs"
    entry.write_text(
        f"import {{ corralTools }} from {json.dumps(str(DOOR))};\n"
        "export default function (pi) { for (const tool of corralTools(process.env)) pi.registerTool(tool); }\n"
    )
    harness = PiHarness(str(pi), pi_support.PROVIDER)
    work = base / "alone"
    work.mkdir()
    req = TurnRequest(prompt="go", cwd=str(work), model=pi_support.MODEL)
    tools = AgentTools(url="http://127.0.0.1:9/mcp", token="crl_bench", timeout_seconds=600.0, shell=True)
    launches = {"without": harness.work(req), "with": harness.work(msgspec.structs.replace(req, tools=tools))}
    mjs = launches["with"]
    launches["with, .mjs entry"] = msgspec.structs.replace(
        mjs, argv=[str(entry) if a == str(EXTENSION) else a for a in mjs.argv]
    )
    out: dict[str, list[float]] = {k: [] for k in launches}
    cpu: dict[str, list[float]] = {k: [] for k in launches}
    for i in range(0 if warm else 1, n + 1):  # the first round warms the page cache
        for name, launch in launches.items() if i % 2 else reversed(launches.items()):
            before = len(server.script_requests)
            server.steps.append(Text("done"))
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.time()
            done = subprocess.run(
                launch.argv, cwd=work, env={**env, **launch.env}, capture_output=True, timeout=120, check=False
            )
            if done.returncode != 0 or len(server.script_requests) != before + 1:
                raise SystemExit(f"pi ({name}) failed: {done.stderr[-2000:]!r}")
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if i:
                out[name].append((server.script_requests[before].at - started) * 1000)
                cpu[name].append((after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime) * 1000)
    return out, cpu


def main() -> int:
    parser = scratch_options(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--launches", type=int, default=15)
    args = parse_args(parser, {"runs": 1, "calls": 1, "launches": 1})  # one call: one request-to-request interval
    result: dict[str, Any] = {"machine": machine(), "load_before": load(), "runs": args.runs, "calls": args.calls}
    pi = pi_support.pi_bin()
    result["pi"] = pi_support.pi_version(pi)
    base = scratch_dir("pi-extension", args)
    server = ScriptedServer([])
    home = base / "corral-home"
    env: dict[str, str] = {}
    ok = False
    try:
        repo = make_repo(base / "repo")
        agent_dir = pi_support.write_user_provider(base / "pi-agent", server)
        env = hermetic_env(home, base / "pycache")
        env = {k: v for k, v in env.items() if not k.startswith(("PI_", "ANTHROPIC_"))}
        env.update(
            {
                "HOME": str(base / "home"),
                "PI_CODING_AGENT_DIR": str(agent_dir),
                "PI_OFFLINE": "1",
                "PI_TELEMETRY": "0",
                pi_support.KEY_VARIABLE: pi_support.TEST_API_KEY,
                "CORRAL_PI_BIN": str(pi),
                "CORRAL_SANDBOX": "bwrap",
                "CORRAL_AUTO_RESUME": "0",
            }
        )
        (base / "home").mkdir()
        alone, alone_cpu = pi_alone(pi, base, server, env, args.launches, warm=not args.quick)
        alone_median = {k: median(v) for k, v in alone.items()}
        cpu_median = {k: median(v) for k, v in alone_cpu.items()}
        result["pi_alone_cpu_median_ms"] = {k: round(v, 1) for k, v in cpu_median.items()}
        result["pi_alone_launch_ms"] = {k: [round(x, 1) for x in v] for k, v in alone.items()}
        result["pi_alone_launch_median_ms"] = {k: round(v, 1) for k, v in alone_median.items()}
        figures: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        # run -1: a warm-up of each (the daemon started, caches filled); a quick run has none
        for run in range(0 if args.quick else -1, args.runs):
            for mode in MODES if run % 2 else reversed(MODES):
                tools = {"CORRAL_AGENT_TOOLS": "1" if mode == "with" else "0"}
                turn = one_turn({**env, **tools}, repo, home, server, f"{mode}-{run + 1}", args.calls)
                if run >= 0:
                    figures[mode].append(turn)
        launch = {m: median([t["launch_ms"] for t in figures[m]]) for m in MODES}
        calls = {m: [c for t in figures[m] for c in t["call_ms"]] for m in MODES}
        call = {m: median(calls[m]) for m in MODES}
        added_launch, added_call = launch["with"] - launch["without"], call["with"] - call["without"]
        launch_ok, call_ok = added_launch < LAUNCH_TARGET_MS, added_call < CALL_TARGET_MS
        result.update(
            {
                "tools_offered": {m: figures[m][0]["tools_offered"] for m in MODES},
                "launch_ms": {m: [round(t["launch_ms"], 1) for t in figures[m]] for m in MODES},
                "launch_median_ms": {m: round(v, 1) for m, v in launch.items()},
                "launch_added_ms": round(added_launch, 1),
                "call_median_ms": {m: round(v, 1) for m, v in call.items()},
                "call_p90_ms": {m: round(percentile(calls[m], 90), 1) for m in MODES},
                "call_added_ms": round(added_call, 1),
            }
        )
        print(f"Pi {result['pi']}, confined, {args.runs} runs x {args.calls} shell calls of each kind")
        print(f"  offered with the extension: {', '.join(result['tools_offered']['with'])}")
        print(f"  offered without:            {', '.join(result['tools_offered']['without'])}")
        print(
            f"Launch (attempt start -> first model request), median: with {launch['with']:.0f} ms, "
            f"without {launch['without']:.0f} ms; added {added_launch:.0f} ms "
            f"(target < {LAUNCH_TARGET_MS:.0f}) {verdict(launch_ok)}"
        )
        print(
            f"Shell call (request to request), median: with {call['with']:.1f} ms, without {call['without']:.1f} ms "
            f"(p90 {result['call_p90_ms']['with']:.1f} / {result['call_p90_ms']['without']:.1f}); added "
            f"{added_call:.1f} ms (target < {CALL_TARGET_MS:.0f}) {verdict(call_ok)}"
        )
        alone_added = alone_median["with"] - alone_median["without"]
        result["pi_alone_launch_added_ms"] = round(alone_added, 1)
        mjs = alone_median["with, .mjs entry"]
        print(
            f"Pi alone, spawn -> first model request, median of {args.launches}: without {alone_median['without']:.0f}"
            f" ms, with the extension {alone_median['with']:.0f} ms (added {alone_added:.0f} ms), with a .mjs entry "
            f"{mjs:.0f} ms (added {mjs - alone_median['without']:.0f} ms)"
        )
        bare, ts, es = cpu_median["without"], cpu_median["with"], cpu_median["with, .mjs entry"]
        print(
            f"  its CPU time, median: without {bare:.0f} ms, with the extension {ts:.0f} ms (added {ts - bare:.0f}"
            f" ms), with a .mjs entry {es:.0f} ms (added {es - bare:.0f} ms)"
        )
        floors = {
            "pi_alone_launch_ms": alone_median["without"],
            "turn_launch_without_extension_ms": launch["without"],
            "shell_call_without_extension_ms": call["without"],
        }
        report_floors(result, floors, "Pi by itself, and the same turns without the extension")
        ok = launch_ok and call_ok
    finally:
        if env:
            stop_daemon(env, base / "repo")
        server.close()
        drop_scratch(base, args.keep)
    return finish("bench_pi_extension", result, ok)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    raise SystemExit(main())
