"""A harness session travels with its task between worker hosts (docs/harnesses.md#sessions-across-hosts).

Two worker hosts (separate clones, HOMEs, CORRAL_HOMEs) on one PostgreSQL store run the real
agent CLIs against one scripted model server, each through a wrapper that notes its argv. A turn
on ``build-1`` makes the session; the next turn, claimed by ``build-2``, resumes the same session
id there, and the model request from ``build-2`` holds the conversation ``build-1`` had: its
transcript came through the store. ``show`` says so. (A session whose transcript cannot come —
the fake agent keeps none — starts fresh with the crash-context prompt: test_workers.py.)
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.domain import prompts
from tests.support import codex as codex_support
from tests.support import pi as pi_support
from tests.support.claude import claude_bin_or_skip, claude_env
from tests.support.model_server import Hang, ScriptedServer, Text, ToolUse
from tests.support.polling import until
from tests.support.responses_server import Message, ResponsesServer
from tests.workers.conftest import LEASE, Team
from tests.workers.team import Host, work

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FIRST = "Remember the secret word: PAPAYA."
ANSWER = "Noted: the secret word is PAPAYA."
QUESTION = "What was the secret word?"

WRAPPER = """#!{python}
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as fh:
    fh.write(json.dumps({{"argv": sys.argv[1:]}}) + "\\n")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


class AgentHost(Host):
    """A worker host whose agent is a real harness CLI (``harness``), its state under this host's HOME."""

    def __init__(self, team: Team, name: str, harness: str, real: Path, env: dict[str, str]) -> None:
        clone = team.root / "hosts" / name / "clone"
        settings = {"lease_seconds": LEASE, "worker_projects": [str(clone)], "wip_push_interval": 1.0}
        super().__init__(team.root / "hosts", name, team.remote, team.url, {**settings, "harness": harness})
        team.hosts.append(self)
        self.harness = harness
        self.launches = self.root / "launches.jsonl"
        wrapper = self.root / "bin" / f"real-{harness}"
        wrapper.write_text(WRAPPER.format(python=sys.executable, log=str(self.launches), real=str(real)))
        wrapper.chmod(0o755)
        lines = [line for line in self.config.read_text().splitlines() if not line.startswith(f"{harness}_bin")]
        self.config.write_text("\n".join([*lines, f'{harness}_bin = "{wrapper}"']) + "\n")
        self.agent_env = env

    def env(self) -> dict[str, str]:
        env = {**super().env(), **self.agent_env}
        env["HOME"] = str(self.home)
        return env

    def argvs(self) -> list[list[str]]:
        if not self.launches.exists():
            return []
        return [json.loads(line)["argv"] for line in self.launches.read_text().splitlines() if line.strip()]


def _claude_host(team: Team, name: str, server: ScriptedServer) -> AgentHost:
    host = AgentHost(team, name, "claude", claude_bin_or_skip(), {})
    env = claude_env(server, host.home, extra={"CLAUDE_CODE_MAX_RETRIES": None})  # at its own retry settings
    wanted = ("ANTHROPIC_", "CLAUDE_", "DISABLE_")
    host.agent_env = {k: v for k, v in env.items() if k.startswith(wanted) or k == "NO_COLOR"}
    return host


def _status(host: Host, ref: str) -> str:
    return str(host.json("show", ref)["task"]["status"])


def _hand_over(team: Team, a: AgentHost, b: AgentHost, ref: str) -> dict[str, Any]:
    """A turn on ``a`` makes the session; ``a`` stops; the next turn, on ``b``, resumes it. ``show``."""
    laptop = team.laptop()
    laptop.corral("create", "Keep a secret word", "--ref", ref, "-m", FIRST, "--harness", a.harness)
    a.start_worker()
    a.wait_event("started")
    laptop.json("start", ref)
    until(lambda: _status(laptop, ref) == "blocked", timeout=90, poll=0.5, what=f"{ref}'s first turn")
    a.stop_worker()
    b.start_worker()
    b.wait_event("started")
    laptop.json("unblock", ref, "-m", QUESTION)
    try:
        until(lambda: _status(laptop, ref) == "blocked", timeout=90, poll=0.5, what=f"{ref}'s second turn")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{laptop.corral('show', ref).stdout}\n{b.output()}\n{b.argvs()}") from None
    shown: dict[str, Any] = laptop.json("show", ref)
    assert shown["lease"]["host"] == b.name
    text = laptop.corral("show", ref).stdout
    assert f"Session:  carried from {a.name} to {b.name}" in text, text
    assert shown["session_carry"] == {"made_on": a.name, "host": b.name, "carried": True, "why": None}
    return shown


def _resumed(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_a_claude_code_session_made_on_one_worker_is_resumed_on_another(team: Team) -> None:
    with ScriptedServer([Text(ANSWER), Text("It was PAPAYA.")]) as server:
        a, b = _claude_host(team, "build-1", server), _claude_host(team, "build-2", server)
        shown = _hand_over(team, a, b, "secret")
    [first] = a.argvs()
    [second] = b.argvs()
    assert _resumed(first, "--resume") is None
    sid = shown["session"]["harness_session_id"]
    assert sid and _resumed(second, "--resume") == sid  # the same session, on another host
    # Resumed, not started over: the prompt is the feedback, without the task's first-turn text.
    prompt = second[second.index("-p") + 1]
    assert QUESTION in prompt and prompts.first_turn("Keep a secret word", FIRST) not in prompt
    on_b = server.script_requests[-1]
    assert on_b.headers["x-claude-code-session-id"] == sid
    assert any(FIRST in t for t in on_b.texts(role="user")) and ANSWER in on_b.texts(role="assistant")
    # build-2 keeps the session under its own worktree's key in its own HOME; build-1's copy is its own.
    assert list((b.home / ".claude" / "projects").glob(f"*/{sid}.jsonl"))


def test_the_claude_code_session_of_a_killed_worker_is_resumed_on_another_with_the_crash_context(team: Team) -> None:
    laptop = team.laptop()
    tool = ToolUse("Bash", {"command": "echo carried-tool-output", "description": "say it"})
    with ScriptedServer([Text(ANSWER), tool, Hang(), Text("Checked: the echo ran before the crash.")]) as server:
        a, b = _claude_host(team, "doomed", server), _claude_host(team, "rescuer", server)
        laptop.corral("create", "Keep a secret word", "--ref", "echo", "-m", FIRST)
        a.start_worker()
        a.wait_event("started")
        laptop.json("start", "echo")
        until(lambda: _status(laptop, "echo") == "blocked", timeout=90, poll=0.5, what="the first turn")
        laptop.json("unblock", "echo", "-m", "Run one echo.")
        # The second turn's tool ran and its model call hangs: its transcript so far reaches the store.
        until(lambda: len(server.script_requests) == 3, timeout=60, poll=0.2, what="the echo's result sent")
        [made] = list((a.home / ".claude" / "projects").glob("*/*.jsonl"))
        # the echo's result, not its command (the tool call's line, written before the echo ran, holds the text too)
        until(lambda: _tool_result_in(made, "carried-tool-output"), timeout=30, what="the echo's result written")
        until(lambda: _stored(team) >= made.stat().st_size, timeout=30, poll=0.2, what="the transcript shipped")
        a.signal_all(signal.SIGKILL)  # the host dies mid-turn: its worker, supervisor and Claude Code alike
        until(lambda: not a.processes(), timeout=10, what=f"the doomed host's processes to end: {a.processes()}")
        b.start_worker()
        try:
            b.wait_event("claim", timeout=LEASE + 60)
            until(lambda: _status(laptop, "echo") == "blocked", timeout=90, poll=0.5, what="the turn on rescuer")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{laptop.corral('show', 'echo').stdout}\n{b.output()}") from None
        shown = laptop.json("show", "echo")
    sid = shown["session"]["harness_session_id"]
    assert [_resumed(argv, "--resume") for argv in a.argvs()] == [None, sid], (a.argvs(), shown["session"])
    [second] = b.argvs()
    assert _resumed(second, "--resume") == sid, (second, shown)  # the same session, on the host that took over
    assert shown["session_carry"] == {"made_on": "doomed", "host": "rescuer", "carried": True, "why": None}, shown
    prompt = second[second.index("-p") + 1]
    assert prompts.CRASH_CLEAN in prompt and FIRST not in prompt  # resumed, told what happened
    on_b = server.script_requests[-1]
    assert any("carried-tool-output" in json.dumps(r.get("content")) for r in on_b.tool_results())
    assert ANSWER in on_b.texts(role="assistant")


def test_a_session_whose_transcript_never_reached_the_store_starts_fresh_with_the_crash_context(team: Team) -> None:
    # The fake agent keeps no transcript: its session is one no host can carry.
    laptop = team.laptop()
    doomed, rescuer = team.worker("doomed"), team.worker("rescuer")
    rescuer.script(work("final.txt"))
    laptop.corral("create", "Long task", "--ref", "long", "-m", FIRST)
    doomed.start_worker()
    doomed.wait_event("started")
    laptop.json("start", "long")
    until(lambda: _status(laptop, "long") == "blocked", timeout=60, poll=0.5, what="the first turn")
    doomed.script([{"init": True}, {"keepalive": 120}])
    laptop.json("unblock", "long", "-m", "Go on.")
    until(lambda: len(doomed.calls()) == 2, timeout=60, poll=0.2, what="the second turn on doomed")
    doomed.signal_all(signal.SIGKILL)
    rescuer.start_worker()
    rescuer.wait_event("claim", timeout=LEASE + 60)
    until(lambda: _status(laptop, "long") == "blocked", timeout=90, poll=0.5, what="the turn ended on rescuer")
    shown = laptop.json("show", "long")
    assert shown["session_carry"] == {
        "made_on": "doomed",
        "host": "rescuer",
        "carried": False,
        "why": "no copy of it reached the store",
    }
    text = laptop.corral("show", "long").stdout
    assert "Session:  fresh on rescuer: the session made on doomed could not be carried (no copy" in text
    [call] = rescuer.calls()
    assert "--resume" not in call["argv"]  # a fresh session, told the task and what happened
    prompt = call["prompt"]
    assert prompt.startswith(prompts.first_turn("Long task", FIRST)) and prompts.CRASH_CLEAN in prompt
    assert prompt.endswith("Go on.")  # the feedback the crash left pending
    assert "see the conversation above" not in prompt  # a fresh session has none: everything is in full


def test_a_re_adopted_turn_ships_its_session_on(team: Team) -> None:
    """A worker restarted mid-turn follows the turn again, its session's transcript too: what the agent
    adds to it after the restart reaches the store, for whichever host takes the session over next."""
    # The worker is killed before the agent's second line: only the re-adopting worker can ship it.
    team.restarted_mid_turn({"transcript": "before the restart"}, {"sleep": 4}, {"transcript": "after the restart"})
    assert b"after the restart" in _stored_transcripts(team)


def _tool_result_in(transcript: Path, text: str) -> bool:
    """Whether a Claude Code transcript holds, whole, a tool result whose content carries ``text``."""
    for line in transcript.read_text(encoding="utf-8").splitlines():
        try:
            content = json.loads(line).get("message", {}).get("content")
        except (ValueError, AttributeError):
            continue  # the line being written
        if isinstance(content, list) and any(
            isinstance(c, dict) and c.get("type") == "tool_result" and text in json.dumps(c.get("content"))
            for c in content
        ):
            return True
    return False


def _stored_transcripts(team: Team) -> bytes:
    """The harness transcripts' bytes in the team's store, file by file in order."""
    with team.sql() as conn:
        rows = conn.execute(
            "SELECT data FROM shipped_files WHERE path LIKE 'transcripts/%/files/%.jsonl' ORDER BY path, offset_bytes"
        ).fetchall()
    return b"".join(bytes(r[0]) for r in rows)


def _stored(team: Team) -> int:
    """Bytes of harness transcripts in the team's store."""
    with team.sql() as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM shipped_files WHERE path LIKE 'transcripts/%/files/%.jsonl'"
        ).fetchone()
    return int(row[0]) if row else 0


def _codex_host(team: Team, name: str, server: ResponsesServer, codex_home: Path) -> AgentHost:
    real = codex_support.codex_bin_or_skip()
    codex_support.write_provider_config(codex_home, server)
    env = {"CODEX_HOME": str(codex_home), codex_support.KEY_VARIABLE: codex_support.TEST_API_KEY}
    return AgentHost(team, name, "codex", real, env)


def test_a_codex_thread_made_on_one_worker_is_resumed_on_another(team: Team) -> None:
    with (
        codex_support.codex_home_outside_tmp() as home_a,
        codex_support.codex_home_outside_tmp() as home_b,
        ResponsesServer([Message(ANSWER), Message("It was PAPAYA.")]) as server,
    ):
        a, b = _codex_host(team, "build-1", server, home_a), _codex_host(team, "build-2", server, home_b)
        shown = _hand_over(team, a, b, "thread")
        on_b = server.script_requests[-1]
        thread = shown["session"]["harness_session_id"]
        assert list((home_b / "sessions").rglob(f"rollout-*-{thread}.jsonl"))  # build-2's own CODEX_HOME
    [first], [second] = a.argvs(), b.argvs()
    assert "resume" not in first and thread and _resumed(second, "resume") == thread
    sent = json.dumps(on_b.body["input"])
    assert FIRST in sent and ANSWER in sent
    assert json.loads(on_b.headers["x-codex-turn-metadata"])["history_initialization"] == "cold_resume"


def _pi_host(team: Team, name: str, server: ScriptedServer) -> AgentHost:
    real = pi_support.pi_bin_or_skip()
    host = AgentHost(team, name, "pi", real, {"PI_OFFLINE": "1", "PI_TELEMETRY": "0"})
    pi_support.write_pi_config(host.home, server)
    host.config.write_text(
        host.config.read_text() + f'pi_provider = "{pi_support.PROVIDER}"\nmodel = "{pi_support.MODEL}"\n'
    )
    return host


def test_a_pi_session_made_on_one_worker_is_resumed_in_the_other_workers_worktree(team: Team) -> None:
    with ScriptedServer([Text(ANSWER), Text("It was PAPAYA.")]) as server:
        a, b = _pi_host(team, "build-1", server), _pi_host(team, "build-2", server)
        shown = _hand_over(team, a, b, "pi-secret")
    [first], [second] = a.argvs(), b.argvs()
    sid = shown["session"]["harness_session_id"]
    assert "--session" not in first and sid and _resumed(second, "--session") == sid
    on_b = server.script_requests[-1]
    assert any(FIRST in t for t in on_b.texts(role="user")) and ANSWER in on_b.texts(role="assistant")
    [kept] = (b.home / ".pi" / "agent" / "sessions").glob(f"*/*_{sid}.jsonl")
    header = json.loads(kept.read_text().splitlines()[0])
    assert header["cwd"] == os.path.realpath(shown["lease"]["worktree"])  # build-2's worktree, where Pi runs it
