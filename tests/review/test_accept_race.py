"""Accept and start under contention, through real processes: nothing fails raw, nothing is hidden.

- Two ``corral accept`` of different tasks into one target at once both land. A git
  ``reference-transaction`` hook is the barrier: it holds the first accept inside its
  compare-and-swap of the target until the second is known to be running, so the two
  really overlap. When their changes conflict, one lands and the other parks with a
  cause ``show`` explains.
- A target moved by someone else under the compare-and-swap (the hook refuses the first
  swap and moves the target, as a push landing at that instant would) is merged again onto
  its new tip, verified, and swapped again.
- A dirty destination whose stash cannot be put back: ``accept`` exits non-zero naming the
  kept stash and the exact command that restores it, and ``show`` (text and ``--json``)
  says so until the person has restored it.
- Of two ``corral start`` of one task at once, the loser is told the task already started.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import control, tasks, turns
from corral.engine.project import Project
from corral.engine.read.checkout import give_back
from tests.conftest import git

#: Holds the accept swapping the target (``$BARRIER_TARGET``) until ``$BARRIER/go`` exists.
HOLD_HOOK = """#!/bin/sh
[ -n "$BARRIER" ] || exit 0
refs=$(cat)
[ "$1" = prepared ] || exit 0
case "$refs" in *" refs/heads/$BARRIER_TARGET"*) ;; *) exit 0 ;; esac
[ -e "$BARRIER/go" ] && exit 0
touch "$BARRIER/held"
while [ ! -e "$BARRIER/go" ]; do sleep 0.05; done
"""

#: Refuses the first swap of ``$BARRIER_TARGET`` and, once its lock is gone, moves the target to
#: ``$PERSON_COMMIT``: a commit that landed on the target at the instant the accept swapped it.
MOVE_HOOK = """#!/bin/sh
[ -n "$BARRIER" ] || exit 0
refs=$(cat)
case "$refs" in *" refs/heads/$BARRIER_TARGET"*) ;; *) exit 0 ;; esac
if [ "$1" = prepared ] && [ ! -e "$BARRIER/refused" ]; then
    touch "$BARRIER/refused"
    exit 1
fi
if [ "$1" = aborted ] && [ -e "$BARRIER/refused" ] && [ ! -e "$BARRIER/moved" ]; then
    touch "$BARRIER/moved"
    env -u BARRIER git update-ref "refs/heads/$BARRIER_TARGET" "$PERSON_COMMIT"
fi
exit 0
"""


def own_file(ref: str, path: str | None = None, content: str | None = None) -> list[dict[str, Any]]:
    return [
        {"init": True},
        {"write": {"path": path or f"{ref}.txt", "content": content or f"the work of {ref}\n"}},
        {"commit": f"work of {ref}"},
        {"result": f"Did {ref}."},
    ]


def blocked(proj: Project, *refs: str, target: str | None = None) -> None:
    for ref in refs:
        tasks.create(proj, f"Task {ref}", actor=Actor.HUMAN, ref=ref, target=target)
        turns.start(proj, ref, actor=Actor.HUMAN)
    for ref in refs:
        assert control.wait(proj, ref, timeout=60).task.status is Status.BLOCKED, ref


def install_hook(repo: Path, body: str) -> None:
    hook = repo / ".git" / "hooks" / "reference-transaction"
    hook.write_text(body)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)


def accept_process(repo: Path, ref: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "accept", ref, "--json"],
        cwd=repo,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(what: str, ready: Any, procs: list[subprocess.Popen[str]]) -> None:
    """Until ``ready()``; a process that ended first fails the test with its output."""
    deadline = time.monotonic() + 60
    while not ready():
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"{what}: a process ended first (exit {p.returncode}): {out}\n{err}")
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def status(proj: Project, ref: str) -> Status:
    with proj.store.read() as tx:
        return tx.task_by_ref(ref).status


def overlapping_accepts(proj: Project, repo: Path, tmp_path: Path, target: str) -> list[tuple[int, str, str]]:
    """``first`` and ``second`` accepted at once: the second runs while the first swaps the target."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    install_hook(repo, HOLD_HOOK)
    env = {"BARRIER": str(barrier), "BARRIER_TARGET": target}
    first = accept_process(repo, "first", env)
    wait_for("the first accept holds the target", (barrier / "held").exists, [first])
    second = accept_process(repo, "second", env)
    # The second accept has passed its pre-flight and reads merging: it can only go on once the
    # first, which holds the target, lets go.
    wait_for("the second accept reaches the merge", lambda: status(proj, "second") is Status.MERGING, [second])
    assert status(proj, "first") is Status.MERGING
    (barrier / "go").touch()
    outs = [p.communicate(timeout=120) for p in (first, second)]
    return [(p.returncode, out, err) for p, (out, err) in zip((first, second), outs, strict=True)]


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["main", "release"], ids=["checked-out-target", "target-not-checked-out"])
def test_two_accepts_into_one_target_at_once_both_land(proj, agent, repo, corral, tmp_path, target):
    if target != "main":
        git(repo, "branch", target)
    old = git(repo, "rev-parse", target)
    agent.script(own_file("first"), own_file("second"))
    blocked(proj, "first", "second", target=target)
    results = overlapping_accepts(proj, repo, tmp_path, target)
    for code, out, err in results:
        assert code == 0, (out, err)
        assert "cannot lock ref" not in out + err and "update-ref" not in out + err
        assert events(out)[-1]["task"]["status"] == "complete"
    assert git(repo, "rev-list", "--count", f"{old}..{target}") == "2"
    for ref in ("first", "second"):
        assert git(repo, "show", f"{target}:{ref}.txt") == f"the work of {ref}"
        assert corral.json("show", ref)["task"]["status"] == "complete"
    # the second was merged onto the first's commit, not onto the tip it read before it waited
    firsts = git(repo, "log", "--format=%H %s", target).splitlines()
    assert firsts[0].endswith("Task second") and firsts[1].endswith("Task first")
    if target == "main":
        assert git(repo, "status", "--porcelain") == ""  # the checkout followed both


@pytest.mark.slow
def test_two_conflicting_accepts_at_once_one_lands_and_the_other_parks_explained(proj, agent, repo, corral, tmp_path):
    agent.script(own_file("first", "README.md", "first's readme\n"), own_file("second", "README.md", "second's\n"))
    blocked(proj, "first", "second")
    (won, won_out, _), (lost, lost_out, lost_err) = overlapping_accepts(proj, repo, tmp_path, "main")
    assert won == 0 and events(won_out)[-1]["task"]["status"] == "complete"
    assert lost == 1, (lost_out, lost_err)
    error = events(lost_out)[-1]
    assert error["event"] == "error" and error["error"]["code"] == "merge-conflict"
    assert "README.md" in error["error"]["message"] and "Nothing was merged" in error["error"]["message"]
    assert "update-ref" not in lost_out + lost_err and "cannot lock ref" not in lost_out + lost_err
    assert git(repo, "show", "main:README.md") == "first's readme"
    shown = corral.json("show", "second")
    assert shown["task"]["status"] == "blocked"
    assert shown["resting_cause"]["code"] == "merge-conflict-on-accept"
    text = corral.ok("show", "second").stdout
    assert "Accepting it conflicted with its target, which had moved" in text and "README.md" in text
    assert "corral unblock second -m" in text and "corral accept second" in text  # never sync: it aborts on it
    assert git(repo, "status", "--porcelain") == ""


def person_commit(repo: Path, target: str, path: str, content: str) -> str:
    """A commit on top of ``target`` that is not on any branch yet: the person's, about to land."""
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=content, capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "person-index")}
    subprocess.run(["git", "read-tree", target], cwd=repo, env=env, check=True)
    subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"], cwd=repo, env=env, check=True
    )
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, text=True, check=True)
    return git(repo, "commit-tree", tree.stdout.strip(), "-p", target, "-m", "the person's commit")


@pytest.mark.slow
@pytest.mark.parametrize("clash", [False, True], ids=["apart", "clashing"])
def test_a_target_moved_under_the_swap_is_merged_again_or_parks_explained(proj, agent, repo, corral, tmp_path, clash):
    git(repo, "branch", "release")
    agent.script(own_file("moved", "README.md" if clash else None, "the agent's readme\n" if clash else None))
    blocked(proj, "moved", target="release")
    theirs = person_commit(repo, "release", "README.md" if clash else "person.txt", "the person's\n")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    install_hook(repo, MOVE_HOOK)
    env = {"BARRIER": str(barrier), "BARRIER_TARGET": "release", "PERSON_COMMIT": theirs}
    result = corral("accept", "moved", "--json", env=env)
    assert (barrier / "refused").exists() and (barrier / "moved").exists()  # the swap really was refused once
    assert "cannot lock ref" not in result.stdout + result.stderr
    if not clash:
        assert result.returncode == 0, result.stdout + result.stderr
        assert git(repo, "rev-parse", "release^") == theirs  # merged onto the moved tip
        assert git(repo, "show", "release:person.txt") == "the person's"
        assert git(repo, "show", "release:moved.txt") == "the work of moved"
        assert corral.json("show", "moved")["task"]["status"] == "complete"
        return
    assert result.returncode == 1, result.stdout + result.stderr
    assert events(result.stdout)[-1]["error"]["code"] == "merge-conflict"
    assert git(repo, "rev-parse", "release") == theirs  # the person's commit stands, nothing else landed
    shown = corral.json("show", "moved")
    assert shown["task"]["status"] == "blocked" and shown["resting_cause"]["code"] == "merge-conflict-on-accept"


@pytest.mark.slow
def test_a_stash_that_cannot_be_put_back_fails_the_accept_and_stays_named_until_restored(proj, agent, repo, corral):
    agent.script(own_file("dirty", "README.md", "# demo\nthe agent's line\n"))
    blocked(proj, "dirty")
    (repo / "README.md").write_text("# demo\nmy own uncommitted line\n")  # overlaps the merge
    result = corral("accept", "dirty")
    assert result.returncode == 1, result.stdout + result.stderr
    stash = git(repo, "stash", "list", "--format=%H")
    assert stash and len(stash.split()) == 1
    command = give_back(repo, stash)
    assert "dirty is complete" in result.stdout  # the merge stands, and says so
    assert stash in result.stderr and command in result.stderr
    assert "they overlap the merge in README.md" in result.stderr
    assert git(repo, "show", "main:README.md") == "# demo\nthe agent's line"

    for _ in range(2):  # said on every look until the person acts, not once
        text = corral.ok("show", "dirty").stdout
        assert "Your local changes are kept aside" in text and command in text
        doc = corral.json("show", "dirty")
        kept = doc["destination_restore_conflict"]
        assert kept["stash"] == stash and kept["command"] == command and str(repo) == kept["worktree"]

    # the person restores it (the merge conflicts with their line; they keep theirs) and drops the stash
    subprocess.run(command.split(), capture_output=True)
    (repo / "README.md").write_text("# demo\nmy own uncommitted line\n")
    git(repo, "reset", "-q")
    git(repo, "stash", "drop", "-q")
    assert corral.json("show", "dirty")["destination_restore_conflict"] is None
    assert "kept aside" not in corral.ok("show", "dirty").stdout


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it reached the task through the store)."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


#: Holds the ``start`` whose ``worktree add`` checks out the task's branch until ``$BARRIER/go`` exists.
CHECKOUT_HOOK = """#!/bin/sh
[ -n "$BARRIER" ] || exit 0
[ -e "$BARRIER/go" ] && exit 0
touch "$BARRIER/held"
while [ ! -e "$BARRIER/go" ]; do sleep 0.05; done
"""


def start_process(repo: Path, ref: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "start", ref, "--json"],
        cwd=repo,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_the_loser_of_two_simultaneous_starts_is_told_the_task_already_started(proj, agent, repo, corral, tmp_path):
    agent.script(default=[{"init": True}, {"result": "done"}])
    tasks.create(proj, "Start me twice", actor=Actor.HUMAN, ref="twice")
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(CHECKOUT_HOOK)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    env = {"BARRIER": str(barrier)}
    winner = start_process(repo, "twice", env)
    wait_for("the first start makes the worktree", (barrier / "held").exists, [winner])
    loser = start_process(repo, "twice", env)
    # The second start has read the task (backlog still: the first holds it inside `worktree add`);
    # it must wait for the first, or fail at once, which the checks below catch.
    deadline = time.monotonic() + 60
    while loser.poll() is None and not has_open(loser.pid, proj.paths.db):
        assert time.monotonic() < deadline, "the second start never reached the task"
        time.sleep(0.02)
    assert status(proj, "twice") is Status.BACKLOG
    time.sleep(0.5)  # it goes on to the task's lock (a wait this test does not measure)
    (barrier / "go").touch()
    won_out, won_err = winner.communicate(timeout=60)
    lost_out, lost_err = loser.communicate(timeout=60)
    assert winner.returncode == 0, won_out + won_err
    assert loser.returncode == 3, lost_out + lost_err
    error = json.loads(lost_out.splitlines()[-1])["error"]
    assert error["code"] == "already-started"
    assert error["message"] == "twice has already started: it is working."
    assert "corral wait twice" in error["hint"]
    for word in ("branch", "rename", "git ", "worktree"):
        assert word not in error["message"] + error["hint"], error
    assert control.wait(proj, "twice", timeout=60).task.status is Status.BLOCKED
    shown = corral.json("show", "twice")
    assert shown["resting_cause"] is None  # the loser never marked the winner's task as failed
    assert len(agent.calls()) == 1
    assert git(repo, "worktree", "list", "--porcelain").count("branch refs/heads/corral/twice") == 1


@pytest.mark.slow
def test_many_simultaneous_start_pairs_each_have_one_winner_and_one_told_loser(proj, agent, repo, corral):
    agent.script(default=[{"init": True}, {"result": "done"}])
    refs = [f"pair-{n}" for n in range(6)]
    for ref in refs:
        tasks.create(proj, f"Start {ref} twice", actor=Actor.HUMAN, ref=ref)
    for ref in refs:
        procs = [start_process(repo, ref, {}) for _ in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 3], outs
        lost = next(out for p, (out, _) in zip(procs, outs, strict=True) if p.returncode == 3)
        error = json.loads(lost.splitlines()[-1])["error"]
        assert error["code"] == "already-started", error
        assert "branch" not in error["message"] + error["hint"]
    for ref in refs:
        assert control.wait(proj, ref, timeout=60).task.status is Status.BLOCKED
        assert corral.json("show", ref)["resting_cause"] is None


@pytest.mark.slow
def test_a_target_git_will_not_move_is_refused_plainly_and_nothing_is_merged(proj, agent, repo, corral, tmp_path):
    git(repo, "branch", "release")
    before = git(repo, "rev-parse", "release")
    agent.script(own_file("guarded"))
    blocked(proj, "guarded", target="release")
    install_hook(
        repo,
        '#!/bin/sh\n[ -n "$BARRIER" ] || exit 0\ncase "$(cat)" in *" refs/heads/release"*) '
        '[ "$1" = prepared ] && { echo "release is frozen" >&2; exit 1; } ;; esac\nexit 0\n',
    )
    result = corral("accept", "guarded", "--json", env={"BARRIER": str(tmp_path)})
    assert result.returncode == 1
    error = events(result.stdout)[-1]["error"]
    assert error["code"] == "target-refused"
    assert error["message"].startswith("git would not move release to the merge of guarded (")
    assert "nothing was merged" in error["message"] and "corral accept guarded" in error["hint"]
    assert "update-ref" not in error["message"] + error["hint"]
    assert git(repo, "rev-parse", "release") == before
    assert corral.json("show", "guarded")["task"]["status"] == "blocked"
