"""A stranded local merge is escaped by the commands that act on it: after an accept died
mid-merge, ``reject``, ``close``, ``submit`` and ``unblock`` put the task back to the status the accept
recorded, then do their job; a merge in flight (its accept holding the task's lock) is refused.

No read command runs in between: the command itself escapes the stranded merge.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.domain.status import Status
from corral.engine.recovery.target_locks import target_lock
from tests.conftest import git
from tests.review.test_accept import blocked_with, work

DIE_MERGING = {"CORRAL_CRASH_AT": "accept.merging", "CORRAL_CRASH_HOW": "kill"}


def _stranded(proj, agent, corral, ref: str, *more) -> None:
    """A blocked task whose accept was killed once it read merging, before its merge moved anything."""
    blocked_with(proj, agent, ref, work(f"{ref}.txt", f"{ref}\n"))
    if more:
        agent.script(*more)
    died = corral.process("accept", ref, env=DIE_MERGING)
    assert died.returncode == -9, died.stderr
    assert _task(proj, ref).status is Status.MERGING


def _task(proj, ref: str):
    with proj.store.read() as tx:
        return tx.task_by_ref(ref)


def _moves(proj, ref: str) -> list[tuple[str | None, str, str]]:
    with proj.store.read() as tx:
        task = tx.task_by_ref(ref)
        return [
            (c.from_status.value if c.from_status else None, c.to_status.value, c.actor.value)
            for c in tx.status_changes(task.id)
        ]


@pytest.mark.parametrize("how", ["reject", "close"])
def test_reject_and_close_escape_a_stranded_merge(proj, agent, corral, repo: Path, how: str) -> None:
    _stranded(proj, agent, corral, "gone")
    main = git(repo, "rev-parse", "main")
    ended = corral(how, "gone", "-m", "not wanted after all")
    assert ended.returncode == 0, ended.stderr
    task = _task(proj, "gone")
    assert task.status is Status.ABANDONED and "accept_in_flight_from" not in task.metadata
    assert _moves(proj, "gone")[-2:] == [("merging", "blocked", "system"), ("blocked", "abandoned", "human")]
    assert git(repo, "rev-parse", "main") == main  # nothing of the dead accept landed
    assert git(repo, "rev-parse", "refs/corral/archive/gone")  # the work is kept, as any close keeps it


def test_submit_escapes_a_stranded_merge(proj, agent, corral, repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo, "remote", "add", "origin", str(remote))
    _stranded(proj, agent, corral, "pushme")
    submitted = corral("submit", "pushme")
    assert submitted.returncode == 0, submitted.stderr
    assert _task(proj, "pushme").status is Status.SUBMITTED
    assert _moves(proj, "pushme")[-2:] == [("merging", "blocked", "system"), ("blocked", "submitted", "human")]
    assert git(remote, "rev-parse", "corral/pushme") == git(repo, "rev-parse", "corral/pushme")


def test_unblock_escapes_a_stranded_merge(proj, agent, corral) -> None:
    again = [
        {"init": True},
        {"write": {"path": "more.txt", "content": "more\n"}},
        {"commit": "more"},
        {"result": "More."},
    ]
    _stranded(proj, agent, corral, "again", again)
    corral.ok("unblock", "again", "-m", "one more thing", "--wait")
    assert _task(proj, "again").status is Status.BLOCKED
    moves = _moves(proj, "again")
    assert ("merging", "blocked", "system") in moves
    assert moves[moves.index(("merging", "blocked", "system")) + 1] == ("blocked", "working", "human")
    assert "one more thing" in agent.calls()[-1]["prompt"]


def test_a_stranded_merge_that_landed_is_completed_and_the_command_says_so(proj, agent, corral, repo: Path) -> None:
    blocked_with(proj, agent, "landed", work("landed.txt", "landed\n"))
    died = corral.process(
        "accept", "landed", env={"CORRAL_CRASH_AT": "accept.after-update-ref", "CORRAL_CRASH_HOW": "kill"}
    )
    assert died.returncode == -9
    refused = corral("reject", "landed", "-m", "too late")
    assert refused.returncode == 3, refused.stderr
    assert "complete" in refused.stderr and "corral reopen landed" in refused.stderr
    assert _task(proj, "landed").status is Status.COMPLETE
    assert git(repo, "show", "main:landed.txt") == "landed"


def test_a_merge_in_flight_is_refused(proj, agent, corral, repo: Path) -> None:
    blocked_with(proj, agent, "live", work("live.txt", "live\n"))
    # Another accept into main holds main's lock: this accept reads merging and waits for it, alive.
    with target_lock(proj, "main", timeout=5):
        accepting = subprocess.Popen(
            [sys.executable, "-m", "corral", "accept", "live"],
            cwd=repo,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while _task(proj, "live").status is not Status.MERGING:
                assert accepting.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            for args in (("reject", "live", "-m", "no"), ("close", "live", "-m", "no"), ("unblock", "live", "-m", "x")):
                refused = corral(*args)
                assert refused.returncode == 3, (args, refused.stderr)
                assert "merging it now" in refused.stderr and "corral wait live" in refused.stderr
            assert _task(proj, "live").status is Status.MERGING
        except BaseException:
            accepting.kill()
            raise
    _out, err = accepting.communicate(timeout=60)
    assert accepting.returncode == 0, err
    assert _task(proj, "live").status is Status.COMPLETE
