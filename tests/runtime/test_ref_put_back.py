"""The ref guard puts the agent's moves back in one transaction per step (its versions kept, then
the refs put back), each line a compare-and-swap, and a move the transaction cannot take goes alone:
what stood in its way is said for it, and every other move is still kept and put back.

Driven through :func:`ref_restore.settle` finishing a saved plan (its report written, nothing put
back yet), as after a crash between the plan and the put-back, on a real repository.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from corral import crashpoints
from corral.adapters.git import Git
from corral.engine.runtime import ref_restore
from corral.engine.runtime.ref_guard import REPORT, SNAPSHOT, RefGuard, RefMove, guard_dir, kept_ref


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def value(repo: Path, ref: str) -> str | None:
    done = subprocess.run(["git", "rev-parse", "--verify", "-q", ref], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() or None


def planned(log_dir: Path, moves: list[RefMove]) -> None:
    where = guard_dir(log_dir)
    where.mkdir(parents=True)
    (where / SNAPSHOT).write_text(json.dumps({"refs": {}, "at": 0}))
    (where / REPORT).write_text(json.dumps(RefGuard(tuple(moves)).to_json()))


def test_many_moves_are_kept_and_put_back_and_each_one_in_the_way_is_said(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "the agent's")
    agents = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", base)
    moves: list[RefMove] = []
    # Forty refs the agent made, and one of the person's it moved: put back by two transactions.
    for i in range(40):
        git(repo, "update-ref", f"refs/heads/made-{i}", agents)
        ref = f"refs/heads/made-{i}"
        moves.append(RefMove(ref, None, agents, "hook", kept_ref("t", 1, ref), False))
    git(repo, "update-ref", "refs/heads/theirs", agents)
    moves.append(RefMove("refs/heads/theirs", base, agents, "hook", kept_ref("t", 1, "refs/heads/theirs"), False))
    # In the way: one moved again since the turn (someone else's now), one whose kept ref holds
    # something else, one whose lock another git holds.
    git(repo, "update-ref", "refs/heads/moved-again", base)
    moves.append(RefMove("refs/heads/moved-again", None, agents, "hook", kept_ref("t", 1, "x"), False))
    git(repo, "update-ref", "refs/heads/kept-taken", agents)
    git(repo, "update-ref", kept_ref("t", 1, "refs/heads/kept-taken"), base)
    moves.append(
        RefMove("refs/heads/kept-taken", None, agents, "hook", kept_ref("t", 1, "refs/heads/kept-taken"), False)
    )
    git(repo, "update-ref", "refs/heads/locked", agents)
    lock = repo / ".git" / "refs" / "heads" / "locked.lock"
    lock.write_text("")
    moves.append(RefMove("refs/heads/locked", None, agents, "hook", kept_ref("t", 1, "refs/heads/locked"), False))
    log_dir = tmp_path / "turn"
    planned(log_dir, moves)

    report = ref_restore.settle(Git(), log_dir, repo, "corral/t", "t", 1)

    assert report is not None
    by_ref = {m.ref: m for m in report.moves}
    for i in range(40):
        ref = f"refs/heads/made-{i}"
        assert by_ref[ref].restored and by_ref[ref].error is None, by_ref[ref]
        assert value(repo, ref) is None and value(repo, kept_ref("t", 1, ref)) == agents
    theirs = by_ref["refs/heads/theirs"]
    assert theirs.restored and value(repo, "refs/heads/theirs") == base
    assert value(repo, kept_ref("t", 1, "refs/heads/theirs")) == agents
    assert by_ref["refs/heads/moved-again"].error == "moved again since the turn; left as it is"
    assert value(repo, "refs/heads/moved-again") == base
    taken = by_ref["refs/heads/kept-taken"]
    assert not taken.restored and taken.error is not None and "already holds" in taken.error
    assert value(repo, "refs/heads/kept-taken") == agents  # nothing put back unsaved
    locked = by_ref["refs/heads/locked"]
    assert not locked.restored and locked.error is not None and "Another git process" in locked.error, locked
    assert value(repo, "refs/heads/locked") == agents
    # settled again (the lock gone): the report's moves in the way are said, not tried again
    lock.unlink()
    again = ref_restore.settle(Git(), log_dir, repo, "corral/t", "t", 1)
    assert again == report


def test_a_crash_after_the_kept_transaction_is_finished_by_the_next_settle(
    repo: Path, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    base = git(repo, "rev-parse", "HEAD")
    (repo / "c.txt").write_text("c\n")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-q", "-m", "the agent's")
    agents = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", base)
    refs = [f"refs/heads/made-{i}" for i in range(5)]
    for ref in refs:
        git(repo, "update-ref", ref, agents)
    log_dir = tmp_path / "turn"
    planned(log_dir, [RefMove(ref, None, agents, "hook", kept_ref("t", 1, ref), False) for ref in refs])

    class Died(Exception):
        pass

    def dies(name: str) -> None:
        if name == "ref-guard.kept":
            raise Died

    monkeypatch.setattr(crashpoints, "hit", dies)
    try:
        ref_restore.settle(Git(), log_dir, repo, "corral/t", "t", 1)
    except Died:
        pass
    assert all(value(repo, kept_ref("t", 1, ref)) == agents for ref in refs)  # saved first
    assert all(value(repo, ref) == agents for ref in refs)  # nothing put back yet
    monkeypatch.undo()
    report = ref_restore.settle(Git(), log_dir, repo, "corral/t", "t", 1)
    assert report is not None and all(m.restored and m.error is None for m in report.moves), report
    assert all(value(repo, ref) is None for ref in refs)
