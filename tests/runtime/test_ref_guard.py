"""Refs are guarded: after every turn, a ref other than the task's own branch that the agent moved
is put back, its version kept on ``refs/corral/kept/<task>/<turn>-<ref>``, and ``show`` says so;
a move that was not the agent's (a person's commit, corral's own accept) is never undone.

Every turn runs the fake agent through the real supervisor, driven by the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral.adapters.git import Git
from corral.adapters.ref_files import common_dir, read_refs
from corral.engine.runtime import ref_guard, ref_restore, ref_snapshot
from tests.conftest import CLI, FakeAgent, git

DONE = {"result": "done"}


def tip(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", ref)


def has_ref(repo: Path, ref: str) -> bool:
    return bool(git(repo, "for-each-ref", ref))


def run_turn(corral: CLI, ref: str) -> dict[str, Any]:
    corral.ok("create", f"Task {ref}", "--ref", ref)
    corral.ok("start", ref, "--wait", "--timeout", "60")
    doc: dict[str, Any] = corral.json("show", ref)
    return doc


def guard_of(doc: dict[str, Any]) -> dict[str, Any]:
    agent_turns = [t for t in doc["turns"] if t["role"] == "agent"]
    return agent_turns[-1]["details"].get("refs") or {}


def human_seq(doc: dict[str, Any]) -> int:
    return max(int(t["sequence"]) for t in doc["turns"] if t["role"] == "human")


def wait_for_agent(agent: FakeAgent, count: int, timeout: float = 20) -> None:
    """Until the fake agent has started ``count`` times (it records each start before its steps)."""
    end = time.monotonic() + timeout
    while len(agent.calls()) < count:
        assert time.monotonic() < end, "the agent never started"
        time.sleep(0.05)


def test_update_ref_of_the_target_is_put_back_kept_and_shown(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    main = tip(repo, "main")
    agent.script(
        [
            {"init": True},
            {"write": {"path": "feature.txt", "content": "work\n"}},
            {"commit": "the agent's work"},
            {"git": ["update-ref", "refs/heads/main", "HEAD"]},
            DONE,
        ]
    )
    doc = run_turn(corral, "sa")
    branch_tip = tip(repo, "refs/heads/corral/sa")
    assert tip(repo, "main") == main  # put back
    kept = ref_guard.kept_ref("sa", human_seq(doc), "refs/heads/main")
    assert kept == f"refs/corral/kept/sa/{human_seq(doc)}-refs/heads/main"
    assert tip(repo, kept) == branch_tip  # the agent's version, kept
    (move,) = guard_of(doc)["moves"]
    assert move == {
        "ref": "refs/heads/main",
        "before": main,
        "after": branch_tip,
        "by": "hook",
        "kept": kept,
        "restored": True,
        "error": None,
    }
    assert doc["refs_put_back"][0]["moves"] == [move]
    shown = corral.ok("show", "sa").stdout
    line = next(x for x in shown.splitlines() if x.startswith("Refs guarded"))
    assert f"The agent moved main from {main[:12]} to {branch_tip[:12]}; corral put it back" in line
    assert kept in line
    # The put-back is corral's own entry in main's reflog.
    assert git(repo, "reflog", "-1", "--format=%gs", "main").startswith("corral: put back after turn")


def test_the_agents_commits_on_its_own_branch_are_untouched(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    agent.script(
        [
            {"init": True},
            {"write": {"path": "a.txt", "content": "a\n"}},
            {"commit": "one"},
            {"write": {"path": "b.txt", "content": "b\n"}},
            {"commit": "two"},
            {"git": ["branch", "-f", "corral/own", "HEAD"]},  # its own branch, by any means
            DONE,
        ]
    )
    doc = run_turn(corral, "own")
    assert git(repo, "log", "--format=%s", "-2", "corral/own").splitlines() == ["two", "one"]
    assert guard_of(doc) == {}  # nothing to report: the turn keeps no refs entry
    assert doc["refs_put_back"] == []
    assert not git(repo, "for-each-ref", "refs/corral/kept/")
    assert "Refs guarded" not in corral.ok("show", "own").stdout


def test_moving_another_tasks_branch_is_put_back(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    agent.script(
        [{"init": True}, {"write": {"path": "o.txt", "content": "o\n"}}, {"commit": "other's work"}, DONE],
        [
            {"init": True},
            {"git": ["update-ref", "refs/heads/corral/other", "refs/heads/main"]},  # throws the other task's work away
            DONE,
        ],
    )
    run_turn(corral, "other")
    other_tip = tip(repo, "refs/heads/corral/other")
    doc = run_turn(corral, "bully")
    assert tip(repo, "refs/heads/corral/other") == other_tip
    (move,) = guard_of(doc)["moves"]
    assert (move["ref"], move["before"], move["restored"]) == ("refs/heads/corral/other", other_tip, True)
    assert tip(repo, move["kept"]) == tip(repo, "main")


def test_a_created_tag_is_removed_and_a_moved_tag_put_back(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    git(repo, "tag", "-a", "v1", "-m", "release 1")
    v1 = tip(repo, "refs/tags/v1")  # an annotated tag: its tag object comes back exactly
    agent.script(
        [
            {"init": True},
            {"write": {"path": "t.txt", "content": "t\n"}},
            {"commit": "tagged work"},
            {"git": ["tag", "v2"]},
            {"git": ["tag", "-f", "v1"]},
            DONE,
        ]
    )
    doc = run_turn(corral, "tagger")
    moves = {m["ref"]: m for m in guard_of(doc)["moves"]}
    assert set(moves) == {"refs/tags/v1", "refs/tags/v2"}
    assert not has_ref(repo, "refs/tags/v2")  # created during the turn: removed
    assert moves["refs/tags/v2"]["before"] is None and moves["refs/tags/v2"]["restored"] is True
    assert tip(repo, "refs/tags/v1") == v1
    assert git(repo, "cat-file", "-t", "v1") == "tag"
    branch_tip = tip(repo, "refs/heads/corral/tagger")
    assert tip(repo, moves["refs/tags/v2"]["kept"]) == branch_tip
    assert tip(repo, moves["refs/tags/v1"]["kept"]) == branch_tip
    line = doc["refs_put_back"][0]["line"]
    assert "tag v1" in line and "(and 1 more ref" in line


def test_a_bypassed_hook_is_caught_by_the_worktree_commits(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    main = tip(repo, "main")
    agent.script(
        [
            {"init": True},
            {"write": {"path": "f.txt", "content": "f\n"}},
            {"commit": "work"},
            {"git": ["-c", "core.hooksPath=/dev/null", "update-ref", "refs/heads/main", "HEAD"]},
            DONE,
        ]
    )
    doc = run_turn(corral, "sneaky")
    assert tip(repo, "main") == main
    (move,) = guard_of(doc)["moves"]
    assert move["by"] == "worktree-commits" and move["restored"] is True


def test_a_persons_commit_on_the_target_during_the_turn_is_not_undone(
    corral: CLI, agent: FakeAgent, repo: Path
) -> None:
    agent.script(
        [{"init": True}, {"sleep": 2.5}, {"write": {"path": "w.txt", "content": "w\n"}}, {"commit": "mine"}, DONE]
    )
    corral.ok("create", "Task busy", "--ref", "busy")
    corral.ok("start", "busy")
    wait_for_agent(agent, 1)
    (repo / "person.txt").write_text("the person's work\n")
    git(repo, "add", "person.txt")
    git(repo, "commit", "-q", "-m", "a person commits on main meanwhile")
    person = tip(repo, "main")
    corral.ok("wait", "busy", "--timeout", "60")
    doc = corral.json("show", "busy")
    assert tip(repo, "main") == person
    assert guard_of(doc) == {}
    assert not git(repo, "for-each-ref", "refs/corral/kept/")


def test_corrals_own_accept_into_the_target_during_the_turn_is_not_undone(
    corral: CLI, agent: FakeAgent, repo: Path
) -> None:
    agent.script(
        [{"init": True}, {"write": {"path": "x.txt", "content": "x\n"}}, {"commit": "x's work"}, DONE],
        [{"init": True}, {"sleep": 3}, {"write": {"path": "y.txt", "content": "y\n"}}, {"commit": "y's work"}, DONE],
    )
    run_turn(corral, "x")
    corral.ok("create", "Task y", "--ref", "y")
    corral.ok("start", "y")
    wait_for_agent(agent, 2)
    corral.ok("accept", "x")
    accepted = tip(repo, "main")
    assert "x.txt" in git(repo, "show", "--name-only", "--format=", "main")
    corral.ok("wait", "y", "--timeout", "60")
    doc = corral.json("show", "y")
    assert tip(repo, "main") == accepted
    assert guard_of(doc) == {}
    assert corral.json("show", "x")["task"]["status"] == "complete"


def test_the_repositorys_own_hooks_still_run_chained(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    seen = repo.parent / "hook-seen.txt"
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for name, body in (
        ("reference-transaction", f'echo "$1 $(cat | tr "\\n" " ")" >> {seen}\n'),
        ("post-commit", f"echo post-commit >> {seen}\n"),
    ):
        (hooks / name).write_text(f"#!/bin/sh\n{body}")
        (hooks / name).chmod(0o755)
    agent.script(
        [
            {"init": True},
            {"write": {"path": "h.txt", "content": "h\n"}},
            {"commit": "hooked"},
            {"git": ["update-ref", "refs/heads/main", "HEAD"]},
            DONE,
        ]
    )
    main = tip(repo, "main")
    seen.write_text("")
    doc = run_turn(corral, "hooked")
    lines = seen.read_text().splitlines()
    assert "post-commit" in lines  # a hook the guard does not use, forwarded
    committed = [x for x in lines if x.startswith("committed ")]
    branch_tip = tip(repo, "refs/heads/corral/hooked")
    assert any(f"{branch_tip} refs/heads/corral/hooked" in x for x in committed)  # the agent's commit
    # The agent's update-ref (git names no old value for an update it was not asked to verify).
    assert any(x.endswith(f" {branch_tip} refs/heads/main ") and main not in x for x in committed)
    assert any(f"{branch_tip} {main} refs/heads/main" in x for x in committed)  # corral's put-back: the hook ran
    assert tip(repo, "main") == main
    assert guard_of(doc)["moves"][0]["by"] == "hook"


def test_the_hook_is_the_agents_only_and_keeps_its_git_config(tmp_path: Path, repo: Path) -> None:
    log_dir = tmp_path / "turn"
    env = ref_snapshot.hook_env(log_dir, repo, "cmd-1", {"GIT_CONFIG_COUNT": "1"})
    assert env == {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_1": "core.hooksPath",
        "GIT_CONFIG_VALUE_1": str(log_dir / "ref-guard" / "hooks"),
    }
    snapshot = (log_dir / "ref-guard" / "refs.json").read_text()
    git(repo, "tag", "later")
    assert ref_snapshot.hook_env(log_dir, repo, "cmd-1", {}) != {}  # a later attempt: the same snapshot
    assert (log_dir / "ref-guard" / "refs.json").read_text() == snapshot


def test_a_ref_file_written_in_place_is_seen_without_git(tmp_path: Path, repo: Path) -> None:
    """The check skips its second for-each-ref only when no ref file but the branch's changed: a
    ref file rewritten in place (no git, so no hook, and the same inode) still counts as a change,
    and carrying the turn's commits it is the agent's. Here the checkout on ``main`` is the task's."""
    git(repo, "branch", "other")
    log_dir = tmp_path / "turn"
    assert ref_snapshot.hook_env(log_dir, repo, "cmd-1", {})
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "made on the task's branch during the turn")
    assert ref_restore.settle(Git(), log_dir, repo, "main", "t", 1) == ref_guard.RefGuard()
    (log_dir / "ref-guard" / "report.json").unlink()
    other = repo / ".git" / "refs" / "heads" / "other"
    inode = other.stat().st_ino
    with open(other, "w") as fh:  # truncated and written in place
        fh.write(tip(repo, "HEAD") + "\n")
    assert other.stat().st_ino == inode
    found = ref_restore.settle(Git(), log_dir, repo, "main", "t", 1)
    assert found is not None
    assert [(m.ref, m.by, m.restored) for m in found.moves] == [("refs/heads/other", "worktree-commits", True)]
    assert tip(repo, "other") == tip(repo, "HEAD~1")


def test_a_subtask_started_during_the_turn_keeps_its_branch(corral: CLI, agent: FakeAgent, repo: Path) -> None:
    """corral makes a subtask's branch from its parent's tip (as the parent's agent does through
    MCP): it carries the parent's fresh commits, yet it was made in the subtask's own worktree, not
    by the agent, and stays."""
    agent.script(
        [
            {"init": True},
            {"write": {"path": "p.txt", "content": "p\n"}},
            {"commit": "the parent's work"},
            {"sleep": 3},
            DONE,
        ],
        [{"init": True}, DONE],
    )
    corral.ok("create", "Parent", "--ref", "parent")
    corral.ok("start", "parent")
    wait_for_agent(agent, 1)
    deadline = time.monotonic() + 10
    while git(repo, "log", "-1", "--format=%s", "corral/parent") != "the parent's work":
        assert time.monotonic() < deadline, "the parent's agent never committed"
        time.sleep(0.05)
    corral.ok("create", "Child", "--ref", "child", "--parent", "parent")
    corral.ok("start", "child", "--wait", "--timeout", "60")
    child_tip = tip(repo, "refs/heads/corral/child")
    assert git(repo, "merge-base", "--is-ancestor", tip(repo, "corral/parent"), child_tip) == ""
    corral.ok("wait", "parent", "--timeout", "60")
    doc = corral.json("show", "parent")
    assert tip(repo, "refs/heads/corral/child") == child_tip
    assert guard_of(doc) == {}
    assert not git(repo, "for-each-ref", "refs/corral/kept/")


# -- the refs read from the files, and what the snapshot's watch saw ------------------------------


def test_the_refs_read_from_the_files_are_the_ones_for_each_ref_gives(tmp_path: Path, repo: Path) -> None:
    """The snapshot and the check read the ref files themselves (no git process): the same refs,
    with the same values, as ``for-each-ref`` — loose shadowing packed, symbolic and broken refs,
    lock files and the exempt namespaces left out — from the repository and from a worktree."""
    head = tip(repo, "HEAD")
    git(repo, "tag", "-a", "v1", "-m", "an annotated tag")
    git(repo, "branch", "packed-then-moved")
    git(repo, "update-ref", "refs/remotes/origin/main", head)
    git(repo, "update-ref", "refs/corral/kept/x/1-refs/heads/main", head)
    git(repo, "pack-refs", "--all")
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "second")
    git(repo, "update-ref", "refs/heads/packed-then-moved", "HEAD")  # loose now, over its packed value
    git(repo, "update-ref", "refs/heads/a/b/deep", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/loose", "HEAD")
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    heads = repo / ".git" / "refs" / "heads"
    (heads / "stale.lock").write_text(head + "\n")  # a lock file some git left behind
    (heads / "junk").write_text("not an object name\n")  # broken: git ignores it
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree), "main")
    git(worktree, "update-ref", "refs/bisect/bad", "HEAD")  # per-worktree: exempt
    for where in (repo, worktree):
        from_files = read_refs(common_dir(where), ref_guard.EXEMPT)
        assert from_files == ref_snapshot._refs(Git(), where)
    assert from_files is not None
    assert from_files["refs/heads/packed-then-moved"] == tip(repo, "HEAD") != head
    assert from_files["refs/tags/v1"] == tip(repo, "refs/tags/v1") != head
    assert {"refs/heads/a/b/deep", "refs/corral/kept/x/1-refs/heads/main", "refs/heads/side"} <= set(from_files)
    assert not {r for r in from_files if "origin" in r or "alias" in r or "junk" in r or "stale" in r}
    # one namespace alone (the merged-branch sweep reads the branches so): the same refs, loose and packed
    branches = read_refs(common_dir(repo), (), under="refs/heads")
    assert branches == {ref: sha for ref, sha in from_files.items() if ref.startswith("refs/heads/")}
    assert branches is not None and branches["refs/heads/packed-then-moved"] == tip(repo, "HEAD")


def _rewrite_in_place_keeping_times(path: Path, value: str) -> None:
    before = path.stat()
    with open(path, "r+") as fh:  # the same inode, the same size, then the same times
        fh.write(value + "\n")
        fh.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


@pytest.mark.parametrize("checker", ["the-same-process", "another-process"])
def test_a_ref_file_rewritten_in_place_with_its_times_kept_is_seen(tmp_path: Path, repo: Path, checker: str) -> None:
    """No git, no hook, the same inode, size and modification time: the check still sees the move,
    whether it runs in the process that took the snapshot (which watched the refs directories) or
    in another one (the reconciler's, which reads every ref again)."""
    git(repo, "branch", "other")
    before = tip(repo, "other")
    log_dir = tmp_path / "turn"
    assert ref_snapshot.hook_env(log_dir, repo, "cmd-1", {})
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "made on the task's branch during the turn")
    _rewrite_in_place_keeping_times(repo / ".git" / "refs" / "heads" / "other", tip(repo, "HEAD"))
    if checker == "the-same-process":
        found = ref_restore.settle(Git(), log_dir, repo, "main", "t", 1)
        assert found is not None
        moves = [(m.ref, m.by, m.restored) for m in found.moves]
    else:
        code = (
            "import json, sys; from pathlib import Path; from corral.adapters.git import Git; "
            "from corral.engine.runtime import ref_restore; "
            "g = ref_restore.settle(Git(), Path(sys.argv[1]), Path(sys.argv[2]), 'main', 't', 1); "
            "print(json.dumps(g.to_json()))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(log_dir), str(repo)], capture_output=True, text=True, check=True
        )
        moves = [(m["ref"], m["by"], m["restored"]) for m in json.loads(done.stdout)["moves"]]
    assert moves == [("refs/heads/other", "worktree-commits", True)]
    assert tip(repo, "other") == before


def test_refs_written_by_hand_in_a_new_directory_and_in_packed_refs_are_seen(tmp_path: Path, repo: Path) -> None:
    """The watch sees a directory made during the turn (whose refs it never watched) and a
    rewritten ``packed-refs``: both moves are found, attributed and put back."""
    git(repo, "branch", "packed")
    git(repo, "pack-refs", "--all")
    packed_before = tip(repo, "packed")
    log_dir = tmp_path / "turn"
    assert ref_snapshot.hook_env(log_dir, repo, "cmd-1", {})
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "made on the task's branch during the turn")
    new = tip(repo, "HEAD")
    deep = repo / ".git" / "refs" / "heads" / "made" / "by" / "hand"
    deep.parent.mkdir(parents=True)
    deep.write_text(new + "\n")
    packed_refs = repo / ".git" / "packed-refs"
    text = packed_refs.read_text()
    assert f"{packed_before} refs/heads/packed\n" in text
    with open(packed_refs, "r+") as fh:  # in place
        fh.write(text.replace(f"{packed_before} refs/heads/packed\n", f"{new} refs/heads/packed\n"))
    found = ref_restore.settle(Git(), log_dir, repo, "main", "t", 1)
    assert found is not None
    assert [(m.ref, m.before, m.after, m.by, m.restored) for m in found.moves] == [
        ("refs/heads/made/by/hand", None, new, "worktree-commits", True),
        ("refs/heads/packed", packed_before, new, "worktree-commits", True),
    ]
    assert tip(repo, "packed") == packed_before
    assert not has_ref(repo, "refs/heads/made/by/hand")


def test_what_the_watch_saw_is_what_reading_every_ref_finds(tmp_path: Path, repo: Path) -> None:
    """The check in the snapshot's process reads only what its watch says changed: after refs are
    created, deleted, packed, renamed with their directory and rewritten, by git and by hand, it
    comes to the very refs a full read and ``for-each-ref`` find."""
    head = tip(repo, "HEAD")
    for name in ("team/a", "team/b", "gone", "stays"):
        git(repo, "update-ref", f"refs/heads/{name}", head)
    git(repo, "tag", "t1")
    log_dir = tmp_path / "turn"
    assert ref_snapshot.hook_env(log_dir, repo, "cmd-1", {})
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "two")
    new = tip(repo, "HEAD")
    git(repo, "update-ref", "-d", "refs/heads/gone")
    git(repo, "update-ref", "refs/heads/fresh/one", new)
    git(repo, "pack-refs", "--all")
    git(repo, "update-ref", "refs/heads/stays", new)  # loose again, over its packed value
    heads = repo / ".git" / "refs" / "heads"
    git(repo, "update-ref", "refs/heads/team/c", new)
    os.rename(heads / "team", heads / "team2")  # a directory renamed: its watch follows it
    (heads / "team2" / "c").write_text(head + "\n")  # written after the rename, under the new name
    (heads / "new" / "dir").mkdir(parents=True)
    (heads / "new" / "dir" / "x").write_text(new + "\n")
    _rewrite_in_place_keeping_times(heads / "stays", head)  # back to its value before the turn
    watch = ref_snapshot.take_watch(ref_guard.guard_dir(log_dir), "cmd-1")
    assert watch is not None
    try:
        seen = watch.now()
    finally:
        watch.close()
    everything = read_refs(common_dir(repo), ref_guard.EXEMPT)
    assert seen == everything == ref_snapshot._refs(Git(), repo)
    assert seen is not None
    assert seen["refs/heads/team2/c"] == head and seen["refs/heads/stays"] == head
    assert "refs/heads/team/c" not in seen and seen["refs/heads/new/dir/x"] == new  # team/a, b: packed


def test_refs_git_reaches_through_a_symbolic_link_are_left_to_git(tmp_path: Path, repo: Path) -> None:
    """A refs directory linked from elsewhere (as git-new-workdir makes them): git follows the
    link, so the guard leaves the reading to ``for-each-ref``, and still sees what the agent does."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x").write_text(tip(repo, "HEAD") + "\n")
    (repo / ".git" / "refs" / "heads" / "linked").symlink_to(elsewhere)
    assert read_refs(common_dir(repo), ref_guard.EXEMPT) is None
    assert "refs/heads/linked/x" in ref_snapshot._refs(Git(), repo)
    log_dir = tmp_path / "turn"
    env = ref_snapshot.hook_env(log_dir, repo, "cmd-1", {})
    assert env
    assert json.loads((log_dir / "ref-guard" / "refs.json").read_text())["files"] is False
    (repo / "n.txt").write_text("n\n")
    git(repo, "add", "n.txt")
    git(repo, "commit", "-q", "-m", "made on the task's branch during the turn")
    subprocess.run(["git", "branch", "made"], cwd=repo, env={**os.environ, **env}, check=True)
    (elsewhere / "x").write_text(tip(repo, "HEAD") + "\n")  # in place, through the link
    found = ref_restore.settle(Git(), log_dir, repo, "main", "t", 1)
    assert found is not None
    assert [(m.ref, m.by, m.restored) for m in found.moves] == [
        ("refs/heads/linked/x", "worktree-commits", True),
        ("refs/heads/made", "hook", True),
    ]
    assert not has_ref(repo, "refs/heads/made")
    assert tip(repo, "refs/heads/linked/x") == tip(repo, "HEAD~1")
