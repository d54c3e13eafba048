"""A worker's turn always ends, and ends explained (docs/workers.md): a remote or a store that fails for a
while is waited out, a job that dies is followed again, a stop asked on a laptop reaches the worker's
agent, and a worker shutting down hands its turns back for another to resume."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import Any

import psycopg
import pytest

from corral.domain import prompts
from corral.engine.project import Project
from corral.store.postgres import lock_key
from tests.support.polling import until
from tests.workers.conftest import Team
from tests.workers.team import DRAFTING, Host, alive, git, work

pytestmark = pytest.mark.slow


def _show(host: Host, ref: str) -> dict[str, Any]:
    doc: dict[str, Any] = host.json("show", ref)
    return doc


def _on_remote(team: Team, ref: str) -> list[str]:
    """The files the remote's branch of the task holds (none when it has no such branch)."""
    done = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", f"refs/heads/corral/{ref}"],
        cwd=team.remote,
        capture_output=True,
        text=True,
    )
    return done.stdout.split() if done.returncode == 0 else []


def _refused(result: subprocess.CompletedProcess[str], code: str) -> dict[str, Any]:
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    error: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])["error"]  # after accept's phase lines
    assert error["code"] == code and error["hint"], error
    return error


def test_a_remote_refusing_a_turns_push_keeps_its_claim_until_it_lands_and_review_waits(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("pusher")
    host.script(work("pushed.txt", then=[{"sleep": 2}]))
    laptop.corral("create", "Pushed", "--ref", "pushed")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "pushed")  # publishes the new branch first: the remote refuses only what follows
    flag = team.refuse_pushes()
    task_id = _show(laptop, "pushed")["task"]["id"]
    until(lambda: _show(laptop, "pushed")["task"]["status"] == "blocked", poll=0.2, what="the turn is recorded")
    said = host.wait_event("not-pushed", task=task_id)
    assert said["message"].startswith("work not yet pushed:") and "pre-receive hook declined" in said["message"]
    # The lease stays claimed and says why; a reviewer sees it, and nothing merges the stale remote tip.
    lease = until(lambda: _show(laptop, "pushed")["lease"]["unpushed"] and _show(laptop, "pushed")["lease"])
    assert lease["state"] == "claimed" and "pre-receive hook declined" in lease["unpushed"]
    assert "work not yet pushed: git push to origin failed" in laptop.corral("show", "pushed").stdout
    error = _refused(laptop.corral("accept", "pushed", "--json", check=False), "work-not-pushed")
    assert "pusher" in error["message"] and "pre-receive hook declined" in error["message"]
    _refused(laptop.corral("diff", "pushed", "--json", check=False), "work-not-pushed")
    assert _show(laptop, "pushed")["task"]["status"] == "blocked"  # the refusal moved nothing
    assert "pushed.txt" not in _on_remote(team, "pushed")
    flag.unlink()  # the remote takes pushes again: the worker's next try lands, then it lets go
    host.wait_event("turn-done", timeout=60, task=task_id)
    shown = _show(laptop, "pushed")
    assert shown["lease"]["state"] == "released" and shown["lease"]["unpushed"] is None
    assert "pushed.txt" in _on_remote(team, "pushed")
    laptop.corral("accept", "pushed")
    assert git(team.remote, "show", "main:pushed.txt") == "pushed.txt"
    assert [e for e in host.events() if e["event"] == "turn-failed"] == []


def test_a_store_too_busy_to_record_a_turn_never_strands_the_turns_end(team: Team) -> None:
    laptop = team.laptop()
    # A long lease: the heartbeats that fail meanwhile must not lose it; only the turn's end is tested.
    # A write waits 1 s for the lock before store-busy (store_busy_timeout, the person's; 10 s by default).
    host = team.worker("busy", lease_seconds=120.0, store_busy_timeout=1.0)
    host.script(work("busy.txt", then=[{"sleep": 2}]))
    laptop.corral("create", "Busy", "--ref", "busy")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "busy")
    task_id = _show(laptop, "busy")["task"]["id"]
    until(host.calls, poll=0.1, what="its agent runs")
    # The project's write lock, held elsewhere: every write of the worker waits its busy timeout, then
    # fails (store-busy), the turn's receipt included, until the lock is let go.
    with psycopg.connect(team.url, autocommit=True) as other:
        [schema] = [
            r[0]
            for r in other.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'corral_%'")
            if r[0] != "corral_dispatch"
        ]
        other.execute("SELECT pg_advisory_lock(%s)", (lock_key(schema),))
        said = host.wait_event("store-unavailable", timeout=60, task=task_id)
        assert "is busy" in said["message"] and "trying again" in said["message"]
    host.wait_event("turn-done", timeout=90, task=task_id)
    assert [e for e in host.events() if e["event"] == "turn-failed"] == []
    shown = _show(laptop, "busy")
    assert shown["task"]["status"] == "blocked" and shown["lease"]["state"] == "released"
    assert [t["kind"] for t in shown["turns"] if t["role"] == "agent"] == ["start"]  # recorded once
    assert "busy.txt" in _on_remote(team, "busy")


def test_a_job_that_dies_leaves_no_agent_unwatched_its_turn_is_followed_to_its_end(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("fragile")
    host.script(work("fragile.txt", then=[{"sleep": 2}]))
    laptop.corral("create", "Fragile", "--ref", "fragile")
    # The job following the turn dies of a fault of corral's own at its third look at the turn.
    host.start_worker(env={"CORRAL_CRASH_AT": "worker.follow#3", "CORRAL_CRASH_HOW": "raise"})
    host.wait_event("started")
    laptop.json("start", "fragile")
    task_id = _show(laptop, "fragile")["task"]["id"]
    failed = host.wait_event("turn-failed", task=task_id)
    assert "crash point worker.follow" in failed["message"]
    host.wait_event("adopt", task=task_id)  # the heartbeat loop follows it again
    host.wait_event("turn-done", timeout=60, task=task_id)
    shown = _show(laptop, "fragile")
    assert shown["task"]["status"] == "blocked" and shown["lease"]["state"] == "released"
    assert "fragile.txt" in _on_remote(team, "fragile")


def test_a_heartbeat_step_that_fails_never_keeps_a_fenced_off_worker_from_stopping_its_agent(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    laptop = team.laptop()
    host = team.worker("fenced")
    host.script([{"init": True}, {"write": {"path": "stale.txt", "content": "x\n"}}, {"keepalive": 120}])
    laptop.corral("create", "Fenced", "--ref", "fenced")
    # Every heartbeat's exchange of usage-limit pauses fails: the store refuses the shared document's write,
    # and a pause past its reset is there, so each exchange writes it over.
    passed = {"claude:0123456789abcdef": {"harness": "claude", "resets_at": "2020-01-01T00:00:00Z", "reason": "x"}}
    with team.sql() as conn:
        conn.execute(
            "INSERT INTO shared_docs (name, doc, at) VALUES ('usage-limits', %s, '2020-01-01T00:00:00Z')",
            (json.dumps(passed),),
        )
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'shared documents refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON shared_docs FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    # The job following the turn dies early: the heartbeat loop alone looks at the turn's lease after that.
    host.start_worker(env={"CORRAL_CRASH_AT": "worker.follow#3", "CORRAL_CRASH_HOW": "raise"})
    host.wait_event("started")
    laptop.json("start", "fenced")
    task_id = _show(laptop, "fenced")["task"]["id"]
    host.wait_event("turn-failed", task=task_id)
    agents = until(lambda: [c["pid"] for c in host.calls()], poll=0.2, what="its agent runs")
    assert "shared documents refused" in host.wait_event("heartbeat-failed")["message"]
    # Another host takes the turn over (its sweep fences the lease off): this worker's agent must stop.
    for key in ("HOME", "CORRAL_HOME", "CORRAL_CONFIG_FILE"):
        monkeypatch.setenv(key, laptop.env()[key])
    project = Project.open(laptop.clone)
    try:
        with project.store.write() as tx:
            lease = tx.lease(task_id)
            assert lease is not None and lease.claimed
            assert tx.fence_off(task_id, lease.epoch)
    finally:
        project.close()
    until(lambda: not any(alive(pid) for pid in agents), timeout=30, poll=0.2, what="the fenced-off agent is stopped")
    assert host.proc is not None and host.proc.poll() is None  # its loops run on


def test_a_stop_on_a_laptop_stops_the_workers_agent_as_a_local_stop_does(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("far")
    long = [{"init": True}, {"write": {"path": "draft.txt", "content": "half\n"}}, {"text": "thinking"}, {"sleep": 60}]
    host.script(long, first=[work("first.txt")])
    laptop.corral("create", "Far", "--ref", "far")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "far")
    until(lambda: _show(laptop, "far")["task"]["status"] == "blocked", poll=0.2, what="the first turn ran")
    laptop.corral("unblock", "far", "-m", "go slowly")
    agent = until(lambda: len(host.calls()) == 2 and host.calls()[-1]["pid"], poll=0.1, what="its agent runs")
    task_id = _show(laptop, "far")["task"]["id"]
    stopped = laptop.json("stop", "far")
    assert stopped["task"]["status"] == "blocked"
    said = host.wait_event("stop", task=task_id)
    assert said["message"] == "stop asked by human: relayed to its supervisor"
    until(lambda: not alive(agent), timeout=15, poll=0.2, what="its agent is stopped")
    host.wait_event("turn-done", timeout=60, task=task_id)
    until(lambda: _show(laptop, "far")["lease"]["state"] == "released", timeout=30, poll=0.2, what="its lease let go")
    shown = _show(laptop, "far")
    last = [t for t in shown["turns"] if t["role"] == "agent"][-1]
    assert (last["kind"], last["content"]) == ("stopped", "Stopped by human.")
    assert shown["resting_cause"]["code"] == "stopped" and shown["resting_cause"]["actor"] == "human"
    feedback = next(t for t in shown["turns"] if t["kind"] == "unblock")
    assert feedback["feedback_delivery"] == "pending"
    assert shown["lease"]["state"] == "released"
    # Its work in progress went to the remote before the agent was stopped (and after), as for any turn's end.
    wip = git(team.remote, "ls-tree", "-r", "--name-only", "refs/corral/wip/far").split()
    assert "draft.txt" in wip


def test_a_stopped_queued_turn_never_runs(team: Team) -> None:
    laptop = team.laptop()
    laptop.corral("create", "Queued", "--ref", "queued")
    laptop.json("start", "queued")
    stopped = laptop.json("stop", "queued")
    assert stopped["task"]["status"] == "blocked"
    shown = _show(laptop, "queued")
    assert shown["lease"]["state"] == "released" and shown["resting_cause"]["code"] == "stopped"
    host = team.worker("late")
    host.start_worker()
    host.wait_event("skipped")  # its job was still queued: the worker claims nothing of it
    assert host.calls() == [] and _show(laptop, "queued")["task"]["status"] == "blocked"


def test_a_second_sigterm_hands_the_turns_back_for_another_worker_to_resume(team: Team) -> None:
    laptop = team.laptop()
    leaving = team.worker("leaving")
    taker = team.worker("taker")
    leaving.script(DRAFTING)
    taker.script(work("final.txt"))
    laptop.corral("create", "Handed", "--ref", "handed")
    leaving.start_worker()
    leaving.wait_event("started")
    laptop.json("start", "handed")
    agent = until(lambda: [c["pid"] for c in leaving.calls()], poll=0.1, what="its agent runs")[0]
    task_id = _show(laptop, "handed")["task"]["id"]
    taker.start_worker()
    taker.wait_event("started")
    assert leaving.proc is not None
    leaving.proc.send_signal(signal.SIGTERM)
    leaving.wait_event("draining")
    leaving.proc.send_signal(signal.SIGTERM)
    assert leaving.proc.wait(60) == 0
    handed = next(e for e in leaving.events() if e["event"] == "turn-handed-back")
    assert handed["task"] == task_id and handed["message"] == "handed back by worker leaving on shutdown"
    assert not alive(agent)
    until(lambda: _show(laptop, "handed")["task"]["status"] == "blocked", timeout=90, poll=0.2, what="it resumed")
    # The taker records the turn, then ships its files and pushes its work, and only then lets the lease go.
    shown = until(
        lambda: (doc := _show(laptop, "handed"))["lease"]["state"] == "released" and doc,
        timeout=60,
        poll=0.2,
        what="the taker to let the lease go",
    )
    errors = [t for t in shown["turns"] if t["role"] == "agent" and t["kind"] == "error"]
    assert [t["content"] for t in errors] == ["The turn was interrupted: handed back by worker leaving on shutdown."]
    assert [c["to"] for c in shown["status_changes"]].count("interrupted") == 1
    assert shown["lease"]["host"] == "taker" and shown["lease"]["state"] == "released"
    # The draft was pushed before the agent was stopped, restored on the taker, and committed there.
    assert {"draft.txt", "final.txt"} <= set(_on_remote(team, "handed"))
    [call] = taker.calls()
    assert prompts.CRASH_DIRTY in call["prompt"]


def test_two_hosts_with_one_home_path_and_one_name_are_two_workers(team: Team) -> None:
    laptop = team.laptop()
    place = team.root / "home-path"
    place.mkdir()
    twins = [team.worker(f"twin-{i}") for i in range(2)]
    for host in twins:
        # Both call themselves "twin", and each sees its own home at the same path (a mount namespace).
        host.config.write_text(host.config.read_text().replace(f'worker_host = "{host.name}"', 'worker_host = "twin"'))
        host.corral_home = place / "corral"
        bind = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
        host.start_worker(prefix=("unshare", "-m", "sh", "-c", bind, "sh", str(host.home), str(place)))
    for host in twins:
        host.wait_event("started")
    listed = [w for w in laptop.json("workers")["workers"] if w["host"] == "twin"]
    assert len({w["id"] for w in listed}) == 2, listed
    for host in twins:
        token = host.home / "corral" / "worker.token"
        assert token.stat().st_mode & 0o777 == 0o600
    ids = {host.name: host.events()[0]["worker"] for host in twins}
    assert ids["twin-0"] != ids["twin-1"] and all(i.startswith("twin-") for i in ids.values())
