"""Workers on several hosts (docs/workers.md): claims once, leases, fencing, branches through the remote."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from corral.domain import prompts
from corral.domain.clock import rfc3339
from tests.support.polling import until
from tests.workers.conftest import LEASE, Team
from tests.workers.team import DRAFTING, alive, git, work

pytestmark = pytest.mark.slow


def _status(host, ref):  # type: ignore[no-untyped-def]
    return host.json("show", ref)["task"]["status"]


@pytest.mark.timeout(600)
def test_a_hundred_queued_turns_spread_over_three_workers_each_run_exactly_once(team: Team) -> None:
    laptop = team.laptop()
    # A turn here writes and commits at once: its uncommitted work is never pushed, and no worker is lost
    # (the default intervals: the machine's cores go to the turns).
    workers = [team.worker(f"build-{i}", wip_push_interval=180.0, worker_settle_interval=2.0) for i in range(3)]
    refs = [f"t{i}" for i in range(100)]
    for host in workers:
        host.script(work("work.txt"))
        host.start_worker()
    for host in workers:
        host.wait_event("started")
    # A few people at once, each a `corral` process of their own.
    laptop.at_once([("create", f"Task {ref}", "--ref", ref) for ref in refs])
    started = [json.loads(out) for out in laptop.at_once([("start", ref, "--json") for ref in refs])]
    assert all(s["queued"] is True and s["supervisor_pid"] is None for s in started)

    # Waited on in the shared store itself, on one connection: a `corral list` every poll would take the turns' CPU
    # from them. A worker records a turn, then pushes its work, and only then lets its lease go: the wait is for both.
    with team.sql() as conn:

        def stored() -> set[tuple[str, str]]:
            rows = conn.execute("SELECT t.status, l.state FROM tasks t JOIN leases l ON l.task_id = t.id").fetchall()
            conn.commit()  # each look a transaction of its own: the next sees what committed since
            return {(r[0], r[1]) for r in rows}

        until(lambda: stored() == {("blocked", "released")}, timeout=480, poll=0.25, what="every task ran")
    listed = {r["ref"]: r["status"] for r in laptop.json("list", "--all")["tasks"]}
    assert listed == dict.fromkeys(refs, "blocked")
    # Read from the shared store itself: one agent turn per task, its lease queued at epoch 1,
    # claimed once at 2 and released (never claimed twice, never lost), on one of the workers.
    with team.sql() as conn:
        rows = conn.execute(
            "SELECT t.ref, l.epoch, l.state, l.host, (SELECT COUNT(*) FROM turns a WHERE a.task_id = t.id "
            "AND a.role = 'agent'), (SELECT MAX(a.kind) FROM turns a WHERE a.task_id = t.id AND a.role = 'agent') "
            "FROM tasks t JOIN leases l ON l.task_id = t.id"
        ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(refs)
    odd = [r for r in rows if (r[1], r[2], r[4], r[5]) != (2, "released", 1, "start")]
    assert not odd, (odd, [e for h in workers for e in h.events() if e["event"] not in ("claim", "turn-done")])
    assert {r[3] for r in rows} == {h.name for h in workers}  # the work was spread over all three
    # Every agent's commit travelled through the remote: each task branch there holds it.
    branches = git(team.remote, "for-each-ref", "--format=%(refname:short)", "refs/heads/corral/").split()
    assert sorted(branches) == sorted(f"corral/{ref}" for ref in refs)
    assert sum(len(h.calls()) for h in workers) == 100  # one agent run per turn, no more
    done = [e["task"] for h in workers for e in h.events() if e["event"] == "turn-done"]
    assert len(done) == len(set(done)) == 100


def test_a_killed_workers_turn_resumes_on_another_with_its_work_in_progress(team: Team) -> None:
    laptop = team.laptop()
    doomed = team.worker("doomed")
    rescuer = team.worker("rescuer")
    # The doomed host's agent writes a file, leaves it uncommitted and works on; the rescuer's finishes.
    doomed.script(DRAFTING)
    rescuer.script(work("final.txt"))
    laptop.corral("create", "Long task", "--ref", "long")
    doomed.start_worker()
    doomed.wait_event("started")
    laptop.json("start", "long")
    doomed.wait_event("claim")
    until(
        lambda: (
            "draft.txt" in git(team.remote, "ls-tree", "-r", "--name-only", "refs/corral/wip/long")
            if _has_ref(team, "refs/corral/wip/long")
            else False
        ),
        poll=0.2,
        what="the draft reached the WIP ref",
    )
    doomed.signal_all(signal.SIGKILL)  # the host dies: its worker, supervisor and agent
    killed_at = time.monotonic()
    rescuer.start_worker()
    rescuer.wait_event("claim", timeout=LEASE + 30)
    until(lambda: _status(laptop, "long") == "blocked", timeout=60, poll=0.2, what="the turn finished on the rescuer")
    # The turn is recorded first; the worker then ships its files, pushes its work and lets its lease go.
    until(
        lambda: laptop.json("show", "long")["lease"]["state"] == "released",
        timeout=30,
        poll=0.2,
        what="the rescuer's lease handed back",
    )
    shown = laptop.json("show", "long")
    lost = [t for t in shown["turns"] if t["role"] == "agent" and t["kind"] == "error"]
    assert lost and "worker lost" in lost[0]["content"] and "doomed" in lost[0]["content"]
    assert shown["lease"]["host"] == "rescuer" and shown["lease"]["state"] == "released"
    # The uncommitted draft was restored on the rescuer, and its agent committed it with its own work.
    files = git(team.remote, "ls-tree", "-r", "--name-only", "corral/long").splitlines()
    assert {"draft.txt", "final.txt"} <= set(files)
    # The WIP it restored is gone from the remote: the turn ended clean, and its last WIP push removed it,
    # swapped from the WIP ref the claim's ls-remote read (never read again in between).
    assert not _has_ref(team, "refs/corral/wip/long")
    assert time.monotonic() - killed_at < 120
    # The harness session stayed on the dead host: the rescuer's agent starts a fresh one, told the
    # task and that it resumes after a crash with uncommitted changes (its WIP) in its worktree.
    [call] = rescuer.calls()
    assert "--resume" not in call["argv"]
    assert "Long task" in call["prompt"] and prompts.CRASH_DIRTY in call["prompt"]


def _has_ref(team: Team, ref: str) -> bool:
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
    agents = until(lambda: [c["pid"] for c in cut_off.calls()], poll=0.2, what="its agent runs")
    assert cut_off.proc is not None
    cut_off.proc.send_signal(signal.SIGSTOP)  # no heartbeat reaches the store; its agent works on
    rescuer.start_worker()
    until(
        lambda: _status(laptop, "part") == "blocked", timeout=LEASE + 60, poll=0.2, what="the rescuer finished the turn"
    )
    before = laptop.json("show", "part")
    cut_off.proc.send_signal(signal.SIGCONT)
    cut_off.wait_event("lease-lost", timeout=30)
    until(lambda: not any(alive(pid) for pid in agents), timeout=30, poll=0.2, what="the stale agent is stopped")
    time.sleep(2 * LEASE / 3)  # a heartbeat more: anything it would still write would be there now
    after = laptop.json("show", "part")
    assert after["turns"] == before["turns"] and after["task"]["status"] == "blocked"
    # Nothing of the stale turn reached the remote: the branch holds the rescuer's work only.
    files = git(team.remote, "ls-tree", "-r", "--name-only", "corral/part").splitlines()
    assert "final.txt" in files and "stale.txt" not in files
    # Its next claim of the task keeps what its old worktree held before following the remote. That
    # turn's agent works on until the checks below are done, then commits and answers: the team's
    # teardown drains the worker, which ends its turn first (a two-minute agent held it 20 s, then was killed).
    rescuer.stop_worker()
    again = team.root / "again-holds"
    again.touch()
    cut_off.script(work("again.txt", then=[{"hold": str(again)}]))
    runs = len(cut_off.calls())
    laptop.corral("unblock", "part", "-m", "once more")
    until(
        lambda: len([e for e in cut_off.events() if e["event"] == "claim"]) == 2,
        poll=0.2,
        what="the old worker claims it again",
    )
    kept = until(
        lambda: git(cut_off.clone, "for-each-ref", "--format=%(refname)", "refs/corral/stale/part/"),
        poll=0.2,
        what="its old worktree is kept",
    )
    assert kept.endswith("-worktree")
    assert "stale.txt" in git(cut_off.clone, "ls-tree", "-r", "--name-only", kept)
    # Kept on the remote too, before the worktree was reset: a host that dies next loses none of it. The ref is
    # made here first and pushed next, so the remote is read once the turn's agent runs (after the reset).
    until(lambda: len(cut_off.calls()) > runs, poll=0.2, what="the new turn's agent runs, on the reset worktree")
    assert git(team.remote, "rev-parse", kept) == git(cut_off.clone, "rev-parse", kept)
    again.unlink()


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
    # The laptop's doctor says the queued turn has no worker to run it.
    checks = [c for c in laptop.json("doctor")["checks"] if c["name"] == "workers"]
    assert [c["status"] for c in checks] == ["warn"] and "1 turn(s) queued" in checks[0]["message"]


def test_a_restarted_worker_re_adopts_its_running_turn_before_its_lease_runs_out(team: Team) -> None:
    laptop, _host = team.restarted_mid_turn({"sleep": 4})
    shown = laptop.json("show", "adopt")
    assert shown["task"]["status"] == "blocked"
    assert [t["kind"] for t in shown["turns"] if t["role"] == "agent"] == ["start"]  # never lost, never resumed
    assert git(team.remote, "show", "corral/adopt:adopted.txt") == "adopted.txt"


def _ran(team: Team, laptop, ref: str, name: str = "build") -> None:  # type: ignore[no-untyped-def]
    host = team.worker(name)
    host.script(work(f"{ref}.txt"))
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", ref)
    until(lambda: _status(laptop, ref) == "blocked", timeout=60, poll=0.2, what=f"{ref} ran")
    host.stop_worker()


def test_accept_from_a_reviewer_host_lands_on_the_remote_by_compare_and_swap(team: Team) -> None:
    laptop = team.laptop()
    laptop.corral("create", "Reviewed", "--ref", "rev")
    _ran(team, laptop, "rev")
    assert "rev.txt" in laptop.corral("diff", "rev").stdout  # the worker's work, fetched for review
    laptop.corral("accept", "rev")
    assert _status(laptop, "rev") == "complete"
    merged = git(team.remote, "log", "-1", "--format=%B", "main")
    assert "Corral-Task:" in merged and git(team.remote, "show", "main:rev.txt") == "rev.txt"
    assert git(laptop.clone, "rev-parse", "main") == git(team.remote, "rev-parse", "main")  # this host followed
    # The remote keeps the branch's tip under the archive ref; the branch itself is gone.
    assert git(team.remote, "rev-parse", "refs/corral/archive/rev")
    assert not _has_ref(team, "refs/heads/corral/rev")


def test_a_target_moved_on_the_remote_during_accept_is_merged_again_never_overwritten(team: Team) -> None:
    laptop = team.laptop()
    laptop.corral("create", "Raced", "--ref", "race")
    _ran(team, laptop, "race")
    # Someone else's commit on main, waiting on the remote; the first push of main moves main to it
    # (a pre-receive hook), so the accept's compare-and-swap meets a target that moved under it.
    other = team.root / "other"
    git(team.root, "clone", "-q", str(team.remote), str(other))
    (other / "theirs.txt").write_text("theirs\n")
    git(other, "add", "theirs.txt")
    git(other, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-m", "theirs")
    git(other, "push", "-q", "origin", "HEAD:refs/hidden/next")
    hook = team.remote / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\n"
        'if [ ! -e "$GIT_DIR/moved" ]; then touch "$GIT_DIR/moved"; '
        "env -u GIT_QUARANTINE_PATH git update-ref refs/heads/main refs/hidden/next; fi\n"
    )
    hook.chmod(0o755)
    theirs = git(team.remote, "rev-parse", "refs/hidden/next")
    laptop.corral("accept", "race")
    assert (team.remote / "moved").exists()
    # The merge was made again onto their commit: both are on main, theirs kept.
    assert git(team.remote, "rev-parse", "main^") == theirs
    assert git(team.remote, "show", "main:theirs.txt") == "theirs" and git(team.remote, "show", "main:race.txt")


def test_two_accepts_from_two_hosts_merge_once(team: Team) -> None:
    laptop = team.laptop()
    reviewer = team.host("reviewer")
    laptop.corral("create", "Twice", "--ref", "twice")
    _ran(team, laptop, "twice")
    before = git(team.remote, "rev-parse", "main")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", "twice", "--json"],
            cwd=h.clone,
            env=h.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for h in (laptop, reviewer)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert 0 in codes, results
    # Exactly one squash commit of the task on top of where main was.
    assert git(team.remote, "rev-list", "--count", f"{before}..main") == "1"
    assert _status(laptop, "twice") == "complete"


def test_a_reviewer_reads_a_turn_running_on_a_worker_its_host_output_and_incidents(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("runner")
    failing_tool = [
        {"tool": "Bash", "input": {"command": "pytest -q"}, "is_error": True, "output": "1 failed"},
        {"text": "tests fail, looking"},
    ]
    host.script([{"init": True}, *failing_tool, {"text": "still at it"}, {"sleep": 12}, {"result": "done"}])
    laptop.corral("create", "Watched", "--ref", "watched")
    host.start_worker()
    host.wait_event("started")
    laptop.json("start", "watched")
    host.wait_event("claim")
    row = until(
        lambda: next((r for r in laptop.json("list")["tasks"] if r["ref"] == "watched" and r.get("host")), None),
        poll=0.2,
        what="the laptop lists it on its host",
    )
    assert row["host"] == "runner" and row["status"] == "working"
    # Alive by its worker's heartbeat, with what its agent is at, as the worker shipped it.
    assert until(lambda: _row(laptop, "watched")["substate"] == "agent", poll=0.2, what="its live facts")
    listed = laptop.corral("list").stdout
    assert "working(agent) on runner" in listed
    shown_text = laptop.corral("show", "watched").stdout
    assert "Worker:   runs on runner since" in shown_text
    live = until(
        lambda: (laptop.json("show", "watched")["live"] or {}).get("last_line"),
        poll=0.2,
        what="its last line reaches the laptop",
    )
    assert live.endswith("still at it")  # as `corral logs` renders the line
    until(
        lambda: "still at it" in laptop.corral("logs", "watched", check=False).stdout,
        poll=0.2,
        what="its output reaches the laptop",
    )
    until(lambda: _status(laptop, "watched") == "blocked", timeout=60, poll=0.2, what="the turn ends")
    failures = laptop.json("failures", "watched", "--history")
    # The worker's incident journal, read on the laptop: the failed Bash call, counted and listed.
    rows = failures["failures"]["rows"]
    assert failures["failures"]["rows_total"] == 1 and rows[0]["operation"].startswith("Bash:")
    assert "1 unclassified tool error" in failures["failures"]["line"]


def test_a_turn_queued_from_a_laptop_never_widens_what_the_agent_may_do_on_the_worker(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("careful", permission_mode="acceptEdits")
    laptop.corral("create", "Widened", "--ref", "wide")
    # The laptop's person launches with settings that widen the agent and make corral run a command:
    # they are recorded on the task, and a worker takes none of them from it.
    pwned = team.root / "pwned"
    host.start_worker()
    host.wait_event("started")
    env_widening = {"CORRAL_PERMISSION_MODE": "bypassPermissions", "CORRAL_POST_TURN_CHECK": f"touch {pwned}"}
    started = subprocess.run(
        [sys.executable, "-m", "corral", "start", "wide", "--json"],
        cwd=laptop.clone,
        env={**laptop.env(), **env_widening},
        capture_output=True,
        text=True,
    )
    assert started.returncode == 0, started.stderr
    assert laptop.json("show", "wide")["task"]["settings"]["permission_mode"]["value"] == "bypassPermissions"
    until(lambda: _status(laptop, "wide") == "blocked", timeout=60, poll=0.2, what="it ran")
    [call] = host.calls()
    mode = call["argv"][call["argv"].index("--permission-mode") + 1]
    assert mode == "acceptEdits"
    assert not pwned.exists()


def test_a_worker_claims_only_turns_of_the_projects_its_own_settings_list(team: Team) -> None:
    laptop = team.laptop()
    other_remote = team.root / "other.git"
    git(team.root, "clone", "-q", "--bare", str(team.remote), str(other_remote))
    # Another project (its own root commit) that only the laptop has: its turns wait for a worker of it.
    other = team.root / "other-project"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "x.txt").write_text("x\n")
    git(other, "add", "x.txt")
    git(other, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-m", "other root")
    git(other, "remote", "add", "origin", str(other_remote))
    git(other, "push", "-q", "--force", "origin", "main")
    host = team.worker("picky")
    host.start_worker()
    host.wait_event("started")
    run = {"cwd": other, "env": laptop.env(), "capture_output": True, "text": True}
    assert (
        subprocess.run([sys.executable, "-m", "corral", "create", "Elsewhere", "--ref", "away"], **run).returncode == 0
    )
    queued = subprocess.run([sys.executable, "-m", "corral", "start", "away", "--json"], **run)
    assert queued.returncode == 0, queued.stderr
    laptop.corral("create", "Mine", "--ref", "mine")
    laptop.json("start", "mine")
    until(lambda: _status(laptop, "mine") == "blocked", timeout=60, poll=0.2, what="its own project's turn ran")
    claimed = [e["task"] for e in host.events() if e["event"] == "claim"]
    assert claimed == [laptop.json("show", "mine")["task"]["id"]]
    shown = json.loads(subprocess.run([sys.executable, "-m", "corral", "show", "away", "--json"], **run).stdout)
    assert shown["task"]["status"] == "working" and shown["lease"]["state"] == "queued"


def test_a_usage_limit_one_worker_meets_pauses_the_other_hosts_too(team: Team) -> None:
    from datetime import timedelta

    from corral.domain.clock import utcnow
    from corral.engine.runtime.usage_pause import UsagePauses

    team.laptop()
    hit, other = team.worker("hit"), team.worker("other")
    for host in (hit, other):
        host.start_worker()
        host.wait_event("started")
    reset = utcnow() + timedelta(minutes=20)
    # What a supervisor on the first host writes when its harness reports the account's limit.
    UsagePauses(hit.home / "corral" / "usage-limits.json").note("claude:acct", "claude", reset, "limit", "t1")
    theirs = UsagePauses(other.home / "corral" / "usage-limits.json")
    noted = until(
        lambda: theirs.read().get("claude:acct"), timeout=LEASE * 3, poll=0.2, what="the other host holds the pause"
    )
    assert noted["resets_at"] == rfc3339(reset)
    assert not theirs.turn("claude:acct", "t2").go


def _row(host, ref: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return next(r for r in host.json("list")["tasks"] if r["ref"] == ref)


def test_a_turn_queued_before_any_worker_ever_ran_waits_for_the_first(team: Team) -> None:
    laptop = team.laptop()
    laptop.corral("create", "Early", "--ref", "early")
    queued = laptop.json("start", "early")  # no worker has made the job queue's tables yet
    assert queued["queued"] is True
    shown = laptop.json("show", "early")
    assert shown["lease"]["state"] == "queued" and shown["task"]["status"] == "working"
    row = _row(laptop, "early")
    assert (row["host"], row["substate"]) == ("queued", "queued")
    assert "working(queued)" in laptop.corral("list").stdout
    assert "Worker:   queued for a worker since" in laptop.corral("show", "early").stdout
    host = team.worker("late")
    host.start_worker()
    until(lambda: _status(laptop, "early") == "blocked", timeout=60, poll=0.2, what="the first worker ran it")


def test_a_worker_that_cannot_prepare_a_claimed_turn_rests_it_with_the_cause(team: Team) -> None:
    laptop = team.laptop()
    host = team.worker("blocked")
    laptop.corral("create", "Stranded", "--ref", "strand")
    host.start_worker()
    host.wait_event("started")
    [state] = (host.home / "corral" / "projects").iterdir()
    (state / "worktrees").mkdir(exist_ok=True)
    (state / "worktrees" / "strand").write_text("in the way\n")  # where the claimed turn's worktree goes
    laptop.json("start", "strand")
    failed = host.wait_event("turn-failed", timeout=30)
    assert "already exists" in failed["message"]
    # Explained at once, not after a grace period: interrupted with the fault, the lease let go.
    shown = laptop.json("show", "strand")
    assert shown["task"]["status"] == "interrupted" and shown["lease"]["state"] == "released"
    assert shown["resting_cause"]["code"] == "internal-fault" and "already exists" in json.dumps(shown["resting_cause"])
