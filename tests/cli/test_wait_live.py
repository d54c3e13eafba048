"""The live wait line through the real CLI under a pseudo-terminal: one line rewritten in place, escaped.

On a terminal, ``wait`` and ``start --wait`` show the turn as it goes (status and phase,
attempt n of m, elapsed time, the agent's last output line, a retry's reason and delay),
each update written over the last (``\\r`` and erase-line) and erased before the answer.
Off a terminal there is no live line at all.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli_turns import fake_env

ERASE = "\r\x1b[2K"
TITLE = "\x1b]0;pwned\x07"
TALKS = [
    {"init": True},
    {"text": f"reading the parser {TITLE}now"},
    {"sleep": 2.5},
    {"result": "All done."},
]


def under_pty(repo: Path, args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run corral with stdin, stdout and stderr on a pseudo-terminal; its exit status and all it wrote."""
    master, slave = pty.openpty()
    full = {**os.environ, **env, "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral", *args], cwd=repo, env=full, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed: the process is done
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, out.decode("utf-8", "replace")


def updates(text: str) -> list[str]:
    """Each state of the live line, in order (what follows an erase, up to the next one)."""
    return [piece for piece in text.split(ERASE)[1:] if piece.strip()]


@pytest.mark.slow
def test_wait_on_a_terminal_shows_one_live_line_with_the_escaped_last_output(corral, repo, tmp_path):
    env = fake_env(tmp_path, TALKS)
    corral.ok("create", "Talk", "--ref", "talk", env=env)
    corral.ok("start", "talk", env=env)
    code, text = under_pty(repo, ["wait", "talk"], env)
    assert code == 0, text
    seen = updates(text)
    assert seen, text
    *lines, answer = seen
    assert all("\n" not in line for line in lines), lines  # one line, rewritten in place, never a second
    live = [line for line in lines if line.startswith("working")]
    assert live, seen
    assert any("attempt 1" in line for line in live), live
    assert any(r"› reading the parser \x1b]0;pwned\x07now" in line for line in live), live  # escaped
    assert TITLE not in text  # the title sequence never reached the terminal
    assert all(re.search(r" · \d+:\d\d( · |$)", line) for line in live), live  # the elapsed time, m:ss
    # the answer comes after the line is erased, on a clean line
    assert answer.startswith("talk is blocked — waiting for you.") and "All done." in answer


@pytest.mark.slow
def test_start_wait_shows_it_too_and_off_a_terminal_there_is_none(corral, repo, tmp_path):
    env = fake_env(tmp_path, TALKS, TALKS)
    corral.ok("create", "Talk", "--ref", "talk", env=env)
    code, text = under_pty(repo, ["start", "talk", "--wait"], env)
    assert code == 0, text
    assert any(s.startswith("working") and "attempt 1" in s for s in updates(text)), text

    corral.ok("create", "Quiet", "--ref", "quiet", env=env)
    piped = corral("start", "quiet", "--wait", env=env)
    assert piped.returncode == 0, piped.stderr
    for stream in (piped.stdout, piped.stderr):
        assert "\r" not in stream and "\x1b[2K" not in stream
    assert "quiet is blocked — waiting for you." in piped.stdout

    # with --json on a terminal, stdout is the one document and no live line is drawn
    corral.ok("create", "Json", "--ref", "json-task", env=env)
    code, text = under_pty(repo, ["start", "json-task", "--wait", "--json"], env)
    assert code == 0 and ERASE not in text
    assert json.loads(text[text.index("{") :])["task"]["status"] == "blocked"


@pytest.mark.slow
def test_a_retry_shows_its_reason_attempt_of_budget_and_next_delay(corral, repo, tmp_path):
    fails = [{"stderr": "socket closed by peer\n"}, {"exit": 1}]
    # The person's crash-loop window at its least: the failure is not a fast one (those retry after
    # 1 s and 2 s, tests/turns/test_time_to_rest.py) but takes the unknown ladder, whose first step is 15 s.
    env = {**fake_env(tmp_path, fails, TALKS), "CORRAL_CRASH_LOOP_WINDOW": "0.001"}
    corral.ok("create", "Retry", "--ref", "retry", env=env)
    corral.ok("start", "retry", env=env)
    code, text = under_pty(repo, ["wait", "retry", "--timeout", "6"], env)
    assert code == 124, text  # still retrying (the next attempt is 15 s away)
    retrying = [s for s in updates(text) if "retrying" in s]
    assert retrying, text
    line = retrying[-1]
    assert line.startswith("working (retrying)") and "attempt 2 of 6" in line
    assert "retrying: attempt 1 (unknown): " in line  # as list and show say it
    # corral's own schedule: the next attempt's clock time and what is left of the ladder's 15 s step.
    due = re.search(r"next attempt at \d\d:\d\d:\d\d \(in (\d+)s\)", line)
    assert due is not None and 0 < int(due.group(1)) <= 15, line
    assert "the ladder's waits left: " in line
    assert "socket closed by peer" in line
    corral.ok("stop", "retry", env=env)
