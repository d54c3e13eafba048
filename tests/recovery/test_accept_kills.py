"""A killed accept never corrupts the person's checkout: every crash point, random kills, twenty at once.

The person's checkout (``main``, checked out in the repository) is dirty the way a real
one is: a modified file the merge does not touch, an untracked note, a staged new file,
and an edit to a file the merge changes elsewhere (so the accept stashes it and pops it
back). After each kill the stranded-merge sweep recovers, and the checkout is compared
byte for byte with what the person had: their edits present and uncommitted, the index
as before, ``HEAD`` at the new tip when the merge landed (the accepted files present),
at the old one otherwise, and no stash left behind.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.operations.refresh import settle
from corral.engine.project import Project
from corral.engine.read import checkout
from corral.engine.read.checkout import give_back
from corral.engine.recovery import destination, in_flight, merges
from tests.conftest import git

#: Each task has a file of its own on the target; its agent changes the first line, the person the last.
BASE = "".join(f"line {n}\n" for n in range(1, 13))
AGENT = BASE.replace("line 1\n", "line 1, improved by the agent\n")
MINE = BASE.replace("line 12\n", "line 12, my uncommitted edit\n")
BOTH = AGENT.replace("line 12\n", "line 12, my uncommitted edit\n")
RIVAL = BASE.replace("line 1\n", "line 1, my rival edit\n")

ACCEPT_POINTS = [
    "accept.marked",
    "accept.merging",
    "accept.before-update-ref",
    "accept.after-update-ref",
    "accept.destination-updated",
    "accept.completed",
]
LANDED = {"accept.after-update-ref", "accept.destination-updated", "accept.completed"}


def cli(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=repo,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def work(ref: str) -> list[dict[str, Any]]:
    return [
        {"init": True},
        {"write": {"path": f"{ref}-new.txt", "content": f"accepted work of {ref}\n"}},
        {"write": {"path": f"{ref}.txt", "content": AGENT}},
        {"commit": f"work of {ref}"},
        {"result": f"Did {ref}."},
    ]


def own_file(ref: str) -> list[dict[str, Any]]:
    return [
        {"init": True},
        {"write": {"path": f"{ref}-new.txt", "content": f"accepted work of {ref}\n"}},
        {"commit": f"work of {ref}"},
        {"result": f"Did {ref}."},
    ]


def seed(repo: Path, refs: list[str]) -> None:
    """Each task's own file, committed on the target before its branch is made."""
    for ref in refs:
        (repo / f"{ref}.txt").write_text(BASE)
        git(repo, "add", f"{ref}.txt")
    git(repo, "commit", "-qm", "files for the tasks")


def blocked(proj: Project, *refs: str) -> None:
    """Start every task at once, then wait for each to rest blocked after its turn."""
    for ref in refs:
        tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref)
        turns.start(proj, ref, actor=Actor.HUMAN)
    for ref in refs:
        assert control.wait(proj, ref, timeout=60).task.status is Status.BLOCKED, ref


def make_dirty(repo: Path, ref: str | None = None) -> None:
    """What a person has in progress: never committed, some of it staged, one edit where the merge goes."""
    (repo / "README.md").write_text(f"# demo\nmy local edit before {ref}\n")
    (repo / "notes.txt").write_text(f"my untracked note before {ref}\n")
    (repo / "staged.txt").write_text(f"staged but not committed before {ref}\n")
    git(repo, "add", "staged.txt")
    if ref is not None and (repo / f"{ref}.txt").exists():
        (repo / f"{ref}.txt").write_text(MINE)


def clean(repo: Path) -> None:
    """The person starts over from the target's tip (between iterations, not part of what is checked)."""
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")


def snapshot(repo: Path) -> dict[str, Any]:
    """The checkout as bytes: every file outside .git, the index entries, HEAD, the stash list."""
    files = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo)
        if rel.parts[0] == ".git" or not path.is_file():
            continue
        files[str(rel)] = path.read_bytes()
    index = {}
    for line in git(repo, "ls-files", "-s").splitlines():
        meta, _, name = line.partition("\t")
        index[name] = meta
    return {
        "files": files,
        "index": index,
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "stash": git(repo, "stash", "list"),
    }


def expected_after(before: dict[str, Any], repo: Path, old: str, new: str) -> dict[str, Any]:
    """What the person should have once ``old``→``new`` landed: their edits kept, the merge's paths at new.

    A path the person had edited and the merge changed holds both edits (their line 12, the agent's line 1).
    """
    files = dict(before["files"])
    index = dict(before["index"])
    for path in git(repo, "diff", "--name-only", "--no-renames", old, new).splitlines():
        entry = git(repo, "ls-tree", new, "--", path)
        meta, _, _ = entry.partition("\t")
        mode, _, sha = meta.split(" ")
        index[path] = f"{mode} {sha} 0"
        blob = subprocess.run(["git", "cat-file", "blob", sha], cwd=repo, capture_output=True, check=True).stdout
        files[path] = BOTH.encode() if before["files"].get(path) == MINE.encode() else blob
    return {**before, "files": files, "index": index, "head": new}


def recover(proj: Project, ref: str) -> Any:
    """The stranded-merge sweep, from the reconciler, until the task no longer reads merging."""
    deadline = time.monotonic() + 30
    while True:
        settle(proj)
        with proj.store.read() as tx:
            task = tx.task_by_ref(ref)
        if task.status is not Status.MERGING:
            return task
        assert time.monotonic() < deadline, f"{ref} still merging"
        time.sleep(0.1)  # a git child of the killed accept may still hold the index


def assert_checkout(repo: Path, before: dict[str, Any], task: Any, proj: Project, *, landed: bool) -> None:
    after = snapshot(repo)
    assert after["branch"] == "refs/heads/main"
    assert after["stash"] == "", (
        "a stash was left behind",
        task.metadata.get(destination.RESTORE_CONFLICT, {}).get("message"),
    )
    assert destination.RESTORE_CONFLICT not in task.metadata and in_flight.JOURNAL not in task.metadata
    if not landed:
        assert task.status is Status.BLOCKED
        assert after == before  # exactly what the person had
        return
    assert task.status is Status.COMPLETE
    new = git(repo, "rev-parse", "main")
    assert git(repo, "log", "-1", "--format=%(trailers:key=Corral-Task,valueonly)", new).strip() == task.id
    assert after == expected_after(before, repo, before["head"], new)
    assert (repo / f"{task.ref}-new.txt").read_text() == f"accepted work of {task.ref}\n"
    assert checkout.check(proj) == []


# -- every crash point --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_accept_crash_point_is_recovered_to_what_the_person_had(proj, agent, repo, tmp_path):
    refs = [f"cp-{i}" for i in range(len(ACCEPT_POINTS) + 1)]
    seed(repo, refs)
    agent.script(*(work(ref) for ref in refs))
    blocked(proj, *refs)
    # the points one accept with a dirty checked-out target passes are exactly the ones crashed below
    trace = tmp_path / "trace"
    make_dirty(repo, refs[-1])
    assert cli(repo, "accept", refs[-1], env={"CORRAL_CRASH_TRACE": str(trace)}).returncode == 0
    assert (repo / f"{refs[-1]}.txt").read_text() == BOTH
    passed = {p.split("#")[0] for p in trace.read_text().split() if p.startswith("accept.")}
    assert passed == set(ACCEPT_POINTS)
    for ref, point in zip(refs, ACCEPT_POINTS, strict=False):
        clean(repo)
        make_dirty(repo, ref)
        before = snapshot(repo)
        died = cli(repo, "accept", ref, env={"CORRAL_CRASH_AT": point, "CORRAL_CRASH_HOW": "kill"})
        assert died.returncode == -signal.SIGKILL, (point, died.stderr)
        task = recover(proj, ref)
        assert_checkout(repo, before, task, proj, landed=point in LANDED)


def crash_after_update_ref(repo: Path, ref: str) -> None:
    died = cli(repo, "accept", ref, env={"CORRAL_CRASH_AT": "accept.after-update-ref", "CORRAL_CRASH_HOW": "kill"})
    assert died.returncode == -signal.SIGKILL, died.stderr


@pytest.mark.slow
def test_a_stranded_accept_whose_pop_conflicts_keeps_the_stash_and_names_it(proj, agent, repo):
    seed(repo, ["clash"])
    agent.script(work("clash"))
    blocked(proj, "clash")
    (repo / "clash.txt").write_text(RIVAL)  # the same line the agent changed
    crash_after_update_ref(repo, "clash")
    task = recover(proj, "clash")
    assert task.status is Status.COMPLETE
    note = task.metadata[destination.RESTORE_CONFLICT]
    stash = note["stash"]
    assert note["code"] == "destination-restore-conflict"
    assert note["command"] == give_back(repo, stash)
    assert git(repo, "stash", "list", "--format=%H") == stash
    assert git(repo, "status", "--porcelain") == ""  # at the new tip, nothing half-applied
    assert (repo / "clash.txt").read_text() == AGENT
    assert [f.code for f in checkout.check(proj)] == ["stash-kept"]
    # the named command brings the person's edit back (a conflict to resolve); dropping the stash clears the note
    subprocess.run(note["command"].split(), capture_output=True, check=False)
    assert "my rival edit" in (repo / "clash.txt").read_text()
    git(repo, "stash", "drop")
    assert destination.clear_resolved(proj) == 1
    with proj.store.read() as tx:
        assert destination.RESTORE_CONFLICT not in tx.task_by_ref("clash").metadata


@pytest.mark.slow
def test_a_pop_conflict_in_a_live_accept_is_in_its_json_lines(proj, agent, repo):
    seed(repo, ["live"])
    agent.script(work("live"))
    blocked(proj, "live")
    (repo / "live.txt").write_text(RIVAL)
    result = cli(repo, "accept", "live", "--json")
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    [conflict] = [e for e in events if e["event"] == "destination-restore-conflict"]
    stash = git(repo, "stash", "list", "--format=%H")
    assert conflict["code"] == "destination-restore-conflict" and conflict["stash"] == stash
    assert conflict["command"] == give_back(repo, stash)
    [done] = [e for e in events if e["event"] == "result"]
    assert done["warning"] and stash in done["warning"]
    # the merge stands, yet the accept exits non-zero with the conflict as its error, named last
    assert result.returncode == 1
    assert events[-1]["event"] == "error" and events[-1]["error"]["code"] == "destination-restore-conflict"
    assert stash in events[-1]["error"]["message"]
    with proj.store.read() as tx:
        assert tx.task_by_ref("live").metadata[destination.RESTORE_CONFLICT]["stash"] == stash


@pytest.mark.slow
def test_a_checkout_that_cannot_be_brought_along_is_left_as_it_was_and_said_so(proj, agent, repo):
    seed(repo, ["stuck"])
    agent.script(work("stuck"))
    blocked(proj, "stuck")
    make_dirty(repo, "stuck")
    before = snapshot(repo)
    crash_after_update_ref(repo, "stuck")
    # meanwhile the person stages a file where the merge adds one: the index is neither the old tree nor the new
    (repo / "stuck-new.txt").write_text("the person's own file\n")
    git(repo, "add", "stuck-new.txt")
    theirs = git(repo, "ls-files", "-s", "stuck-new.txt").split("\t")[0]
    task = recover(proj, "stuck")
    assert task.status is Status.COMPLETE
    note = task.metadata[destination.RESTORE_CONFLICT]
    assert "could not be brought up to date" in note["message"]
    assert note["command"] == f"git -C {repo} read-tree -m -u {before['head']} {git(repo, 'rev-parse', 'main')}"
    after = snapshot(repo)
    # exactly as before the accept (their stashed edit back in place) plus what they did since
    assert after["files"] == before["files"] | {"stuck-new.txt": b"the person's own file\n"}
    assert after["index"] == before["index"] | {"stuck-new.txt": theirs}
    assert after["stash"] == ""
    assert "checkout-behind-ref" in [f.code for f in checkout.check(proj)]


# -- accepts into one target serialize ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_twenty_accepts_at_once_into_a_checked_out_main_all_land(proj, agent, repo):
    refs = [f"many-{i:02d}" for i in range(20)]
    agent.script(*(own_file(ref) for ref in refs))
    blocked(proj, *refs)
    make_dirty(repo)
    before = snapshot(repo)
    old = before["head"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", ref, "--json"],
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ref in refs
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * 20, [
        line for o, _ in outs for line in o.splitlines() if '"error"' in line
    ]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert all(r["task"]["status"] == "complete" and r["warning"] is None for r in results)
    assert git(repo, "rev-list", "--count", f"{old}..main") == "20"
    assert len({r["commit"] for r in results}) == 20
    after = snapshot(repo)
    want = expected_after(before, repo, old, git(repo, "rev-parse", "main"))
    assert after == want
    for ref in refs:
        assert (repo / f"{ref}-new.txt").read_text() == f"accepted work of {ref}\n"
    assert checkout.check(proj) == []


@pytest.mark.slow
def test_the_loser_of_two_conflicting_accepts_parks_with_a_cause_show_explains(proj, agent, repo, corral):
    agent.script(
        [{"init": True}, {"write": {"path": "README.md", "content": "first\n"}}, {"commit": "a"}, {"result": "a"}],
        [{"init": True}, {"write": {"path": "README.md", "content": "second\n"}}, {"commit": "b"}, {"result": "b"}],
    )
    blocked(proj, "one", "two")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", ref, "--json"], cwd=repo, stdout=subprocess.PIPE, text=True
        )
        for ref in ("one", "two")
    ]
    for p in procs:
        p.communicate(timeout=60)
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1]
    with proj.store.read() as tx:
        statuses = {ref: tx.task_by_ref(ref) for ref in ("one", "two")}
    loser = next(t for t in statuses.values() if t.status is not Status.COMPLETE)
    assert loser.status is Status.BLOCKED
    assert loser.resting_cause is not None and loser.resting_cause.code == merges.CONFLICT_CAUSE
    assert "README.md" in loser.resting_cause.details["summary"]
    shown = corral.json("show", loser.ref)
    assert shown["resting_cause"]["code"] == "merge-conflict-on-accept"
    assert git(repo, "status", "--porcelain") == ""


# -- create refuses a target that is not a branch -----------------------------------------------


def test_create_refuses_a_target_that_is_not_a_branch(corral, repo):
    git(repo, "tag", "v1")
    sha = git(repo, "rev-parse", "HEAD")
    for bad in ("HEAD", sha, sha[:8], "refs/heads/main", "v1", "main~1", "@", "ORIG_HEAD"):
        result = corral("create", "Bad target", "--target", bad, "--json")
        assert result.returncode == 2, (bad, result.stdout, result.stderr)
        err = json.loads(result.stdout)["error"] if "error" in json.loads(result.stdout) else json.loads(result.stdout)
        assert err["code"] == "target-not-a-branch", bad
        assert "--target" in err["hint"]
    assert corral.json("list", "--all")["tasks"] == []
    assert corral.json("create", "On main", "--target", "main")["task"]["target"] == "main"
    assert corral.json("create", "Not yet made", "--target", "release")["task"]["target"] == "release"


# -- doctor's check of a checked-out target -----------------------------------------------------


def test_the_checkout_check_finds_an_index_behind_its_ref_and_names_the_repair(proj, repo):
    (repo / "README.md").write_text("# demo\nmerged by corral\n")
    git(repo, "add", "README.md")
    tree = git(repo, "write-tree")
    git(repo, "reset", "-q")
    (repo / "README.md").write_text("# demo\n")
    old = git(repo, "rev-parse", "HEAD")
    msg = "Task x\n\nCorral-Task: t-1\nCorral-Session: s-1\n"
    new = subprocess.run(
        ["git", "commit-tree", tree, "-p", old], cwd=repo, input=msg, capture_output=True, text=True, check=True
    ).stdout.strip()
    git(repo, "update-ref", "refs/heads/main", new, old)  # the ref moved; index and files did not
    (repo / "mine.txt").write_text("mine\n")
    [finding] = checkout.check(proj)
    assert finding.code == "checkout-behind-ref" and finding.branch == "main"
    assert finding.details["paths"] == ["README.md"]
    assert finding.hint.endswith(f"git -C {repo} read-tree -m -u {old} {new}")
    subprocess.run(finding.hint, shell=True, check=True)
    assert checkout.check(proj) == []
    assert git(repo, "status", "--porcelain") == "?? mine.txt"


# -- random kills -------------------------------------------------------------------------------

#: Iterations of the kill loop: at least 40 in CI; fewer by hand, where the other loops already run.
ACCEPT_KILLS = 40 if os.environ.get("CI") else 12
#: Tasks made per batch: a killed accept that did not land is accepted again, so most kills need no new turn.
BATCH = 10
#: The loop runs in parts, each a test of its own (its own repository and seed), whose kills add up to
#: :data:`ACCEPT_KILLS`: no one test holds a worker of a parallel run for the whole loop.
PARTS = 2


def share(total: int, part: int) -> int:
    """The kills of part ``part`` of a loop of ``total``: the parts' shares add up to it."""
    return total // PARTS + (1 if part < total % PARTS else 0)


def test_the_parts_of_the_accept_kill_loop_add_up_to_its_kills():
    for total in (40, 12, ACCEPT_KILLS):
        assert sum(share(total, part) for part in range(PARTS)) == total
        assert all(share(total, part) >= total // PARTS > 0 for part in range(PARTS))


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("part", range(PARTS))
def test_random_kills_of_accept_with_a_dirty_checked_out_target(proj, agent, repo, part):
    base = int(os.environ.get("CORRAL_KILL_SEED") or time.time_ns() % 1_000_000_007)
    rng = random.Random(base ^ zlib.crc32(b"accept") ^ part)
    kills = share(ACCEPT_KILLS, part)
    print(f"\nkill-loop seed: CORRAL_KILL_SEED={base} (part {part})")
    made = 0
    pool: list[str] = []  # tasks resting blocked, ready for an accept

    def refill() -> None:
        nonlocal made
        batch = [f"rk-{made + i}" for i in range(BATCH)]
        made += len(batch)
        clean(repo)
        seed(repo, batch)
        agent.script(*(work(ref) for ref in batch))
        blocked(proj, *batch)
        pool.extend(batch)

    # how long an unkilled accept takes, so the kill delays cover the whole of one
    refill()
    make_dirty(repo, pool[0])
    start = time.monotonic()
    assert cli(repo, "accept", pool.pop(0)).returncode == 0
    span = time.monotonic() - start
    outcomes: list[str] = []
    for i in range(kills):
        if not pool:
            refill()
        ref = pool[0]
        clean(repo)
        make_dirty(repo, ref)
        before = snapshot(repo)
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", ref], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        time.sleep(rng.uniform(0.0, span))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        with proj.store.read() as tx:
            stranded = tx.task_by_ref(ref).status is Status.MERGING
        if stranded and git(repo, "rev-parse", "main") != before["head"]:
            outcomes.append("stranded after the ref moved")  # the window that once corrupted the checkout
        task = recover(proj, ref)
        assert task.status in (Status.BLOCKED, Status.COMPLETE), (i, task.status)
        landed = task.status is Status.COMPLETE
        outcomes.append("landed" if landed else "restored")
        if landed:
            pool.pop(0)
        assert_checkout(repo, before, task, proj, landed=landed)
    print(f"accept kills: {kills}, {dict(sorted(Counter(outcomes).items()))}")
    assert outcomes.count("landed") + outcomes.count("restored") == kills
