"""The upstream merge before a work turn, and merge-and-fix: a conflict is handed to the agent.

Skipped on a dirty worktree (the prompt says so); a conflict leaves the merge in progress
for the agent to resolve in this turn; any other merge failure is aborted and raised.
"""

from __future__ import annotations

from pathlib import Path

from corral.adapters.git import Git
from corral.domain.prompts import SyncOutcome
from corral.errors import GitError


def merge_upstream(git: Git, worktree: Path, target: str) -> SyncOutcome:
    if git.dirty_paths(worktree):
        return SyncOutcome("skipped-dirty", target)
    if git.rev_parse(f"refs/heads/{target}", cwd=worktree) is None:
        return SyncOutcome("none", target)
    merge = ["merge", "--no-ff", "--no-edit", "--no-verify", f"refs/heads/{target}"]
    result = git.run(*git.identity_args(worktree), *merge, cwd=worktree, check=False)
    if result.returncode == 0:
        up_to_date = "Already up to date" in result.stdout
        return SyncOutcome("up-to-date" if up_to_date else "merged", target)
    files = git.unmerged_paths(worktree)  # as git stores them (-z): a prompt names the real files
    if not files:
        # Not a conflict (e.g. a hook or an identity problem): leave the branch as it was.
        git.run("merge", "--abort", cwd=worktree, check=False)
        raise GitError(f"merging {target} failed: {(result.stderr or result.stdout).strip()[-300:]}")
    return SyncOutcome("conflict", target, tuple(files))
