"""People on several hosts who run their turns on their own machines (``dispatch = local``) against one shared
store (docs/workers.md#turns-run-on-your-own-host): a turn, a pair, an accept is judged by the host that runs it
and by no other; a stop asked elsewhere is relayed through the store; the daemon serves a PostgreSQL project.

Every host is a real clone with its own HOME and CORRAL_HOME (tests/workers/team.py), each running the real
``corral`` as processes; the other host's passes (``list``, ``show``, its daemon) run past their grace period.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import until
from tests.workers.conftest import Team
from tests.workers.team import Host, alive, work

pytestmark = pytest.mark.slow

#: The other host's grace period: its passes run well past it while the turn runs on its own host.
GRACE = 2.0
AGENT = Path(__file__).resolve().parents[1] / "support" / "mcp_agent.py"


def local(team: Team, name: str, **settings: Any) -> Host:
    """A person's host: its turns run here (the default ``dispatch = local``), on the team's shared store."""
    return team.host(name, grace_period=GRACE, **settings)


def held(host: Host, hold: Path) -> list[dict[str, Any]]:
    """An agent's turn that works on (alive, keeping alive) until ``hold`` is removed, then writes and commits."""
    hold.touch()
    return work("long.txt", then=[{"hold": str(hold)}])


def row(host: Host, ref: str) -> dict[str, Any]:
    (found,) = [r for r in host.json("list", "--all")["tasks"] if r["ref"] == ref]
    return found


def stored(team: Team, ref: str) -> tuple[str, int]:
    """The task's status and its count of agent turns, read from the shared store itself (no reconcile pass)."""
    with team.sql() as conn:
        found = conn.execute(
            "SELECT t.status, (SELECT COUNT(*) FROM turns a WHERE a.task_id = t.id AND a.role = 'agent') "
            "FROM tasks t WHERE t.ref = %s",
            (ref,),
        ).fetchone()
    assert found is not None
    return str(found[0]), int(found[1])


def supervisor_of(host: Host) -> int:
    """The pid of the one supervisor this host runs, once its status file names it."""
    return until(lambda: (pids := host.supervisors()) and pids[0], timeout=30, poll=0.1, what="the supervisor runs")


def past_grace() -> None:
    """Let the other host's grace period run out (its passes then judge what they see as they would a lost turn)."""
    time.sleep(GRACE * 2)


def test_a_turn_run_on_its_own_host_is_left_alone_by_the_others_and_recorded_once(team: Team, tmp_path: Path) -> None:
    a, b = local(team, "laptop-a"), local(team, "laptop-b")
    hold = tmp_path / "hold"
    a.script(held(a, hold))
    a.corral("create", "Long task", "--ref", "long")
    started = a.json("start", "long")
    assert started["queued"] is False and started["supervisor_pid"]
    a.corral("daemon", "start")  # A's own passes: they ship its turn's live facts and files, and record its end
    b.corral("daemon", "start")  # B's daemon serves the project too, and must leave A's turn alone
    past_grace()

    # B reads past its grace period: A's turn is working on A, never lost (nor resumed) here.
    def read_on_b() -> dict[str, Any] | None:
        seen = row(b, "long")
        assert seen["status"] == "working" and seen["substate"] != "not-alive", seen  # never lost here
        assert b.calls() == [], "B took A's live turn for lost and ran a second agent for it"
        return seen if seen["substate"] == "agent" else None

    seen = until(read_on_b, timeout=30, poll=0.5, what="B reads the live facts A shipped")
    assert b.calls() == [], "B took A's live turn for lost and ran a second agent for it"
    assert seen["status"] == "working" and seen["host"] == "laptop-a"
    assert "working(agent) on laptop-a" in b.corral("list").stdout
    for _ in range(3):
        shown = b.json("show", "long")
        assert shown["task"]["status"] == "working" and shown["task"]["substate"] == "agent"
        assert shown["lease"]["state"] == "local" and shown["lease"]["host"] == "laptop-a"
        time.sleep(0.5)
    assert "Host:     runs on laptop-a since" in b.corral("show", "long").stdout
    assert alive(supervisor_of(a))
    # The turn ends on A: A's daemon records it, ships its files one last time and lets its lease go.
    hold.unlink()
    until(lambda: stored(team, "long")[0] == "blocked", timeout=60, poll=0.3, what="A records its turn's end")
    shown = b.json("show", "long")
    agents = [(t["kind"], t["content"]) for t in shown["turns"] if t["role"] == "agent"]
    assert agents == [("start", "wrote long.txt")], agents  # recorded once, by A; no loss recorded by anyone
    assert [c["to"] for c in shown["status_changes"]] == ["backlog", "working", "blocked"]
    until(lambda: b.json("show", "long")["lease"]["state"] == "released", timeout=30, poll=0.3, what="let go")
    assert "wrote long.txt" in b.corral("logs", "long").stdout  # its output, shipped by A, read on B
    assert len(a.calls()) == 1 and b.calls() == []


def test_a_local_turn_lost_on_its_host_is_recorded_and_resumed_there_only(team: Team, tmp_path: Path) -> None:
    a, b = local(team, "laptop-a"), local(team, "laptop-b")
    hold = tmp_path / "hold"
    hold.touch()
    a.script(work("done.txt"), first=[[{"init": True}, {"hold": str(hold)}]])
    a.corral("create", "Crashing task", "--ref", "crash")
    a.json("start", "crash")
    os.kill(supervisor_of(a), signal.SIGKILL)  # A's supervisor dies; no daemon runs on either host
    past_grace()
    for _ in range(3):  # B cannot see A's processes: it never takes the turn for lost, nor resumes it
        seen = row(b, "crash")
        assert seen["status"] == "working" and seen["host"] == "laptop-a", seen
        assert seen["substate"] == "unreported", seen  # A ships nothing while nobody there looks: never "not-alive"
        time.sleep(0.5)
    assert stored(team, "crash") == ("working", 0)
    # A's own pass finds its supervisor gone: the turn is lost (→ interrupted) and auto-resumed on A.
    until(lambda: row(a, "crash")["status"] == "blocked", timeout=60, poll=0.5, what="A resumes and finishes it")
    shown = b.json("show", "crash")
    agents = [t for t in shown["turns"] if t["role"] == "agent"]
    assert [t["kind"] for t in agents] == ["error", "auto-resume"], agents
    assert "lost" in agents[0]["content"]
    moves = [(c["to"], c["actor"]) for c in shown["status_changes"]]
    assert moves[1:4] == [("working", "human"), ("interrupted", "system"), ("working", "system")], moves
    assert moves[4:] and moves[-1][0] == "blocked" and len(moves) == 5, moves
    assert len(a.calls()) == 2 and b.calls() == []
    assert not alive(a.calls()[0]["pid"])  # the lost turn's agent was stopped on A before the resume


def test_a_pair_open_on_one_host_survives_the_other_hosts_sweep(team: Team, tmp_path: Path) -> None:
    a, b = local(team, "laptop-a"), local(team, "laptop-b")
    hold = tmp_path / "hold"
    hold.touch()
    a.script([{"init": True}, {"result": "paired"}], first=[work("first.txt"), [{"hold": str(hold)}]])
    a.corral("create", "Pair task", "--ref", "duo")
    a.json("start", "duo")
    until(lambda: row(a, "duo")["status"] == "blocked", timeout=60, poll=0.3, what="the first turn ends")
    pair = subprocess.Popen(
        [sys.executable, "-m", "corral", "pair", "duo"],
        cwd=a.clone,
        env=a.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        until(lambda: stored(team, "duo")[0] == "pairing", timeout=30, poll=0.2, what="the pair opens on A")
        b.corral("daemon", "start")
        for _ in range(4):  # B's stale-pairing sweep: no pairing lock, no such pid here, and still A's pair
            assert row(b, "duo")["status"] == "pairing"
            time.sleep(0.5)
        assert pair.poll() is None
        hold.unlink()
        assert pair.wait(30) == 0
    finally:
        if pair.poll() is None:
            os.killpg(pair.pid, signal.SIGKILL)
    shown = b.json("show", "duo")
    assert shown["task"]["status"] == "blocked"
    summary = shown["turns"][-1]
    assert summary["kind"] == "pair summary" and summary["actor"] == "human", summary  # ended by A's pair itself


def test_an_accept_in_flight_on_one_host_is_recovered_by_that_host_only(team: Team) -> None:
    a, b = local(team, "laptop-a"), local(team, "laptop-b")
    a.script(work("done.txt"))
    a.corral("create", "Accepted task", "--ref", "acc")
    a.json("start", "acc")
    until(lambda: row(a, "acc")["status"] == "blocked", timeout=60, poll=0.3, what="its turn ends")
    a.extra_env = {"CORRAL_CRASH_AT": "accept.merging"}  # A's accept dies mid-merge, its record saved
    died = a.corral("accept", "acc", check=False)
    a.extra_env = {}
    assert died.returncode == 137, died.stdout + died.stderr
    assert stored(team, "acc")[0] == "merging"
    b.corral("daemon", "start")
    for _ in range(4):  # B's stranded-merge sweep: its locks are free here, its target untouched; still A's
        assert row(b, "acc")["status"] == "merging"
        time.sleep(0.5)
    # A's own pass finds its accept dead and puts the task back (nothing had landed).
    assert row(a, "acc")["status"] == "blocked"
    last = b.json("show", "acc")["status_changes"][-1]
    assert (last["to"], last["actor"], last["reason"]) == (
        "blocked",
        "system",
        "restored after an accept died mid-merge",
    ), last


def test_a_stop_asked_on_another_host_is_relayed_by_the_host_that_runs_the_turn(team: Team, tmp_path: Path) -> None:
    a, b = local(team, "laptop-a"), local(team, "laptop-b")
    first, second = tmp_path / "first", tmp_path / "second"
    first.touch()
    second.touch()
    a.script(work("x.txt"), first=[[{"init": True}, {"hold": str(first)}], [{"init": True}, {"hold": str(second)}]])
    a.corral("create", "One", "--ref", "one")
    a.corral("create", "Two", "--ref", "two")
    a.json("start", "one")
    agent = until(lambda: a.calls() and a.calls()[0]["pid"], timeout=30, poll=0.1, what="the agent runs on A")
    # Nobody on A looks (no daemon, no command): B says so plainly, and signals nothing of A's. The
    # person on B waits 1 s for that answer (stop_wait; 15 s by default, which the stop below keeps).
    b.extra_env = {"CORRAL_STOP_WAIT": "1"}
    refused = b.corral("stop", "one", "--json", check=False)
    b.extra_env = {}
    assert refused.returncode == 1, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "stop-unanswered" and "laptop-a" in error["message"], error
    assert "did not act on the stop within 1 s" in error["message"], error
    assert alive(agent) and stored(team, "one") == ("working", 0)
    assert b.json("show", "one")["lease"]["stop_by"] == "human"
    # A's daemon starts: the stop still asked is relayed to its supervisor, as a local stop asks it.
    a.corral("daemon", "start")
    until(lambda: stored(team, "one")[0] == "blocked", timeout=30, poll=0.2, what="A relays the standing stop")
    until(lambda: not alive(agent), timeout=15, poll=0.1, what="the agent stops")
    # With A's daemon there, a stop from B returns with the turn stopped, as a local stop does.
    a.json("start", "two")
    until(lambda: len(a.calls()) == 2, timeout=30, poll=0.1, what="the second agent runs on A")
    second_agent = a.calls()[1]["pid"]
    until(lambda: row(b, "two")["substate"] == "agent", timeout=30, poll=0.3, what="B sees it running")
    stopped = b.json("stop", "two")
    assert stopped["task"]["status"] == "blocked", stopped
    until(lambda: not alive(second_agent), timeout=15, poll=0.1, what="the second agent stops")
    for ref in ("one", "two"):
        shown = b.json("show", ref)
        cause = shown["resting_cause"]
        assert (cause["code"], cause["actor"]) == ("stopped", "human"), cause
        assert [t["kind"] for t in shown["turns"] if t["role"] == "agent"] == ["stopped"], shown["turns"]
        start = next(t for t in shown["turns"] if t["role"] == "human" and t["kind"] == "start")
        assert start["feedback_delivery"] == "pending"  # the message it carried is delivered on the next turn
    assert b.calls() == []


def test_the_daemon_serves_a_postgresql_project_and_resumes_its_hosts_crashed_turn(team: Team, tmp_path: Path) -> None:
    a = local(team, "laptop-a")
    hold = tmp_path / "hold"
    hold.touch()
    a.script(work("done.txt"), first=[[{"init": True}, {"hold": str(hold)}]])
    a.corral("create", "Crashing task", "--ref", "crash")
    a.corral("daemon", "start")
    a.json("start", "crash")
    os.kill(supervisor_of(a), signal.SIGKILL)
    # Nobody types a command: the daemon sees its supervisor die, records the loss and resumes the turn.
    until(lambda: stored(team, "crash") == ("blocked", 2), timeout=90, poll=0.5, what="the daemon resumes it")
    shown = a.json("show", "crash")
    assert [t["kind"] for t in shown["turns"] if t["role"] == "agent"] == ["error", "auto-resume"]
    assert len(a.calls()) == 2
    assert str(a.clone) in a.json("daemon", "status")["daemon"]["projects"]


def test_an_agents_wait_on_its_subtask_sees_it_finish_on_a_postgresql_project(team: Team, tmp_path: Path) -> None:
    a = local(team, "laptop-a", harness="command", command=f"{sys.executable} {AGENT}")
    plan, out = tmp_path / "plan.json", tmp_path / "out"
    a.extra_env = {"CORRAL_AGENT_TOOLS": "1", "MCP_AGENT_PLAN": str(plan), "MCP_AGENT_OUT": str(out)}
    plan.write_text(
        json.dumps(
            {
                "parent": [
                    {"tool": "create", "args": {"goal": "Child work", "ref": "kid"}},
                    {"tool": "start", "args": {"task": "kid"}},
                    {"tool": "wait", "args": {"task": "kid"}},
                ],
                "kid": [{"write": ["kid.txt", "from the kid\n"]}, {"commit": "kid work"}],
            }
        )
    )
    a.corral("create", "Parent work", "--ref", "parent")
    a.json("start", "parent")  # its agent's tools are served by A's daemon, which the launch starts
    until(lambda: stored(team, "parent")[0] == "blocked", timeout=90, poll=0.5, what="the parent's turn ends")
    results = [json.loads(line) for line in (out / "parent.jsonl").read_text().splitlines()]
    (waited,) = [r for r in results if r.get("tool") == "wait"]
    assert waited["is_error"] is False and waited["result"]["rests"] is True, waited
    assert waited["result"]["task"]["status"] == "blocked"
    assert stored(team, "kid") == ("blocked", 1)


FAILING = {"tool": "Bash", "input": {"command": "pytest -q"}, "is_error": True, "output": "FAILED test_y"}


def test_an_incident_is_told_once_by_the_host_whose_turn_it_is(team: Team, tmp_path: Path) -> None:
    hook = tmp_path / "hook.py"
    hook.write_text("import sys\nwith open(sys.argv[1], 'a') as fh:\n    fh.write(sys.stdin.read() + '\\n')\n")
    told = {name: tmp_path / f"told-{name}.jsonl" for name in ("a", "b")}
    a = local(team, "laptop-a", notify_command=f"{sys.executable} {hook} {told['a']}")
    b = local(team, "laptop-b", notify_command=f"{sys.executable} {hook} {told['b']}")
    a.script([{"init": True}, FAILING, FAILING, FAILING, {"result": "Done, I think."}])
    a.corral("create", "Noisy task", "--ref", "noisy")
    a.corral("daemon", "start")
    b.corral("daemon", "start")  # both daemons serve the project; one incident, one notice
    a.json("start", "noisy")
    until(lambda: told["a"].exists(), timeout=60, poll=0.3, what="A's daemon tells A's incident")
    # B's daemon ticks on, and reads everything A shipped of the turn: it tells nothing of A's turn.
    until(lambda: b.json("show", "noisy")["lease"]["state"] == "released", timeout=30, poll=0.3, what="let go")
    time.sleep(3 * 2.0)  # a few of B's ticks
    notices = [json.loads(line) for line in told["a"].read_text().splitlines() if line.strip()]
    assert notices and {n["task"]["ref"] for n in notices} == {"noisy"}
    assert len({n["notice"]["key"] for n in notices}) == len(notices)  # each told once
    assert not told["b"].exists()  # never by the other host's daemon
