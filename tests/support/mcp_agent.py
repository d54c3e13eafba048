"""A scripted task agent that calls corral's tools over MCP, run by the ``command`` harness in tests.

It connects with the official MCP client to ``CORRAL_MCP_URL`` with the bearer token in
``CORRAL_AGENT_TOKEN`` (what corral gives every turn's agent) and runs the steps planned for its
task (``CORRAL_TASK``) in the JSON file ``MCP_AGENT_PLAN``: ``{"<ref>": [step, ...]}``, each step
``{"tool": name, "args": {...}}``, ``{"write": [path, content]}``, ``{"commit": message}`` or
``{"sleep": seconds}``; ``{"dump_token": path}`` writes the URL and token to a file and
``{"hold": path}`` keeps the turn running until that file is removed (both before any tool call).
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


async def run(ref: str, steps: list[dict[str, Any]]) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from mcp import Client

    url = os.environ.get("CORRAL_MCP_URL")
    token = os.environ.get("CORRAL_AGENT_TOKEN")
    record(ref, {"env": {"url": url, "token": bool(token)}})
    for step in steps:
        if "dump_token" in step:  # for a test that calls the endpoint as this turn's agent itself
            Path(step["dump_token"]).write_text(json.dumps({"url": url, "token": token}))
        if "hold" in step:  # keep the turn running until the test removes this file
            hold = Path(step["hold"])
            hold.write_text("held")
            while hold.exists():
                time.sleep(0.05)
    steps = [s for s in steps if "dump_token" not in s and "hold" not in s]
    if not url or not token or not steps:
        return
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        for step in steps:
            if "tool" in step:
                result = await client.call_tool(step["tool"], step.get("args") or {})
                record(ref, {"tool": step["tool"], "is_error": result.is_error, "result": result.structured_content})
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
