"""The daemon is never a surprise: a command that starts it says so once, and ``daemon start`` when one
runs answers with its pid (exit 0), as the README promises."""

from __future__ import annotations

from typing import Any

from corral.engine import daemons

SAID = "started the corral daemon (pid {pid}): it serves the agents' tools and resumes crashed turns; " + (
    "`corral daemon stop` stops it"
)


def test_a_start_that_launches_the_daemon_says_so_once_on_stderr(door: Any) -> None:
    corral = door.cli
    door.script({"*": [{"write": ["x.txt", "x\n"]}, {"commit": "x"}]})
    corral.ok("create", "First", "--ref", "first")
    corral.ok("create", "Second", "--ref", "second")
    assert not daemons.state().running
    first = corral.ok("start", "first", "--wait")
    pid = daemons.state().pid
    assert pid is not None
    assert first.stderr.count(SAID.format(pid=pid)) == 1, first.stderr
    assert "daemon" not in first.stdout  # the answer stays the command's own
    # The next launch finds it running: nothing to say.
    second = corral.ok("start", "second", "--wait")
    assert "daemon" not in second.stderr and daemons.state().pid == pid


def test_json_carries_the_start_as_a_field(door: Any) -> None:
    corral = door.cli
    door.script({"*": [{"write": ["x.txt", "x\n"]}, {"commit": "x"}]})
    corral.ok("create", "First", "--ref", "first")
    done = corral("start", "first", "--json")
    assert done.returncode == 0, done.stderr
    pid = daemons.state().pid
    assert done.json()["daemon_started"] == {"pid": pid, "message": SAID.format(pid=pid)}
    assert "daemon" not in done.stderr
    corral.ok("wait", "first")


def test_daemon_start_twice_answers_the_running_pid_with_exit_0(door: Any) -> None:
    corral = door.cli
    first = corral("daemon", "start")
    assert first.returncode == 0, first.stderr
    pid = daemons.state().pid
    assert first.stdout.splitlines()[0] == SAID.format(pid=pid)
    again = corral("daemon", "start")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"the corral daemon already runs (pid {pid})"
    doc = corral.json("daemon", "start")
    assert doc["started"] is False and doc["daemon"]["pid"] == pid and doc["daemon"]["running"] is True
    assert daemons.state().pid == pid  # the same daemon all along


def test_the_dashboard_that_starts_the_daemon_says_so_once(door: Any) -> None:
    corral = door.cli
    first = corral("dashboard")
    assert first.returncode == 0, first.stderr
    pid = daemons.state().pid
    assert first.stderr.count(SAID.format(pid=pid)) == 1, first.stderr
    assert first.stdout.startswith("http")  # stdout stays the URL a script reads
    again = corral("dashboard")
    assert again.returncode == 0 and "daemon" not in again.stderr
    doc = corral.json("dashboard")
    assert "daemon_started" not in doc
