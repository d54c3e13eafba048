"""Every process corral's shell starts belongs to the caller's turn: it ends with the turn, however the turn ends.

Each case is a hostile agent under bubblewrap: a shell script on the ``command`` harness that hands
the test its door (the URL and token corral gave it, written in its worktree) and holds its turn
while the test calls corral's ``bash`` tool as that agent. The commands escape as a process can:
a background sleeper, one that calls ``setsid``, one double-forked with its environment cleared
(``env -i``: no tag of the turn's left on it), and one that waits for the turn to end to commit on
the task's branch. The turn then ends normally, by ``corral stop``, by its supervisor's death
(SIGKILL) or at the watchdog; what the machine looks like afterwards is asserted from ``/proc``
and the repository: no process of any of those commands remains, nothing moved the branch, and
the turn's token is refused. A call whose agent has already exited (the supervisor still
checking the turn) never runs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from corral.engine import daemons
from corral.engine.operations import shell
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import quarantine
from corral.errors import AgentTokenInvalid
from tests.conftest import git
from tests.mcp_doors.conftest import Door
from tests.mcp_doors.test_http_door import call
from tests.runtime.test_sandbox import needs_bwrap
from tests.support.polling import until

pytestmark = [pytest.mark.timeout(180), needs_bwrap]

#: The agent: a commit of its own, its door where the test can read it (the worktree), then its turn held
#: until released.
AGENT = """#!/bin/sh
echo work > work.txt && git add work.txt && git -c user.name=a -c user.email=a@b commit -qm work
printf '%s\\n%s\\n' "$CORRAL_MCP_URL" "$CORRAL_AGENT_TOKEN" > .door.tmp && mv .door.tmp .door
until [ -e .release ]; do sleep 0.05; done
rm -f .door .release
echo "held and released"
"""

#: A named copy of a program inside the sandbox's private /tmp: each process of a command then carries
#: the test's unique marker in its command line, where a scan of /proc finds it whatever its environment.
NAMED = 'ln -s "$(command -v {program})" "$TMPDIR/{mark}"'


def escapes(marks: dict[str, str], repo: Path) -> dict[str, str]:
    """The commands, by what they try; each holds its call open until it is ended (``exec`` of a sleeper)."""
    hold = 'exec "$TMPDIR/{mark}" 599'
    late = (
        f"until [ -e {repo}/turn-ended ]; do sleep 0.1; done; sleep 2; echo late > late.txt; "
        "git add late.txt; git -c user.name=a -c user.email=a@b commit -qm late; "
        "git update-ref refs/heads/corral/linger HEAD~1"
    )
    return {
        "background": f"{NAMED.format(program='sleep', mark=marks['background'])}; "
        f'"$TMPDIR/{marks["background"]}" 600 >/dev/null 2>&1 & ' + hold.format(mark=marks["background"]),
        "setsid": f"{NAMED.format(program='sleep', mark=marks['setsid'])}; "
        f'setsid -f "$TMPDIR/{marks["setsid"]}" 600 >/dev/null 2>&1; ' + hold.format(mark=marks["setsid"]),
        "cleared": f"{NAMED.format(program='sleep', mark=marks['cleared'])}; "
        f'env -i /bin/sh -c \'"$0" 600 >/dev/null 2>&1 &\' "$TMPDIR/{marks["cleared"]}"; '
        + hold.format(mark=marks["cleared"]),
        "late": f'{NAMED.format(program="sh", mark=marks["late"])}; exec "$TMPDIR/{marks["late"]}" -c {_quoted(late)}',
    }


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def marked(marks: dict[str, str]) -> dict[str, list[int]]:
    """The live processes whose command line carries each marker (zombies are gone already)."""
    found: dict[str, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                line = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b") ", 1)[1][:1]
        except (OSError, IndexError):
            continue
        if state in (b"Z", b"X"):
            continue
        for what, mark in marks.items():
            if mark.encode() in line:
                found.setdefault(what, []).append(int(entry.name))
    return found


def sleepers(marks: dict[str, str]) -> set[str]:
    """Which commands have their sleepers (and the late committer) running: the processes named by the marker."""
    running = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    argv0 = fh.read().split(b"\0", 1)[0]
            except OSError:
                continue
            running |= {what for what, mark in marks.items() if argv0.endswith(mark.encode())}
    return running


class Turn:
    """A confined turn of ``linger`` whose agent holds; the test calls corral's shell as that agent."""

    def __init__(self, door: Door, repo: Path) -> None:
        self.door, self.repo = door, repo
        self.calls: dict[str, dict[str, Any]] = {}
        door.cli.ok("create", "Linger", "--ref", "linger")
        door.cli.ok("start", "linger")
        self.task_id = door.cli.json("show", "linger")["task"]["id"]
        proj = Project.open(repo)
        try:
            self.worktree = proj.paths.worktree("linger")
            self.protocol = proj.paths.protocol_dir(self.task_id)
        finally:
            proj.close()
        door_file = self.worktree / ".door"
        found: str = until(lambda: door_file.read_text() if door_file.exists() else "")
        self.url, self.token = found.split()

    def bash(self, what: str, command: str) -> threading.Thread:
        """corral's shell called as the turn's agent, in a thread of its own (it returns when its command ends)."""

        def run() -> None:
            try:
                result = call(self.url, self.token, "bash", {"command": command, "timeout_seconds": 500})
                self.calls[what] = {"is_error": result.is_error, "doc": result.structured_content}
            except BaseException as exc:  # the endpoint went away: noted, and the assertion names it
                self.calls[what] = {"failed": repr(exc)}

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def status(self) -> str:
        return str(self.door.cli.json("show", "linger")["task"]["status"])

    def reaped(self) -> str:
        """The command lines the turn's receipt names as reaped (what corral ended when the turn ended)."""
        agent_turns = [t for t in self.door.cli.json("show", "linger")["turns"] if t["role"] == "agent"]
        return " ".join(r["command"] for r in agent_turns[-1]["details"].get("reaped", []))

    def supervisor(self) -> proto.SupervisorStatus:
        status = proto.read_record(self.protocol / proto.STATUS, proto.SupervisorStatus)
        assert status is not None
        return status


@pytest.fixture
def confined_door(door: Door, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Door]:
    """The agent door with turns confined (``sandbox = bwrap``) and :data:`AGENT` as their agent."""
    agent = tmp_path / "agent-bin" / "holder"
    agent.parent.mkdir()
    agent.write_text(AGENT)
    agent.chmod(0o755)
    monkeypatch.setenv("CORRAL_SANDBOX", "bwrap")
    monkeypatch.setenv("CORRAL_AUTO_RESUME", "0")
    monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "120")
    monkeypatch.setenv("CORRAL_COMMAND", str(agent))
    yield door


def end_turn(turn: Turn, how: str) -> None:
    if how == "ends":
        (turn.worktree / ".release").write_text("")
    elif how == "stopped":
        turn.door.cli.ok("stop", "linger")
    elif how == "supervisor-killed":
        os.kill(turn.supervisor().pid, signal.SIGKILL)
    # the watchdog's: the agent says nothing, and the watchdog ends it (then its one relaunch)
    until(lambda: turn.status() != "working", timeout=60, what="the turn to be recorded")


@pytest.mark.parametrize("how", ["ends", "stopped", "supervisor-killed", "watchdog"])
def test_what_corrals_shell_started_ends_with_the_turn(
    confined_door: Door, repo: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "watchdog":
        monkeypatch.setenv("CORRAL_WATCHDOG_TIMEOUT", "8")
    turn = Turn(confined_door, repo)
    marks = {what: f"lingers-{what}-{uuid.uuid4().hex[:12]}" for what in ("background", "setsid", "cleared", "late")}
    threads = [turn.bash(what, command) for what, command in escapes(marks, repo).items()]
    until(lambda: sleepers(marks) == set(marks), timeout=60, what="every command's sleepers to run")
    assert not turn.calls  # every call is in flight: its command runs

    end_turn(turn, how)
    if how == "supervisor-killed":  # nobody was there to end them in the turn: corral finds them after it
        until(lambda: not marked(marks), timeout=30, what=f"the turn's commands to end: {marked(marks)}")
    assert not marked(marks), "a command of corral's shell outlived its turn"
    for thread in threads:
        thread.join(10)
    assert set(turn.calls) == set(marks)
    for what, answer in turn.calls.items():  # each call came back saying its command ended with the turn
        assert "doc" in answer and answer["doc"]["ended_with_turn"] is True, (what, answer)
        assert answer["doc"]["exit_code"] is None and not answer["doc"]["timed_out"]

    # the late committer would have committed two seconds after the turn ended, then put the branch back
    # a commit: the branch never moves
    tip = git(repo, "rev-parse", "refs/heads/corral/linger")
    (repo / "turn-ended").write_text("")
    time.sleep(4)
    assert git(repo, "rev-parse", "refs/heads/corral/linger") == tip
    assert "late" not in git(repo, "log", "--format=%s", "refs/heads/corral/linger")
    assert not (turn.worktree / "late.txt").exists()

    # the turn's token died with it: the door refuses it before any tool, corral's shell included, runs
    gone = httpx2.post(
        turn.url,
        headers={"Authorization": f"Bearer {turn.token}", "Accept": "application/json, text/event-stream"},
        json=_bash_request("touch after.txt"),
    )
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "agent-token-invalid"
    assert not (turn.worktree / "after.txt").exists()


def test_what_corrals_shell_started_is_gone_before_its_turn_is_recorded(confined_door: Door, repo: Path) -> None:
    # The daemon that runs the calls is frozen while the turn ends: its own watch of the agent cannot
    # end their commands, so the turn's end must, before anything reads the turn as over.
    turn = Turn(confined_door, repo)
    marks = {what: f"recorded-{what}-{uuid.uuid4().hex[:12]}" for what in ("background", "setsid", "cleared", "late")}
    threads = [turn.bash(what, command) for what, command in escapes(marks, repo).items()]
    until(lambda: sleepers(marks) == set(marks), timeout=60, what="every command's sleepers to run")
    daemon = daemons.state(Path(os.environ["CORRAL_HOME"])).pid
    assert daemon is not None
    os.kill(daemon, signal.SIGSTOP)
    try:
        (turn.worktree / ".release").write_text("")
        until(lambda: turn.status() != "working", timeout=60, what="the turn to be recorded")
        left = marked(marks)
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert not left, f"a command of corral's shell outlived its recorded turn: {left}"
    for thread in threads:
        thread.join(10)
    for what, answer in turn.calls.items():  # the daemon, woken, tells each call its command ended with the turn
        assert "doc" in answer and answer["doc"]["ended_with_turn"] is True, (what, answer)
    reaped = turn.reaped()
    assert all(mark in reaped for mark in marks.values()), reaped  # the turn's receipt names them


def test_what_corrals_shell_started_dies_with_the_daemon_that_ran_it(confined_door: Door, repo: Path) -> None:
    turn = Turn(confined_door, repo)
    marks = {what: f"orphaned-{what}-{uuid.uuid4().hex[:12]}" for what in ("background", "setsid", "cleared", "late")}
    for what, command in escapes(marks, repo).items():
        turn.bash(what, command)
    until(lambda: sleepers(marks) == set(marks), timeout=60, what="every command's sleepers to run")
    daemon = daemons.state(Path(os.environ["CORRAL_HOME"]))
    assert daemon.pid is not None
    os.kill(daemon.pid, signal.SIGKILL)  # a crash of the process that ran them: their sandboxes die with it
    until(lambda: not marked(marks), timeout=30, what=f"the daemon's commands to end: {marked(marks)}")
    (turn.worktree / ".release").write_text("")
    until(lambda: turn.status() != "working", timeout=60, what="the turn to be recorded")
    tip = git(repo, "rev-parse", "refs/heads/corral/linger")
    (repo / "turn-ended").write_text("")
    time.sleep(4)
    assert git(repo, "rev-parse", "refs/heads/corral/linger") == tip
    assert not (turn.worktree / "late.txt").exists()


def _bash_request(command: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command}},
    }


def test_a_call_after_the_agent_exited_is_refused_before_it_runs(
    confined_door: Door, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the supervisor holds its turn in the post-turn check, after the agent exited: the token still
    # stands (the turn is not recorded yet), and the turn's quarantine is about to be settled
    monkeypatch.setenv("CORRAL_POST_TURN_CHECK", f"until [ -e {repo}/checked ]; do sleep 0.1; done")
    turn = Turn(confined_door, repo)
    (turn.worktree / ".release").write_text("")
    until(lambda: turn.supervisor().phase == "check", timeout=60, what="the post-turn check")
    refused = call(
        turn.url, turn.token, "bash", {"command": "echo late > late.txt && git add late.txt && git commit -qm late"}
    )
    assert refused.is_error, refused.structured_content
    assert refused.structured_content["error"]["code"] == "agent-token-invalid"
    assert "ended" in refused.structured_content["error"]["message"]
    # past that check (a call that passed it as the agent exited), the command is spawned held and
    # ended before bwrap runs any of it: the agent is not seen alive after the spawn
    proj = Project.open(repo)
    try:
        command = proto.read_record(turn.protocol / proto.COMMAND, proto.Command)
        with proj.store.read() as tx:
            task = tx.get_task(turn.task_id)
        assert command is not None and task is not None
        assert quarantine.path_for(repo / ".git", command.command_id).is_dir()  # not settled yet: it is spawned
        with pytest.raises(AgentTokenInvalid, match="ended"):
            shell.run(shell.OwnTurn(proj, task, command), "touch ran-anyway", {}, 30)
    finally:
        proj.close()
    assert not (turn.worktree / "ran-anyway").exists()
    (repo / "checked").write_text("")
    until(lambda: turn.status() != "working", timeout=60, what="the turn to be recorded")
    assert not (turn.worktree / "late.txt").exists()
    assert "late" not in git(repo, "log", "--format=%s", "refs/heads/corral/linger")
    assert quarantine.leftovers(repo / ".git") == []  # the settled quarantine was never opened again
