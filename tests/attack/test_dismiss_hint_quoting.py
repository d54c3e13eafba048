"""``failures`` names the command that dismisses an incident; an incident's id carries the tool call's id, which
the agent's harness stream says. Typed (pasted) as printed, that command must dismiss the incident and run
nothing else: an id the shell would read as more than a word is quoted."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import CLI, FakeAgent


def failing_call(call_id: str) -> list[dict[str, Any]]:
    """One Bash call the agent's stream names ``call_id``, failed."""
    use = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "make check"}}
    result = {"type": "tool_result", "tool_use_id": call_id, "is_error": True, "content": "make: *** [check] Error 2"}
    return [
        {"emit": {"type": "assistant", "message": {"role": "assistant", "content": [use]}}},
        {"emit": {"type": "user", "message": {"role": "user", "content": [result]}}},
    ]


def test_the_printed_dismiss_command_runs_nothing_the_agent_wrote(
    corral: CLI, agent: FakeAgent, tmp_path: Path
) -> None:
    marker = tmp_path / "owned"
    hostile = f"toolu_1;touch${{IFS}}{marker};$(touch${{IFS}}{marker})`touch {marker}`"
    steps = [*failing_call(hostile), *failing_call("toolu_2"), *failing_call("toolu_3")]
    agent.script([*steps, {"result": "gave up"}])
    env = {"CORRAL_AUTO_RESUME": "0"}
    ref = corral.json("create", "Run the checks", env=env)["task"]["ref"]
    corral.ok("start", ref, env=env)
    corral("wait", ref, env=env)
    rows = corral.json("failures", ref)["failures"]["rows"]
    [row] = [r for r in rows if hostile in r["id"]]
    assert row["label"] == "Action required", rows
    hint = next(line for line in corral("failures", ref).stdout.splitlines() if "--dismiss" in line)
    typed = hint.split(": ", 1)[1]
    words = shlex.split(typed)
    assert words[words.index("--dismiss") + 1] == row["id"], (typed, words)
    # as a person pastes it into a shell: the corral it names is this one
    run = typed.replace("corral ", f"{shlex.quote(sys.executable)} -m corral ", 1).replace("'why'", "'dealt with'")
    done = subprocess.run(["bash", "-c", run], cwd=corral.cwd, capture_output=True, text=True, timeout=60)
    assert not marker.exists(), (typed, done.stderr)
    assert done.returncode == 0, (typed, done.stdout, done.stderr)
    after = {r["id"]: r for r in corral.json("failures", ref, "--history")["failures"]["rows"]}
    assert after[row["id"]]["label"] == "Dismissed", json.dumps(after)[:2000]
