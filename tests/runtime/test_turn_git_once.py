"""A turn's supervisor asks each git fact once: before the agent, the branch and its verified tip (from
their files when both are plain refs to loose commits, else in one ``for-each-ref``), and the hooks path
and the ref ``HEAD`` names in one ``rev-parse``; after it,
no ``rev-list`` when no commit was made, the branch's tip not asked again after its check, ``HEAD``
read by the one scan of the worktree. What the agent could have changed (``HEAD``, the branch) is
still read after the turn, and checked."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from corral.adapters.git import Git
from corral.domain.actors import Actor
from corral.domain.status import Status
from corral.engine.operations import tasks, turns
from corral.engine.runtime import branch_check
from corral.engine.runtime import protocol as proto
from corral.errors import GitError
from tests.conftest import git
from tests.runtime.conftest import finished
from tests.runtime.test_gitfacts_one_scan import logging_git
from tests.runtime.test_sandbox import needs_bwrap


def log_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every git any process started with this PATH runs is logged: its parent's pid and its subcommand."""
    log = tmp_path / "git.log"
    bin_dir = tmp_path / "logged-bin"
    bin_dir.mkdir()
    real = next(Path(d) / "git" for d in os.environ["PATH"].split(":") if (Path(d) / "git").is_file())
    (bin_dir / "git").write_text(
        "#!/bin/sh\n"
        f'for a; do case "$a" in -*|*=*) ;; *) echo "$PPID $a" >> "{log}"; break;; esac; done\n'
        f'exec "{real}" "$@"\n'
    )
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def supervisor_git(log: Path, pid: int) -> list[str]:
    return [line.split()[1] for line in log.read_text().splitlines() if line.split()[0] == str(pid)]


EXPECTED = ["rev-parse", "for-each-ref", "status"]
"""Before the agent: HEAD and the hooks path (the branch and its verified tip, plain refs to loose commits,
and the merge question are answered from the files: ``adapters/tip_files``).
After it: the branch checked (one for-each-ref); the one scan of the worktree, which reads HEAD again
(the agent could have moved it). Nothing else, nothing twice."""


def second_turn_git(proj, first_turn, tmp_path, monkeypatch):
    """The git subcommands the supervisor of a task's second turn ran (no commit made in it)."""
    task = first_turn()
    assert finished(proj, task.ref).status is Status.BLOCKED
    log = log_git(tmp_path, monkeypatch)
    turns.unblock(proj, task.ref, actor=Actor.HUMAN, message="carry on")
    assert finished(proj, task.ref).status is Status.BLOCKED
    status = json.loads((proj.paths.protocol_dir(task.id) / proto.STATUS).read_text())
    return supervisor_git(log, status["pid"])


def test_a_second_turn_asks_each_git_fact_once(proj, agent, tmp_path, monkeypatch):
    agent.script(
        [{"init": True}, {"write": {"path": "a.txt", "content": "one\n"}}, {"commit": "first"}, {"result": "one"}],
        [{"init": True}, {"result": "nothing more"}],
    )

    def first_turn():
        task = tasks.create(proj, "Commit once, then rest", actor=Actor.HUMAN)
        turns.start(proj, task.ref, actor=Actor.HUMAN)
        return task

    ran = second_turn_git(proj, first_turn, tmp_path, monkeypatch)
    assert sorted(ran) == sorted(EXPECTED), ran


def test_a_first_turn_asks_each_git_fact_once(proj, agent, tmp_path, monkeypatch):
    agent.script([{"init": True}, {"result": "looked, changed nothing"}])
    log = log_git(tmp_path, monkeypatch)
    task = tasks.create(proj, "Look only", actor=Actor.HUMAN)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    assert finished(proj, task.ref).status is Status.BLOCKED
    status = json.loads((proj.paths.protocol_dir(task.id) / proto.STATUS).read_text())
    ran = supervisor_git(log, status["pid"])
    # No merge before it: the same two reads, and the branch recorded as verified (its first mark).
    assert sorted(ran) == sorted(["for-each-ref", "rev-parse", "update-ref", "for-each-ref", "status"])


@needs_bwrap
def test_a_confined_second_turn_asks_each_git_fact_once(boxed, box_env, tmp_path, monkeypatch):
    commit = "git -c user.name=a -c user.email=a@b commit -q -m first"
    box_env.write_text(
        f"#!/bin/sh\ngit cat-file -e HEAD:a.txt 2>/dev/null && exit 0\necho one > a.txt && git add a.txt && {commit}\n"
    )

    def first_turn():
        task = tasks.create(boxed, "Commit once, then rest", actor=Actor.HUMAN, harness="command")
        turns.start(boxed, task.ref, actor=Actor.HUMAN)
        return task

    ran = second_turn_git(boxed, first_turn, tmp_path, monkeypatch)
    # Confined, the worktree's index and reflogs are mended too: what they name is asked of the store once,
    # the index's staged entries read from the turn's one scan (no diff-index), which the facts then reuse.
    assert sorted(ran) == sorted([*EXPECTED, "cat-file"]), ran


def task_worktree(repo: Path, tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "corral/x", str(wt))
    return wt


def test_on_branch_reads_the_branch_head_and_hooks_in_two_processes(repo, tmp_path):
    wt = task_worktree(repo, tmp_path)
    git(repo, "config", "core.hooksPath", "my hooks")  # relative: stays relative, as git reads it
    git(repo, "update-ref", "refs/corral/verified/x", git(repo, "rev-parse", "HEAD"))
    git_, log = logging_git(tmp_path)
    start = branch_check.on_branch(git_, wt, wt, "corral/x", "x")
    assert start == branch_check.Start(
        tip=git(wt, "rev-parse", "HEAD"),
        verified=git(repo, "rev-parse", "refs/corral/verified/x"),
        hooks=git(wt, "rev-parse", "--git-path", "hooks"),
    )
    assert start.hooks == "my hooks"
    assert log.read_text().split() == ["rev-parse"]  # the branch and its verified tip: read from their files


def test_on_branch_refuses_a_detached_head_however_the_hooks_path_is_named(repo, tmp_path):
    wt = task_worktree(repo, tmp_path)
    git(wt, "checkout", "-q", "--detach")
    with pytest.raises(GitError, match="not on its task's branch"):
        branch_check.on_branch(Git(), wt, wt, "corral/x", "x")
    # A hooks path with a line that names the branch cannot stand in for HEAD's own line.
    git(wt, "config", "core.hooksPath", "h\nrefs/heads/corral/x")
    with pytest.raises(GitError, match="not on its task's branch"):
        branch_check.on_branch(Git(), wt, wt, "corral/x", "x")


def test_on_branch_puts_back_a_branch_made_a_symbolic_ref_and_answers_nothing_it_did_not_read(repo, tmp_path):
    wt = task_worktree(repo, tmp_path)
    tip = git(wt, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/corral/verified/x", tip)
    git(repo, "symbolic-ref", "refs/heads/corral/x", "refs/heads/main")
    assert branch_check.on_branch(Git(), wt, wt, "corral/x", "x") is None  # the rare case: said exactly
    assert git(repo, "rev-parse", "--verify", "refs/heads/corral/x") == tip
    plain = subprocess.run(["git", "symbolic-ref", "-q", "refs/heads/corral/x"], cwd=repo, capture_output=True)
    assert plain.returncode != 0  # a plain ref again


def test_a_launch_reads_a_task_worktrees_git_dirs_as_git_does(repo, tmp_path):
    from corral.engine.operations.launch import linked_git_dirs

    wt = task_worktree(repo, tmp_path)
    common, own = git(wt, "rev-parse", "--git-common-dir", "--git-dir").splitlines()
    assert linked_git_dirs(wt) == (str((wt / common).resolve()), str((wt / own).resolve()))
    assert linked_git_dirs(repo) is None  # a main checkout: git is asked


def test_a_git_file_naming_a_directory_outside_the_layout_is_never_taken_for_git_dirs(repo, tmp_path):
    from corral.engine.operations.launch import linked_git_dirs

    wt = task_worktree(repo, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "objects").mkdir(parents=True)
    (elsewhere / "HEAD").write_text("ref: refs/heads/main\n")
    (elsewhere / "commondir").write_text(".\n")
    (elsewhere / "gitdir").write_text(f"{wt / '.git'}\n")
    (wt / ".git").write_text(f"gitdir: {elsewhere}\n")
    assert linked_git_dirs(wt) is None  # not <common>/worktrees/<name>: what git makes of it is asked of git


def test_the_scan_reads_head_and_the_tip_answers_for_it_only_when_head_is_there(repo, tmp_path):
    from corral.engine.runtime.gitfacts import GitProbe

    start = git(repo, "rev-parse", "HEAD")
    (repo / "a b.txt").write_text("committed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "agent's commit")
    tip = git(repo, "rev-parse", "HEAD")
    (repo / "left out.txt").write_text("untracked\n")
    git_, log = logging_git(tmp_path)
    facts = GitProbe(git_, repo).facts(start, start, start, [], branch_tip=tip)
    assert facts.head == tip and facts.commits == (tip,) and facts.dirty
    assert set(facts.changed_paths) == {"a b.txt", "left out.txt"}
    assert "rev-parse" not in log.read_text().split()  # HEAD is where the check read the branch

    # The agent left HEAD elsewhere (detached at the start): the scan sees it; the tip answers nothing.
    git(repo, "checkout", "-q", "--detach", start)
    log.write_text("")
    facts = GitProbe(git_, repo).facts(start, start, start, [], branch_tip=tip)
    assert facts.head == start and facts.commits == ()
    assert log.read_text().split().count("rev-parse") == 1  # HEAD's commit asked of git, as before


def test_a_head_known_before_the_agent_is_never_the_facts_answer(repo, tmp_path):
    from corral.engine.runtime.gitfacts import GitProbe

    start = git(repo, "rev-parse", "HEAD")
    probe = GitProbe(Git(), repo)
    probe.known_head(start)  # read before the turn; no attempt looked at it
    (repo / "new.txt").write_text("x\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "made while nothing looked")
    assert probe.facts(start, start, start, []).head == git(repo, "rev-parse", "HEAD")
