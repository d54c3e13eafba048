"""The timeline numbers exchanges: a person's message and the agent's answer are one numbered turn.

``show`` (text and ``--json``), ``logs --turn`` and MCP's ``logs`` use the same numbers; a number
the task has no turn for is a typed error, never another turn's output.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from corral.domain.records import SCHEMA_VERSION
from tests.conftest import CLI

#: The agent: says which turn it is answering (the prompt's last line), on stdout and stderr.
AGENT = r"""
import os, sys
prompt = sys.stdin.read().strip().splitlines()
print("answering:", prompt[-1] if prompt else "")
print("a note on stderr", file=sys.stderr)
"""


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")


def two_exchanges(corral: CLI) -> dict:
    corral.ok("create", "Say hello", "--ref", "hello")
    corral.ok("start", "hello", "-m", "first message", "--wait", "--timeout", "60")
    corral.ok("unblock", "hello", "-m", "second message", "--wait", "--timeout", "60")
    doc: dict = corral.json("show", "hello")
    return doc


def test_a_message_and_its_answer_are_one_numbered_turn(corral: CLI, agent: None) -> None:
    doc = two_exchanges(corral)
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    turns = [(t["sequence"], t["exchange"], t["role"]) for t in doc["turns"]]
    assert turns == [(1, 1, "human"), (2, 1, "agent"), (3, 2, "human"), (4, 2, "agent")]
    text = corral.ok("show", "hello").stdout
    numbered = re.findall(r"UTC  turn (\d+) · ", text)
    assert numbered == ["1", "1", "2", "2"], text


def test_logs_turn_n_is_the_exchange_show_prints(corral: CLI, agent: None) -> None:
    two_exchanges(corral)
    second = corral.ok("logs", "hello", "--turn", "2").stdout
    assert "══ turn 2 · unblock" in second and "answering: second message" in second, second
    first = corral.ok("logs", "hello", "--turn", "1").stdout
    assert "══ turn 1 · start" in first and "answering: first message" in first, first
    lines = corral.ok("logs", "hello", "--turn", "2", "--json").stdout.splitlines()
    events = [e for e in map(json.loads, lines) if e["event"] in ("turn", "end")]
    assert [(e["event"], e["turn"], e["exchange"]) for e in events] == [("turn", 3, 2), ("end", 3, 2)]


@pytest.mark.parametrize("number", ["3", "0", "-1"])
def test_a_turn_the_task_does_not_have_is_a_typed_error(corral: CLI, agent: None, number: str) -> None:
    two_exchanges(corral)
    refused = corral("logs", "hello", "--turn", number, "--json")
    assert refused.returncode == 4 and "Traceback" not in refused.stderr, refused.stderr
    last = json.loads(refused.stdout.splitlines()[-1])
    assert last["event"] == "error" and last["error"]["code"] == "no-such-turn"
    err = last["error"]
    assert err["message"] == f"hello has no turn {number}: its turns are 1 to 2."
    assert "corral show hello" in err["hint"]
