"""A scripted task agent that calls corral's tools over MCP, run by the ``command`` harness in tests.

It connects with the official MCP client to ``CORRAL_MCP_URL`` with the bearer token in
``CORRAL_AGENT_TOKEN`` (what corral gives every turn's agent) and runs the steps planned for its
task (``CORRAL_TASK``) in the JSON file ``MCP_AGENT_PLAN``: ``{"<ref>": [step, ...]}``, each step
``{"tool": name, "args": {...}}``, ``{"write": [path, content]}``, ``{"commit": message}`` or
``{"sleep": seconds}``; ``{"cli": [args]}`` runs the corral CLI (``--json``) from inside the turn,
``{"dump_token": path}`` writes the URL and token to a file, and ``{"hold": path}`` keeps the turn
running until that file is removed. A tool call that fails (the endpoint went away) is noted and
the plan goes on.
Every tool result goes as one JSON line to ``$MCP_AGENT_OUT/<ref>.jsonl``
(``{"tool", "is_error", "result"}``); the last line on stdout is the turn's answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def record(ref: str, doc: dict[str, Any]) -> None:
    out = Path(os.environ["MCP_AGENT_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{ref}.jsonl").open("a") as fh:
        fh.write(json.dumps(doc) + "\n")


def cli(ref: str, args: list[str]) -> None:
    """The corral CLI run from inside the turn, as an agent would run it (the token in its environment)."""
    done = subprocess.run([sys.executable, "-m", "corral", *args, "--json"], capture_output=True, text=True)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"stdout": done.stdout, "stderr": done.stderr}
    record(ref, {"cli": args, "exit": done.returncode, "result": doc})


def hold(path: Path) -> None:
    path.write_text("held")
    while path.exists():
        time.sleep(0.05)


async def call(url: str, token: str, tool: str, args: dict[str, Any]) -> Any:
    """One tool call on a session of its own, so an endpoint that dies fails this call only."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await client.call_tool(tool, args)


async def run(ref: str, steps: list[dict[str, Any]]) -> None:
    url = os.environ.get("CORRAL_MCP_URL")
    token = os.environ.get("CORRAL_AGENT_TOKEN")
    record(ref, {"env": {"url": url, "token": bool(token)}})
    for step in steps:
        if "tool" in step:
            assert url and token, "no endpoint or no token in the environment"
            try:
                result = await call(url, token, step["tool"], step.get("args") or {})
            except BaseException as exc:  # the endpoint went away mid-call: noted, and the plan goes on
                if not isinstance(exc, Exception | BaseExceptionGroup):
                    raise
                record(ref, {"tool": step["tool"], "failed": f"{type(exc).__name__}: {exc}"})
                continue
            record(ref, {"tool": step["tool"], "is_error": result.is_error, "result": result.structured_content})
        elif "cli" in step:
            cli(ref, step["cli"])
        elif "dump_token" in step:  # for a test that calls the endpoint as this turn's agent itself
            Path(step["dump_token"]).write_text(json.dumps({"url": url, "token": token}))
        elif "hold" in step:  # the turn runs on until the test removes this file
            hold(Path(step["hold"]))
        elif "write" in step:
            path, content = step["write"]
            Path(path).write_text(content)
        elif "commit" in step:
            subprocess.run(["git", "add", "-A"], check=True)
            subprocess.run(["git", "commit", "-qm", step["commit"]], check=True)
        elif "sleep" in step:
            time.sleep(float(step["sleep"]))


def main() -> int:
    import anyio

    ref = os.environ.get("CORRAL_TASK", "?")
    plan = json.loads(Path(os.environ["MCP_AGENT_PLAN"]).read_text())
    steps = plan.get(ref, plan.get("*", []))
    try:
        anyio.run(run, ref, steps)
    except Exception as exc:
        import traceback

        record(ref, {"crashed": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exception(exc)[-8:]})
        raise
    print(f"{ref}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
