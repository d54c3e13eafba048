"""The removal after an accept reads the archive ref from the repository's files as git does (loose, packed,
absent), asking git where the files are not the whole story; an archive already at the tip is not written
again (its reflog keeps one entry per tip)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.engine.recovery import removals
from tests.conftest import git


def test_the_archive_is_read_loose_packed_or_absent_as_git_reads_it(proj, repo: Path) -> None:  # type: ignore[no-untyped-def]
    ref = "refs/corral/archive/t"
    assert removals._archived(proj, ref) is None
    head = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", ref, head)
    assert removals._archived(proj, ref) == head  # loose
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / ref).exists()
    assert removals._archived(proj, ref) == head  # packed
    git(repo, "commit", "-q", "--allow-empty", "-m", "next")
    newer = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", ref, newer)  # a loose file shadows its packed line
    assert removals._archived(proj, ref) == newer
    (repo / ".git" / ref).write_text("ref: refs/heads/main\n")  # not an object name: git is asked
    asked = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], cwd=repo, capture_output=True)
    assert removals._archived(proj, ref) == (asked.stdout.decode().strip() or None)
