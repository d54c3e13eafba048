"""A turn's git facts come from one scan of the worktree: one ``git status``, shared by the dirty flag
and the uncommitted part of the changed paths; the committed part compares trees only."""

from __future__ import annotations

import os
from pathlib import Path

from corral.adapters.git import Git
from corral.engine.runtime.gitfacts import GitProbe
from tests.conftest import git


def logging_git(tmp_path: Path) -> tuple[Git, Path]:
    """A git that logs each subcommand it runs, one line each."""
    log = tmp_path / "git.log"
    wrapper = tmp_path / "git"
    real = next(Path(d) / "git" for d in os.environ["PATH"].split(":") if (Path(d) / "git").is_file())
    wrapper.write_text(f'#!/bin/sh\nfor a; do case "$a" in -*|*=*) ;; *) echo "$a" >> "{log}"; break;; esac; done\n'
                       f'exec "{real}" "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    return Git(executable=str(wrapper)), log


def test_the_facts_of_a_turn_scan_the_worktree_once_and_miss_no_change(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    (repo / "committed.txt").write_text("in a commit\n")
    (repo / "old-name.txt").write_text("to be renamed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "agent's commit")
    git(repo, "mv", "old-name.txt", "new-name.txt")  # staged: both of its names changed
    (repo / "README.md").write_text("edited, not staged\n")
    (repo / "untracked dir").mkdir()
    (repo / "untracked dir" / "new file.txt").write_text("never added\n")
    git_, log = logging_git(tmp_path)

    facts = GitProbe(git_, repo).facts(start, start, start, ["README*"])

    assert facts.error is None and facts.dirty is True
    assert set(facts.changed_paths) == {
        "committed.txt",
        "old-name.txt",
        "new-name.txt",
        "README.md",
        "untracked dir/new file.txt",
    }
    assert facts.protected_changes == ("README.md",)
    ran = log.read_text().split()
    assert ran.count("status") == 1  # one scan of the worktree
    assert ran.count("diff") == 1  # the agent's commits: two trees compared


def test_a_clean_turn_with_no_commit_is_clean_and_changed_nothing(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    git_, log = logging_git(tmp_path)
    facts = GitProbe(git_, repo).facts(start, start, start, [])
    assert facts.dirty is False and facts.changed_paths == () and facts.commits == ()
    assert log.read_text().split().count("status") == 1
    assert "diff" not in log.read_text().split()  # no commit: nothing to compare


def test_changes_the_merge_brought_are_not_the_agents(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "task")
    git(repo, "checkout", "-q", "main")
    (repo / "upstream.txt").write_text("from main\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "upstream")
    git(repo, "checkout", "-q", "task")
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "main")
    merged = git(repo, "rev-parse", "HEAD")
    (repo / "mine.txt").write_text("the agent's\n")
    facts = GitProbe(Git(), repo).facts(start, start, merged, [])
    assert set(facts.changed_paths) == {"mine.txt"}


def test_the_index_check_and_the_facts_share_one_scan_while_the_index_is_unchanged(repo: Path, tmp_path: Path) -> None:
    """The index's staged objects (what ``diff-index --cached HEAD`` names) come from the facts' own scan, which
    the facts reuse; an index changed in between (the check made it again) is scanned anew."""
    head = git(repo, "rev-parse", "HEAD")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    blob = git(repo, "rev-parse", ":staged.txt")
    git_, log = logging_git(tmp_path)
    probe = GitProbe(git_, repo)

    assert probe.staged_against(head) == {blob}
    assert probe.staged_against("0" * 40) is None  # HEAD is not that tip: the caller asks git itself
    facts = probe.facts(head, head, head, [])
    assert facts.dirty is True and "staged.txt" in facts.changed_paths
    assert log.read_text().split().count("status") == 2  # one per look asked, the facts' from the last

    probe.staged_against(head)
    git(repo, "read-tree", head)  # the index made again from the tip: the kept scan no longer describes it
    facts = probe.facts(head, head, head, [])
    assert log.read_text().split().count("status") == 4
    assert facts.dirty is True and "staged.txt" in facts.changed_paths  # untracked now, still the agent's
