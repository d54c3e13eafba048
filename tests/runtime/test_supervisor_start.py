"""What a turn's supervisor loads before its agent starts: only what the turn runs with. Its
fault report (``traceback``) and the end of the agent's token (``agent_tokens``, with ``secrets``)
load where they are used, so the agent is spawned sooner (``bench/README.md``, start-up)."""

from __future__ import annotations

import subprocess
import sys


def test_the_supervisor_loads_its_fault_report_and_token_code_only_when_it_needs_them() -> None:
    later = ["traceback", "corral.engine.runtime.agent_tokens", "secrets"]
    probe = f"import sys, corral.engine.runtime.supervisor; print([m for m in {later!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
