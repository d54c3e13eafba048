"""Test seam 2: a session the real harness made on one host, carried as corral carries it, resumed on another.

Each host is a HOME (and for Codex a ``CODEX_HOME``) and a worktree at another path. Host A runs a
turn; its session's files are named by the adapter (``Harness.session_files``), made ready for host
B (``Harness.carried``) and written where B's harness looks (``sessions.install``); host A's worktree
and home are then removed, as a dead host's are out of reach. Host B resumes the same id, and its
model request holds the conversation host A had: the transcript travelled, and nothing of host A's
paths was needed. What each harness needs is docs/harnesses.md#sessions-across-hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.harness.base import Harness, TurnRequest
from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.codex import CodexHarness
from corral.adapters.harness.pi import PiHarness
from corral.adapters.harness.sessions import install
from tests.support import codex as codex_support
from tests.support import pi as pi_support
from tests.support.claude import claude_env, run_claude
from tests.support.model_server import Text, scripted_server
from tests.support.responses_server import Message, responses_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FIRST = "Remember the secret word: PAPAYA."
ANSWER = "Noted: the secret word is PAPAYA."


def _worktree(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


def _carry(
    harness: Harness, session_id: str, a: tuple[Mapping[str, str], Path], b: tuple[Mapping[str, str], Path]
) -> list[str]:
    """Host A's files of the session, installed on host B as corral carries them; their names."""
    made = harness.session_files(a[0], a[1], session_id)
    assert made is not None and made.names, made
    carried = {}
    for name in made.names:
        data = harness.carried(name, (made.place / name).read_bytes(), b[1], session_id)
        assert data is not None, name
        carried[name] = data
    here = harness.session_files(b[0], b[1], session_id)
    assert here is not None
    install(here, carried)
    return list(made.names)


def _texts(body: Any) -> str:
    return json.dumps(body)


def test_claude_code_resumes_a_carried_session_from_another_worktree_and_home(claude: Path, tmp_path: Path) -> None:
    wt_a, wt_b = _worktree(tmp_path / "a" / "wt"), _worktree(tmp_path / "b" / "srv" / "clone" / "wt")
    home_a, home_b = tmp_path / "a" / "home", tmp_path / "b" / "home"
    with scripted_server([Text(ANSWER), Text("It was PAPAYA.")]) as server:
        env_a = claude_env(server, home_a, extra={"CLAUDE_CODE_MAX_RETRIES": None})
        first = run_claude(FIRST, cwd=wt_a, env=env_a, timeout=60)
        assert first.returncode == 0 and first.session_id, first.describe()
        sid = first.session_id
        names = _carry(ClaudeHarness(), sid, ({"HOME": str(home_a)}, wt_a), ({"HOME": str(home_b)}, wt_b))
        assert names[0] == f"{sid}.jsonl"
        shutil.rmtree(tmp_path / "a")
        env_b = claude_env(server, home_b, extra={"CLAUDE_CODE_MAX_RETRIES": None})
        second = run_claude("What was the secret word?", cwd=wt_b, env=env_b, timeout=60, resume=sid)
    assert second.returncode == 0 and second.session_id == sid, second.describe()
    assert second.init is not None and second.init["cwd"] == os.path.realpath(wt_b)  # it runs where it is started
    resumed = server.script_requests[-1]
    assert FIRST in resumed.texts(role="user") and ANSWER in resumed.texts(role="assistant")
    assert resumed.headers["x-claude-code-session-id"] == sid


def test_codex_resumes_a_carried_thread_from_another_codex_home(tmp_path: Path) -> None:
    codex = codex_support.codex_bin_or_skip()
    wt_a, wt_b = _worktree(tmp_path / "a" / "wt"), _worktree(tmp_path / "b" / "srv" / "clone" / "wt")
    with (
        codex_support.codex_home_outside_tmp() as codex_a,
        codex_support.codex_home_outside_tmp() as codex_b,
        responses_server([Message(ANSWER), Message("It was PAPAYA.")]) as server,
    ):
        harness = CodexHarness(executable=str(codex), extra=codex_support.codex_config_args(server))
        env_a = codex_support.codex_env(tmp_path / "a" / "home", codex_a)
        first = pi_support.run_turn(harness, TurnRequest(FIRST, str(wt_a), model=codex_support.MODEL), env=env_a)
        assert first.returncode == 0 and first.session_id, first.describe()
        thread = first.session_id
        names = _carry(harness, thread, ({"CODEX_HOME": str(codex_a)}, wt_a), ({"CODEX_HOME": str(codex_b)}, wt_b))
        assert names[0].startswith(tuple("0123456789")) and names[0].endswith(f"-{thread}.jsonl")
        shutil.rmtree(tmp_path / "a")
        shutil.rmtree(codex_a)
        env_b = codex_support.codex_env(tmp_path / "b" / "home", codex_b)
        request = TurnRequest("What was the secret word?", str(wt_b), model=codex_support.MODEL, resume_id=thread)
        second = pi_support.run_turn(harness, request, env=env_b)
    assert second.returncode == 0 and second.session_id == thread, second.describe()
    resumed = server.script_requests[-1]
    assert FIRST in _texts(resumed.body["input"]) and ANSWER in _texts(resumed.body["input"])
    assert json.loads(resumed.headers["x-codex-turn-metadata"])["history_initialization"] == "cold_resume"


def test_pi_resumes_a_carried_session_in_the_worktree_of_the_host_that_took_it(tmp_path: Path) -> None:
    pi = pi_support.pi_bin_or_skip()
    wt_a, wt_b = _worktree(tmp_path / "a" / "wt"), _worktree(tmp_path / "b" / "srv" / "clone" / "wt")
    home_a, home_b = tmp_path / "a" / "home", tmp_path / "b" / "home"
    harness = PiHarness(executable=str(pi), provider=pi_support.PROVIDER)
    with scripted_server([Text(ANSWER), Text("It was PAPAYA.")]) as server:
        pi_support.write_pi_config(home_a, server)
        pi_support.write_pi_config(home_b, server)
        first = pi_support.run_turn(
            harness, TurnRequest(FIRST, str(wt_a), model=pi_support.MODEL), env=pi_support.pi_env(home_a)
        )
        assert first.returncode == 0 and first.session_id, first.describe()
        sid = first.session_id
        _carry(harness, sid, ({"HOME": str(home_a)}, wt_a), ({"HOME": str(home_b)}, wt_b))
        # Host A's worktree is gone: Pi would refuse a header that still named it ("Stored session
        # working directory does not exist"), and would run its tools there if it existed.
        shutil.rmtree(tmp_path / "a")
        request = TurnRequest("What was the secret word?", str(wt_b), model=pi_support.MODEL, resume_id=sid)
        second = pi_support.run_turn(harness, request, env=pi_support.pi_env(home_b))
    assert second.returncode == 0 and second.session_id == sid, second.describe()
    assert second.lines[0]["cwd"] == os.path.realpath(wt_b)
    resumed = server.script_requests[-1]
    assert FIRST in resumed.texts(role="user") and ANSWER in resumed.texts(role="assistant")
