"""Incidents end to end: the real Claude Code, run by corral's supervisor, read back by the real ``corral``.

The rig is the one of tests/seams/test_corral_claude.py (a scripted model server, the pinned CLI
behind a recording wrapper, the CLI's own retry settings). The model asks for the same Bash test
command several times; the command's real exit status decides each ``tool_result``'s
``is_error``, so what the journal holds is what the CLI reported. The reads are the ``corral``
entry point as a process, with the rig's environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corral.domain.status import Status
from corral.engine.runtime.journal import CURSOR_KIND
from tests.conftest import CLI
from tests.seams import test_corral_claude as rig_module
from tests.support.model_server import Error, Text, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

make_rig = rig_module.make_rig  # the rig's fixture, used here as it is there
start = rig_module.start

NOTE = "Work correctness was not inferred from lifecycle alone."


def flaky_test(counter: Path, passes_on: int) -> str:
    """One shell command, the same each run, that fails until its ``passes_on``-th run."""
    return (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
        f"if [ $n -ge {passes_on} ]; then echo run $n: 3 passed; else echo run $n: 1 failed; exit 1; fi"
    )


def reads(repo: Path, env: dict[str, str], ref: str) -> dict[str, Any]:
    corral = CLI(repo)
    out: dict[str, Any] = {}
    for name, args in {
        "failures": ("failures", ref),
        "failures_json": ("--json", "failures", ref),
        "history_json": ("--json", "failures", ref, "--history"),
        "show_json": ("--json", "show", ref),
        "show": ("show", ref),
        "list": ("list",),
    }.items():
        result = corral(*args, env=env)
        assert result.returncode == 0, f"corral {' '.join(args)}: {result.stderr}"
        out[name] = result.json() if name.endswith("_json") else result.stdout
    return out


def test_a_test_command_failing_twice_then_passing_on_an_exact_retry_needs_no_action(make_rig, repo, tmp_path):
    rig = make_rig(auto_resume="0")
    task = rig.create(prompt="Run the tests until they pass.")
    command = {"command": flaky_test(tmp_path / "runs", passes_on=3), "description": "run the tests"}
    rig.script(ToolUse("Bash", command), ToolUse("Bash", command), ToolUse("Bash", command), Text("Tests pass."))
    done = start(rig, task)
    assert done.status is Status.BLOCKED and rig.server.remaining == []
    results = rig.server.script_requests[-1].tool_results()
    assert [bool(r.get("is_error")) for r in results] == [True, True, False]  # what the CLI reported

    got = reads(repo, rig.env, task.ref)
    assert got["failures"].splitlines() == ["No failures need action · 1 recovered (history)", NOTE]
    doc = got["failures_json"]["failures"]
    assert doc["needs_action"] == 0 and doc["rows"] == []
    assert doc["counts"]["Recovered"] == 1 and sum(doc["counts"].values()) == 1
    (row,) = got["history_json"]["failures"]["rows"]
    assert (row["label"], row["failures"], row["category"]) == ("Recovered", 2, "tool")
    assert row["summary"].startswith("Bash failed: Exit code 1 run 2: 1 failed")
    assert row["evidence"].startswith("output.log#byte=")
    incidents = got["show_json"]["incidents"]
    assert incidents["needs_action"] == 0 and incidents["rows"] == []
    assert incidents["counts"]["Recovered"] == 1
    assert incidents["line"] == "No failures need action · 1 recovered (history)"
    assert "Action required" not in got["show"]
    assert task.ref in got["list"]


def test_the_same_test_command_failing_three_times_requires_action(make_rig, repo, tmp_path):
    rig = make_rig(auto_resume="0")
    task = rig.create(prompt="Run the tests until they pass.")
    command = {"command": flaky_test(tmp_path / "runs", passes_on=99), "description": "run the tests"}
    other = {"command": "true", "description": "something else"}
    # After three failures another command exits 0 and the assistant claims success: neither clears it.
    rig.script(*[ToolUse("Bash", command)] * 3, ToolUse("Bash", other), Text("All tests pass now."))
    done = start(rig, task)
    assert done.status is Status.BLOCKED and rig.server.remaining == []

    got = reads(repo, rig.env, task.ref)
    lines = got["failures"].splitlines()
    assert lines[0].startswith("Action required ×3: Bash failed: Exit code 1 run 3: 1 failed")
    assert lines[0].endswith("]") and "[output.log#byte=" in lines[0]
    dismiss = f"Dismiss one you have dealt with: corral failures {task.ref} --dismiss tool:turns/1/output.log:"
    assert lines[1] == "1 failure needs action" and lines[2].startswith(dismiss) and lines[2].endswith(" -m 'why'")
    assert lines[3:] == [NOTE]
    doc = got["failures_json"]["failures"]
    assert doc["needs_action"] == 1 and doc["line"] == "1 failure needs action"
    (row,) = doc["rows"]
    assert (row["label"], row["failures"], row["category"]) == ("Action required", 3, "tool")
    incidents = got["show_json"]["incidents"]
    assert incidents["needs_action"] == 1
    assert [r["label"] for r in incidents["rows"]] == ["Action required"]
    assert incidents["rows"][0]["id"] == row["id"]
    # The journal on disk is the source: one failure event per failed run, all of one incident.
    session = rig.task(task).session_id
    assert session is not None and doc["session_id"] == session
    journal = rig.proj.paths.journal_dir(task.id, session) / "failures.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    # The scan's cursor records ride in the journal beside the events they cover; they are not events.
    events = [e for e in records if e["kind"] != CURSOR_KIND]
    assert [e["kind"] for e in events] == ["failure"] * 3
    assert records[-1]["kind"] == CURSOR_KIND
    assert {e["id"] for e in events} == {row["id"]}


def test_a_529_that_corrals_ladder_retried_is_a_model_incident_recovered_by_the_next_answer(make_rig, repo):
    rig = make_rig(auto_resume="0")
    rig.script(Error(529), Text("answered after the overload"))
    task = rig.create()
    done = start(rig, task)
    assert done.status is Status.BLOCKED and done.resting_cause is None
    assert len(rig.launches()) == 2  # corral ended the CLI at its retry line and relaunched it

    got = reads(repo, rig.env, task.ref)
    assert got["failures"].splitlines() == ["No failures need action · 1 recovered (history)", NOTE]
    (row,) = got["history_json"]["failures"]["rows"]
    assert (row["label"], row["category"]) == ("Recovered", "model")
    assert row["summary"] == "Claude Code's model call failed: HTTP 529 overloaded"  # corral's verdict on it
    assert got["show_json"]["incidents"]["needs_action"] == 0
