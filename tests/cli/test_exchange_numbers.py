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

from corral.domain import exchanges
from corral.domain.records import SCHEMA_VERSION
from tests.cli.helpers import store_of
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


#: The agent, dying by SIGKILL when the marker file exists: a failure corral observes itself.
DYING = r"""
import os, signal, sys
sys.stdin.read()
print("working on it")
sys.stdout.flush()
if os.path.exists(os.environ["DIE_MARKER"]):
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_failures_name_the_turn_show_prints(corral: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script, marker = tmp_path / "dying.py", tmp_path / "die"
    script.write_text(DYING)
    monkeypatch.setenv("CORRAL_HARNESS", "command")
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("DIE_MARKER", str(marker))
    corral.ok("create", "Die on the second", "--ref", "dies")
    corral.ok("start", "dies", "-m", "first", "--wait", "--timeout", "60")
    marker.touch()
    corral("unblock", "dies", "-m", "second", "--wait", "--timeout", "60")
    doc = corral.json("show", "dies")
    failed = [t for t in doc["turns"] if t["failure"] is not None]
    assert [(t["sequence"], t["exchange"]) for t in failed] == [(4, 2)], doc["turns"]
    rows = corral.json("failures", "dies", "--history")["failures"]["rows"]
    said = " ".join(str(r.get("summary")) for r in rows)
    assert "turn 2" in said and "turn 3" not in said and "turn 4" not in said, rows


def test_the_store_counts_the_exchanges_before_a_page_as_the_timeline_numbers_them(
    corral: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    test_failures_name_the_turn_show_prints(corral, tmp_path, monkeypatch)  # a start, an unblock, a crash
    corral("resume", "dies", "--wait", "--timeout", "60")  # it dies again: a third exchange
    with store_of(corral) as store, store.read() as tx:
        task = tx.task_by_ref("dies")
        assert task is not None
        turns = tx.turns(task.id)
        whole = exchanges.number(turns)
        for t in turns:
            before = tx.exchanges_before(task.id, t.sequence)
            page = [p for p in turns if p.sequence >= t.sequence]
            assert exchanges.number(page, before=before) == {p.sequence: whole[p.sequence] for p in page}
    assert sorted(set(whole.values())) == [1, 2, 3]
