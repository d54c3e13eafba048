"""Logs that diagnose, through the real CLI with a real agent process (a shell script run by the
``command`` harness): stderr interleaved with stdout in the order written, each stderr line
marked, attempts separated by a header, exactly the turns that have output, an old turn
without an index, a failing attempt then its retry, and ``logs -f`` following a crashed turn
into the turn its auto-resume starts, ending with a footer that says how the turn ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import state_paths

#: One script for every test: $MODE picks what it does; $COUNTER numbers its invocations.
SCRIPT = r"""#!/bin/sh
n=1
if [ -n "$COUNTER" ]; then
  [ -f "$COUNTER" ] && n=$(( $(cat "$COUNTER") + 1 ))
  echo "$n" > "$COUNTER"
fi
case "$MODE" in
  interleave)
    echo "out 1"; sleep 0.1
    echo "err 1" >&2; sleep 0.1
    echo "out 2"; sleep 0.1
    echo "err 2" >&2; sleep 0.1
    printf 'half '; sleep 0.1
    echo "err 3" >&2; sleep 0.1
    echo "line"
    ;;
  silent) ;;
  retry)
    echo "try $n"
    if [ "$n" = 1 ]; then echo "429 rate limit exceeded" >&2; exit 1; fi
    ;;
  crash)
    if [ "$n" = 1 ]; then echo "before the crash"; echo "dying" >&2; sleep 0.5; kill -KILL $$; fi
    echo "after the resume"
    ;;
esac
exit 0
"""


@pytest.fixture
def agent_env(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "agent.sh"
    script.write_text(SCRIPT)
    return {
        "CORRAL_HARNESS": "command",
        "CORRAL_COMMAND": f"sh {script}",
        "CORRAL_WATCHDOG_TIMEOUT": "600",
        "COUNTER": str(tmp_path / "count"),
        "TZ": "Asia/Tokyo",
    }


def turn_dir(corral, task_id: str, seq: int, env) -> Path:
    return Path(state_paths(corral, env=env)["tasks"]) / task_id / "turns" / str(seq)


def started(corral, ref: str, env, *, wait: bool = True) -> str:
    task = corral.json("create", f"Logs {ref}", "--ref", ref, env=env)["task"]
    corral.ok("start", ref, *(["--wait"] if wait else []), env=env)
    return str(task["id"])


def follow(corral, *args: str, env, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", "logs", "-f", *args],
        cwd=corral.cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_stderr_is_interleaved_with_stdout_in_order_and_marked_with_an_attempt_header(corral, agent_env):
    env = {**agent_env, "MODE": "interleave"}
    started(corral, "mixed", env)
    text = corral.ok("logs", "mixed", env=env).stdout.splitlines()
    assert text[0].startswith("══ turn 1 · start · started ") and text[0].endswith(" JST")
    assert text[1].startswith("── attempt 1 · started ") and text[1].endswith(" JST · exit 0 · succeeded")
    assert text[2:] == [
        "› out 1",
        "err│ err 1",
        "› out 2",
        "err│ err 2",
        "err│ err 3",  # written while "half " waited for its line's end
        "› half line",
        "── turn 1 ended: completed · mixed is blocked",
    ]

    events = [json.loads(line) for line in corral.ok("logs", "mixed", "--json", env=env).stdout.splitlines()]
    assert [e["event"] for e in events] == ["turn", "attempt"] + ["line"] * 6 + ["end"]
    lines = [(e["stream"], e["text"]) for e in events if e["event"] == "line"]
    assert lines == [
        ("stdout", "out 1"),
        ("stderr", "err 1"),
        ("stdout", "out 2"),
        ("stderr", "err 2"),
        ("stderr", "err 3"),
        ("stdout", "half line"),
    ]
    assert events[1] | {"started_at": None} == {
        "event": "attempt",
        "turn": 1,
        "attempt": 1,
        "started_at": None,
        "outcome": "succeeded",
        "exit_code": 0,
        "signal": None,
        "failure_class": None,
    }
    assert events[-1]["outcome"] == "completed" and events[-1]["status"] == "blocked"
    assert all(e["at"].endswith("Z") for e in events if e["event"] == "line")
    # Times everywhere honour TZ and name the zone.
    assert " JST  " in corral.ok("show", "mixed", env=env).stdout


@pytest.mark.slow
def test_a_turn_from_before_the_index_shows_its_stdout_alone(corral, agent_env):
    env = {**agent_env, "MODE": "interleave"}
    task_id = started(corral, "old", env)
    (turn_dir(corral, task_id, 1, env) / "output.index").unlink()
    text = corral.ok("logs", "old", env=env).stdout.splitlines()
    assert text[1:4] == ["› out 1", "› out 2", "› half line"]
    assert not any("err" in line or "attempt" in line for line in text)


@pytest.mark.slow
def test_only_the_turns_that_wrote_output_are_listed(corral, agent_env):
    env = {**agent_env, "MODE": "interleave"}
    task_id = started(corral, "quiet", env)
    corral.ok("unblock", "quiet", "-m", "again, silently", "--wait", env={**env, "MODE": "silent"})
    assert turn_dir(corral, task_id, 3, env).is_dir()  # the silent turn ran, and wrote nothing
    latest = corral.ok("logs", "quiet", env=env).stdout
    assert latest.startswith("══ turn 1 ") and "› out 1" in latest
    missing = corral("logs", "quiet", "--turn", "2", "--json", env=env)  # the second exchange: the silent one
    assert missing.returncode == 4
    error = json.loads(missing.stdout.splitlines()[-1])
    assert error["event"] == "error" and error["error"]["hint"] == "Turns with output: 1"
    assert corral("logs", "quiet", "--raw", "--json", env=env).returncode == 2  # bytes or text, not both


@pytest.mark.slow
def test_a_failed_attempt_and_its_retry_each_get_a_header_and_the_follower_says_why(corral, agent_env):
    env = {**agent_env, "MODE": "retry"}
    started(corral, "retry", env, wait=False)
    followed = follow(corral, "retry", env=env)
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[1].startswith("── attempt 1 · started ")
    assert lines[2:4] == ["› try 1", "err│ 429 rate limit exceeded"]
    assert lines[4] == "── retrying: attempt 1 (transient_overload): 429 rate limit exceeded · next in 5 s"
    assert lines[5].startswith("── attempt 2 · started ")
    assert lines[6:] == [
        "› try 2",
        "── turn 1 ended: completed (attempt 1: exit 1, transient_overload; attempt 2: exit 0, succeeded)"
        " · retry is blocked",
    ]

    after = corral.ok("logs", "retry", env=env).stdout.splitlines()
    assert after[1].endswith(" · exit 1 · transient_overload")
    assert after[4].endswith(" · exit 0 · succeeded")
    assert after[-1] == "── turn 1 ended: completed · retry is blocked"  # the headers said it all
    end = json.loads(corral.ok("logs", "retry", "--json", env=env).stdout.splitlines()[-1])
    assert [(a["attempt"], a["exit_code"], a["failure_class"], a["outcome"]) for a in end["attempts"]] == [
        (1, 1, "transient_overload", "failed"),
        (2, 0, None, "succeeded"),
    ]


@pytest.mark.slow
def test_follow_goes_on_into_the_auto_resumed_turn_and_ends_with_how_it_ended(corral, agent_env):
    env = {**agent_env, "MODE": "crash"}
    started(corral, "crashy", env, wait=False)
    followed = follow(corral, "crashy", env=env)
    assert followed.returncode == 0, followed.stderr
    lines = followed.stdout.splitlines()
    assert lines[0].startswith("══ turn 1 · start · ")
    assert lines[1].startswith("── attempt 1 · started ")
    assert lines[2:4] == ["› before the crash", "err│ dying"]
    assert lines[4].startswith("── turn 1 ended: error — ")
    # Numbered as show numbers them: the crash ended exchange 1, the auto-resume is exchange 2.
    assert lines[4].endswith(" (attempt 1: exit 137, signal 9, failed) · crashy is working · auto-resumed as turn 2")
    assert lines[5].startswith("══ turn 2 · auto-resume · started ")
    assert lines[6].startswith("── attempt 1 · started ")
    assert lines[7] == "› after the resume"
    assert lines[8] == "── turn 2 ended: completed (attempt 1: exit 0, succeeded) · crashy is blocked"
    assert len(lines) == 9

    out = corral.ok("logs", "crashy", "--turn", "1", "--json", env=env).stdout
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["outcome"] == "error" and events[-1]["next_turn"] is None  # not following: no next turn
