"""Whatever corral writes into git is made from safe text: an agent's NUL never blocks accept.

An agent's last message is the body of the squash commit. Here the agent (the scripted
one, and a program run by the ``command`` harness) ends with a NUL byte, an ESC screen
clear, an OSC title, a bidi override and a C1 control; ``corral accept`` must succeed, and
what lands in git — the commit message, the target's reflog, the archive ref's reflog —
holds none of those bytes, only their visible escapes. The exact text stays in the store.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from corral.domain import gittext
from tests.conftest import git

HOSTILE = "Done.\x00 then \x1b[2J\x1b]0;pwned\x07 title \u202eevil\u202c \x9b31m end"
#: The controls a terminal or git would act on; none may reach git.
FORBIDDEN = ["\x00", "\x1b", "\x07", "\u202e", "\u202c", "\x9b"]


def raw(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True).stdout


def assert_safe_in_git(repo: Path, ref: str) -> str:
    """The squash commit and the reflogs of the target and the archive: no forbidden byte; returns the body."""
    body = raw(repo, "log", "-1", "--format=%B", "main").decode("utf-8")
    for bad in FORBIDDEN:
        assert bad not in body, (bad, body)
    assert "Done.\\x00 then \\x1b[2J\\x1b]0;pwned\\x07 title \\u202eevil\\u202c \\x9b31m end" in body
    trailers = git(repo, "log", "-1", "--format=%(trailers:key=Corral-Task,valueonly)", "main")
    assert trailers, body  # the trailers survive after the escaped text
    logs = [
        raw(repo, "reflog", "show", "--format=%gs", "main").decode("utf-8"),
        raw(repo, "reflog", "show", "--format=%gs", f"refs/corral/archive/{ref}").decode("utf-8"),
    ]
    for log in logs:
        for bad in FORBIDDEN:
            assert bad not in log, (bad, log)
    assert f"corral accept {ref}: " in logs[0]
    assert f"corral: corral/{ref} archived before accept: " in logs[1]
    return body


def test_an_agent_message_with_nul_and_escapes_never_blocks_accept(corral, agent, repo):
    agent.script(
        [
            {"init": True},
            {"write": {"path": "work.txt", "content": "the work\n"}},
            {"commit": "work"},
            {"result": HOSTILE},
        ]
    )
    corral.ok("create", "Goal with \x1b]0;title\x07 inside", "--ref", "hostile")
    corral.ok("start", "hostile", "--wait")
    shown = corral.json("show", "hostile")
    assert shown["task"]["status"] == "blocked"
    assert shown["turns"][-1]["content"] == HOSTILE  # the store keeps the exact text

    accepted = corral("accept", "hostile", "--json")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    result = json.loads(accepted.stdout.splitlines()[-1])
    assert result["task"]["status"] == "complete"
    body = assert_safe_in_git(repo, "hostile")
    assert "Goal with \\u001b]0;title\\u0007 inside" in body  # the goal was escaped at intake already
    assert (repo / "work.txt").read_text() == "the work\n"


def test_a_command_harness_whose_last_line_has_a_nul_is_accepted(corral, repo, tmp_path):
    program = tmp_path / "agent.py"
    program.write_text(
        "import subprocess, sys\n"
        "open('work.txt', 'w').write('the work\\n')\n"
        "subprocess.run(['git', 'add', 'work.txt'], check=True)\n"
        "subprocess.run(['git', 'commit', '-q', '-m', 'work'], check=True)\n"
        f"sys.stdout.buffer.write({HOSTILE.encode('utf-8')!r} + b'\\n')\n"
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    env = {"CORRAL_HARNESS": "command", "CORRAL_COMMAND": f"{sys.executable} {program}"}
    corral.ok("create", "Work from a command", "--ref", "cmd", env=env)
    corral.ok("start", "cmd", "--wait", env=env)
    shown: dict[str, Any] = corral.json("show", "cmd", env=env)
    assert shown["task"]["status"] == "blocked", shown
    assert "\x00" in shown["turns"][-1]["content"]  # the NUL did reach corral's store, exactly
    accepted = corral("accept", "cmd", env=env)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert_safe_in_git(repo, "cmd")


def test_git_text_escapes_caps_and_keeps_one_line_reflogs():
    assert gittext.message("a\x00b\r\nc\td") == "a\\x00b\nc\td"
    capped = gittext.message("é" * 10, cap=5)
    assert capped.startswith("éé\n[corral: 16 more bytes not shown here")
    assert gittext.reflog("one\ntwo\x1b[1m  three\x0b") == "one two\\x1b[1m three\\x0b"
    assert len(gittext.reflog("x" * 1000)) == gittext.REFLOG_CAP
