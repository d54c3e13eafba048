"""The Pi extension's own tests (``tests/harness/pi_extension/*.test.mjs``), run by Node's test runner.

The extension is JavaScript that Pi runs, so its tests are Node's: its MCP client against a loopback
endpoint, the tools it makes, and its TypeScript entry loaded with the jiti of the installed Pi, as Pi
loads it. This test runs them, so the suite's one command runs them too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.pi import AgentNotInstalled, pi_bin

HERE = Path(__file__).resolve().parent / "pi_extension"


def jiti_of_pi() -> Path | None:
    """The jiti module Pi loads extensions with, beside the installed Pi package (nested or hoisted); None
    without Pi (locally: the entry's own test is then skipped; under CI, Pi's absence fails)."""
    try:
        pi = pi_bin()
    except AgentNotInstalled:
        if os.environ.get("CI"):
            raise
        return None
    package = Path(os.path.realpath(pi)).parent.parent  # …/pi-coding-agent/dist/cli.js
    for base in (package / "node_modules", package.parent.parent):
        found = base / "jiti" / "lib" / "jiti.mjs"
        if found.is_file():
            return found
    raise AssertionError(f"Pi's jiti was not found beside {package}")


def test_the_extensions_node_tests_pass() -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            raise AssertionError("node is not on PATH; the Pi extension's tests need it")
        pytest.skip("node is not on PATH (the Pi extension's tests run under Node 20 or newer)")
    jiti = jiti_of_pi()
    env = {**os.environ, "NODE_OPTIONS": ""}
    env.pop("CORRAL_PI_JITI", None)
    if jiti is not None:
        env["CORRAL_PI_JITI"] = str(jiti)
    done = subprocess.run(
        [node, "--test", *sorted(str(p) for p in HERE.glob("*.test.mjs"))],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout, done.stdout[-2000:]
    assert f"# skipped {0 if jiti else 1}" in done.stdout, done.stdout[-2000:]


#: Set to rewrite the extension's copy of corral's MCP tools after a change to their descriptions or schemas.
WRITE_VARIABLE = "CORRAL_WRITE_PI_TOOLS"


def test_the_extensions_tools_are_corrals_mcp_tools() -> None:
    """What Pi offers and validates is what corral's MCP endpoint offers: the same descriptions and schemas."""
    from corral.mcp.tools import TOOLS
    from corral.pi_extension import TOOLS_FILE

    now = {
        n: {"description": TOOLS[n].description, "inputSchema": TOOLS[n].schema}
        for n in ("bash", "failure_disposition")
    }
    if os.environ.get(WRITE_VARIABLE):
        TOOLS_FILE.write_text(json.dumps(now, indent=2) + "\n", encoding="utf-8")
    assert json.loads(TOOLS_FILE.read_text(encoding="utf-8")) == now, (
        f"corral's MCP bash or failure_disposition changed: rewrite the extension's copy with {WRITE_VARIABLE}=1 "
        "and this test"
    )
