"""The fake agent starts without corral's harnesses, and what it records of the command harness's
contract is the contract."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from corral.adapters.harness.command import CONTRACT_VARS
from corral.testing import fake_agent


def test_its_copy_of_the_contract_is_the_command_harnesss() -> None:
    assert fake_agent.CONTRACT_VARS == CONTRACT_VARS


def test_the_wrapper_runs_a_scenario_and_imports_no_harness_module(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [[{"init": True}, {"result": "answered"}]]}))
    wrapper = fake_agent.wrapper_script(tmp_path / "bin")
    env = {
        "PATH": "/usr/bin:/bin",
        "CORRAL_FAKE_SCENARIO": str(scenario),
        "CORRAL_FAKE_RECORD": str(tmp_path / "record"),
        "CORRAL_TASK": "the-task",
        "PYTHONVERBOSE": "1",  # every import said on stderr
    }
    done = subprocess.run([str(wrapper), "-p", "a prompt"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = [json.loads(line) for line in done.stdout.splitlines()][-1]
    assert result["type"] == "result" and result["result"] == "answered"
    imported = [line for line in done.stderr.splitlines() if line.startswith("import ")]
    assert imported, "PYTHONVERBOSE said nothing: the check below would prove nothing"
    assert not [line for line in imported if "corral.adapters" in line.split()[1]], done.stderr
    # Nor corral's package (msgspec with it), nor what only some steps or no step use.
    names = {line.split()[1].strip("'") for line in imported}
    assert not names & {"corral", "msgspec", "uuid", "subprocess", "typing"}, sorted(names)
    session = result["session_id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", session), session
    (call,) = [json.loads(line) for line in (tmp_path / "record" / "invocations.jsonl").read_text().splitlines()]
    assert call["prompt"] == "a prompt" and call["env"]["CORRAL_TASK"] == "the-task"


def test_the_wrapper_reads_the_installed_bytecode_where_a_cache_prefix_is_set(tmp_path: Path) -> None:
    """A sandboxed turn does not see a bytecode prefix under /tmp: the fake agent reads the interpreter's
    installed bytecode instead of compiling the standard library at every start, and writes none."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [[{"init": True}, {"result": "answered"}]]}))
    wrapper = fake_agent.wrapper_script(tmp_path / "bin")
    prefix = tmp_path / "unseen-prefix"
    env = {
        "PATH": "/usr/bin:/bin",
        "CORRAL_FAKE_SCENARIO": str(scenario),
        "PYTHONPYCACHEPREFIX": str(prefix),
        "PYTHONVERBOSE": "1",
    }
    done = subprocess.run([str(wrapper), "-p", "a prompt"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = [line for line in done.stderr.splitlines() if line.startswith("# code object from")]
    json_code = [line for line in loaded if "json" in line]
    assert json_code and all(".pyc" in line for line in json_code), json_code
    assert not prefix.exists()
