"""Workers on several hosts (docs/workers.md): claims once, leases, fencing, branches through the remote."""

from __future__ import annotations

import signal
import time

import pytest

from tests.workers.conftest import LEASE, Team
from tests.workers.team import git, until, work

pytestmark = pytest.mark.slow


def _status(host, ref):  # type: ignore[no-untyped-def]
    return host.json("show", ref)["task"]["status"]


def test_queued_turns_spread_over_three_workers_each_run_exactly_once(team: Team) -> None:
    laptop = team.laptop()
    workers = [team.worker(f"build-{i}") for i in range(3)]
    refs = [f"t{i}" for i in range(9)]
    for ref in refs:
        laptop.corral("create", f"Task {ref}", "--ref", ref)
    for host in workers:
        host.script(work("work.txt"))
        host.start_worker()
    for host in workers:
        host.wait_event("started")
    for ref in refs:
        started = laptop.json("start", ref)
        assert started["queued"] is True and started["supervisor_pid"] is None
    until("every task ran", lambda: all(_status(laptop, r) == "blocked" for r in refs), timeout=120)
    ran_on: dict[str, str] = {}
    for ref in refs:
        shown = laptop.json("show", ref)
        agent_turns = [t for t in shown["turns"] if t["role"] == "agent"]
        assert [t["kind"] for t in agent_turns] == ["start"], shown["turns"]
        ran_on[ref] = shown["task"]["lease"]["host"]
        # The agent's commit travelled through the remote: the task branch there holds it.
        assert git(team.remote, "show", f"corral/{ref}:work.txt") == "work.txt"
    # Each turn was claimed once (queued: epoch 1, claimed: 2) and by one of the workers.
    claims = [e for h in workers for e in h.events() if e["event"] == "turn-done"]
    assert sorted(e["task"] for e in claims) == sorted(laptop.json("show", r)["task"]["id"] for r in refs)
    assert set(ran_on.values()) <= {h.name for h in workers} and len(set(ran_on.values())) >= 2


def test_a_killed_workers_turn_resumes_on_another_with_its_work_in_progress(team: Team) -> None:
    laptop = team.laptop()
    doomed = team.worker("doomed")
    rescuer = team.worker("rescuer")
    # The doomed host's agent writes a file, leaves it uncommitted and works on; the rescuer's finishes.
    doomed.script([{"init": True}, {"write": {"path": "draft.txt", "content": "half done\n"}}, {"keepalive": 120}])
    rescuer.script(work("final.txt"))
    laptop.corral("create", "Long task", "--ref", "long")
    doomed.start_worker()
    doomed.wait_event("started")
    laptop.json("start", "long")
    doomed.wait_event("claim")
    until(
        "the draft reached the WIP ref",
        lambda: (
            "draft.txt" in git(team.remote, "ls-tree", "-r", "--name-only", "refs/corral/wip/long")
            if _has_ref(team, "refs/corral/wip/long")
            else False
        ),
    )
    doomed.signal_all(signal.SIGKILL)  # the host dies: its worker, supervisor and agent
    killed_at = time.monotonic()
    rescuer.start_worker()
    rescuer.wait_event("claim", timeout=LEASE + 30)
    until("the turn finished on the rescuer", lambda: _status(laptop, "long") == "blocked", timeout=60)
    shown = laptop.json("show", "long")
    lost = [t for t in shown["turns"] if t["role"] == "agent" and t["kind"] == "error"]
    assert lost and "worker lost" in lost[0]["content"] and "doomed" in lost[0]["content"]
    assert shown["task"]["lease"]["host"] == "rescuer"
    # The uncommitted draft was restored on the rescuer, and its agent committed it with its own work.
    files = git(team.remote, "ls-tree", "-r", "--name-only", "corral/long").splitlines()
    assert {"draft.txt", "final.txt"} <= set(files)
    assert time.monotonic() - killed_at < 120


def _has_ref(team: Team, ref: str) -> bool:
    import subprocess

    return (
        subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=team.remote, capture_output=True).returncode
        == 0
    )


def test_a_partitioned_worker_comes_back_to_a_stale_epoch_stops_its_agent_and_writes_nothing(team: Team) -> None:
    laptop = team.laptop()
    cut_off = team.worker("cut-off")
    rescuer = team.worker("rescuer")
    cut_off.script([{"init": True}, {"write": {"path": "stale.txt", "content": "x\n"}}, {"keepalive": 120}])
    rescuer.script(work("final.txt"))
    laptop.corral("create", "Partitioned", "--ref", "part")
    cut_off.start_worker()
    cut_off.wait_event("started")
    laptop.json("start", "part")
    cut_off.wait_event("claim")
    agents = until("its agent runs", lambda: _agents(cut_off))
    assert cut_off.proc is not None
    cut_off.proc.send_signal(signal.SIGSTOP)  # no heartbeat reaches the store; its agent works on
    rescuer.start_worker()
    until("the rescuer finished the turn", lambda: _status(laptop, "part") == "blocked", timeout=LEASE + 60)
    before = laptop.json("show", "part")
    cut_off.proc.send_signal(signal.SIGCONT)
    cut_off.wait_event("lease-lost", timeout=30)
    until("the stale agent is stopped", lambda: not any(_alive(pid) for pid in agents), timeout=30)
    time.sleep(2 * LEASE / 3)  # a heartbeat more: anything it would still write would be there now
    after = laptop.json("show", "part")
    assert after["turns"] == before["turns"] and after["task"]["status"] == "blocked"
    # Nothing of the stale turn reached the remote: the branch holds the rescuer's work only.
    files = git(team.remote, "ls-tree", "-r", "--name-only", "corral/part").splitlines()
    assert "final.txt" in files and "stale.txt" not in files


def test_sigterm_drains_a_worker_it_finishes_its_turn_and_claims_nothing_more(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("draining")
    host.script(work("slow.txt", then=[{"sleep": 3}]))
    laptop.corral("create", "First", "--ref", "first")
    laptop.corral("create", "Second", "--ref", "second")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "first")
    host.wait_event("claim")
    assert host.proc is not None
    host.proc.send_signal(signal.SIGTERM)
    host.wait_event("draining")
    laptop.json("start", "second")
    assert host.proc.wait(60) == 0
    events = [e["event"] for e in host.events()]
    assert events.count("claim") == 1 and "turn-done" in events and events[-1] == "stopped"
    assert _status(laptop, "first") == "blocked"
    assert _status(laptop, "second") == "working"  # queued for the next worker, not lost
    workers = {w["host"]: w for w in laptop.json("workers")["workers"]}
    assert workers["draining"]["state"] == "stopped"


def _agents(host) -> list[int]:  # type: ignore[no-untyped-def]
    import json

    record = host.record / "invocations.jsonl"
    if not record.exists():
        return []
    return [json.loads(line)["pid"] for line in record.read_text().splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_restarted_worker_re_adopts_its_running_turn_before_its_lease_runs_out(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("restarted")
    host.script(work("adopted.txt", then=[{"sleep": 4}]))
    laptop.corral("create", "Adopted", "--ref", "adopt")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "adopt")
    host.wait_event("claim")
    until("its supervisor runs", host.supervisors)
    assert host.proc is not None
    host.proc.kill()  # the worker alone: its supervisor and agent run on
    host.proc.wait(10)
    host.start_worker()
    adopted = host.wait_event("adopt", timeout=LEASE)
    host.wait_event("turn-done", timeout=60, task=adopted["task"])
    shown = laptop.json("show", "adopt")
    assert shown["task"]["status"] == "blocked"
    assert [t["kind"] for t in shown["turns"] if t["role"] == "agent"] == ["start"]  # never lost, never resumed
    assert git(team.remote, "show", "corral/adopt:adopted.txt") == "adopted.txt"
