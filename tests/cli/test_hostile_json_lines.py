"""Hostile output never becomes corral's fault: a JSON-stream harness's agent (the fake agent, which
speaks Claude Code's stream-json) prints lines no JSON reader should take whole — a 100,000-deep
array, the same depth inside an event corral reads for incidents, a structure just under Python's
recursion limit in a tool call's arguments, a 10 MB line — then finishes normally with a commit.

The turn ends as a normal completion (never an internal fault), each line corral could not read
is an observation gap in the task's incidents, and ``logs`` (readable, ``--raw``, ``--json``)
prints every line.
"""

from __future__ import annotations

import json
from pathlib import Path

from corral.testing.fake_agent import wrapper_script

DEEP = 100_000
#: Under CPython's default recursion limit (1000): ``json.loads`` takes it, code that walks it after may not.
NEAR_LIMIT = 950
BIG = 10 * 1024 * 1024


def _deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def _assistant(content: str) -> str:
    return '{"type":"assistant","message":{"role":"assistant","content":' + content + "}}"


def _tool_use(args: str) -> str:
    return (
        '{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_deep",'
        '"name":"Bash","input":{"command":"ls","nested":' + args + "}}]}}"
    )


def _nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


HOSTILE = [
    {"init": True},
    {"stdout": _deep_array(DEEP) + "\n"},
    {"stdout": _assistant(_deep_array(DEEP)) + "\n"},
    {"stdout": _tool_use(_nested_object(NEAR_LIMIT)) + "\n"},
    {"stdout": '{"type":"assistant","pad":"' + "x" * BIG + '"}\n'},
    {"text": "still here"},
    {"write": {"path": "done.txt", "content": "done\n"}},
    {"commit": "The work, finished"},
    {"result": "All done."},
]


def fake_env(tmp_path: Path, *invocations: list[dict]) -> dict[str, str]:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"invocations": [list(i) for i in invocations]}))
    return {
        "CORRAL_CLAUDE_BIN": str(wrapper_script(tmp_path / "bin")),
        "CORRAL_FAKE_SCENARIO": str(scenario),
        "CORRAL_FAKE_RECORD": str(tmp_path / "record"),
        "CORRAL_AUTO_RESUME": "0",
        "CORRAL_WATCHDOG_TIMEOUT": "600",
    }


def test_hostile_lines_leave_a_normal_turn_gaps_and_readable_logs(corral, tmp_path):
    env = fake_env(tmp_path, HOSTILE)
    corral.ok("create", "Hostile output", "--ref", "hostile", env=env)
    corral.ok("start", "hostile", env=env)
    waited = corral("wait", "hostile", "--json", env=env, timeout=120)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    doc = waited.json()
    assert doc["task"]["status"] == "blocked" and doc["resting_cause"] is None, doc
    shown = corral.json("show", "hostile", env=env)
    assert "internal" not in json.dumps(shown).lower(), shown

    failures = corral.json("failures", "hostile", "--history", env=env)
    gaps = {row["id"]: row["summary"] for row in failures["failures"]["rows"]}
    assert all(row["label"] == "Observation incomplete" for row in failures["failures"]["rows"]), failures
    # The supervisor read every line of the stream live: the four it could not are one gap of the attempt.
    assert "4 line(s) of the harness's stream could not be read" in gaps["incomplete:unread:1.1"], gaps
    # The incident scan: the two deep events it would have read facts from, and the 10 MB line, once.
    assert sorted(k.split(":")[1] for k in gaps if k != "incomplete:unread:1.1") == [
        "oversized",
        "too-deep",
        "too-deep",
    ], gaps

    readable = corral("logs", "hostile", env=env, timeout=120)
    assert readable.returncode == 0, readable.stderr[-2000:]
    assert "Traceback" not in readable.stderr
    assert "[[[[" in readable.stdout  # the deep line, kept as text
    assert "still here" in readable.stdout and "All done." in readable.stdout

    raw = corral("logs", "hostile", "--raw", env=env, timeout=120)
    assert raw.returncode == 0, raw.stderr[-2000:]
    assert _deep_array(DEEP) in raw.stdout
    assert "x" * BIG in raw.stdout

    lines = corral("logs", "hostile", "--json", env=env, timeout=120)
    assert lines.returncode == 0, lines.stderr[-2000:]
    assert "Traceback" not in lines.stderr


def test_a_failed_turn_after_hostile_lines_is_explained_not_a_fault(corral, tmp_path):
    # Its last lines, what a failed turn's diagnostic reads: a deep object, whole in the window it reads.
    # It ends refused by the model server (401: fatal, no retry), so the turn's diagnostic is written.
    last = {"stdout": _nested_object(9_000) + "\n"}
    failing = [
        *HOSTILE[:4],
        {"text": "giving up"},
        last,
        {"result": "Invalid API key", "is_error": True, "status": 401},
    ]
    env = fake_env(tmp_path, [*failing, {"exit": 1}])
    corral.ok("create", "Hostile failure", "--ref", "failing", env=env)
    corral.ok("start", "failing", env=env)
    waited = corral("wait", "failing", "--json", env=env, timeout=120)
    doc = waited.json()
    assert doc["task"]["status"] != "working", doc  # the turn was recorded: its diagnostic did not fail
    assert doc["resting_cause"]["code"] == "harness-not-authenticated", doc["resting_cause"]
    assert doc["resting_cause"]["evidence"]["diagnostic"], doc["resting_cause"]
    for args in (("show", "failing"), ("show", "failing", "--json"), ("logs", "failing"), ("failures", "failing")):
        result = corral(*args, env=env, timeout=120)
        assert result.returncode == 0, (args, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, args
