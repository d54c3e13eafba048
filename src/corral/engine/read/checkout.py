"""Whether a checked-out target's index and worktree still match its ref after corral merged into it.

An accept moves the target's ref and then brings the checkout along; a checkout whose
index (at the paths corral's merges changed) still holds the tree from before those
merges would, on its next ``git commit -a``, revert them. This check finds that state,
a merge left half-done (unmerged entries), and stashes corral kept for a person, each
as a typed finding with the command that repairs it. It only reads.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct, field

from corral.domain.violations import shown_paths
from corral.engine.project import Project

#: How many of the newest corral merge commits on a target are looked behind.
DEPTH = 50


class CheckoutFinding(Struct, frozen=True):
    """One problem of one checkout: a stable code, a plain message, the command that repairs it."""

    code: str
    worktree: str
    branch: str
    message: str
    hint: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The finding as --json gives it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc


def give_back(wt: Path | str, sha: str) -> str:
    """The command that gives a person back the local changes an accept kept in the stash ``sha``: a
    branch of their own, made where they made them, with the changes on it as they left them (staged,
    unstaged and untracked). ``git stash apply`` on the merged tip fails where the merge touched the same
    paths, or added a file where an untracked one of theirs was; from where the stash was made it cannot."""
    return f"git -C {shlex.quote(str(wt))} stash branch {kept_branch(sha)} {sha}"


def kept_branch(sha: str) -> str:
    """The branch :func:`give_back` puts the kept changes of the stash ``sha`` on."""
    return f"corral-kept-{sha[:12]}"


def _differ(project: Project, wt: Path, tree: str, paths: list[str]) -> set[str]:
    """Which of ``paths`` the index holds differently from ``tree``."""
    out = project.git.run(
        "--literal-pathspecs", "diff-index", "--cached", "--name-only", "-z", tree, "--", *paths, cwd=wt, check=False
    ).stdout
    return {p for p in out.split("\0") if p}


def _corral_merges(project: Project, wt: Path) -> list[tuple[str, str]]:
    """(commit, parent) of the newest consecutive corral merge commits at HEAD, newest first."""
    fmt = "%H%x1f%P%x1f%(trailers:key=Corral-Task,valueonly)%x1d"
    out = project.git.run("log", f"-n{DEPTH}", "--first-parent", f"--format={fmt}", "HEAD", cwd=wt, check=False)
    found: list[tuple[str, str]] = []
    for entry in out.stdout.split("\x1d"):
        parts = entry.strip("\n").split("\x1f")
        if len(parts) != 3 or not parts[2].strip() or not parts[1].strip():
            break
        found.append((parts[0], parts[1].split()[0]))
    return found


def _behind(project: Project, wt: Path, branch: str) -> CheckoutFinding | None:
    """The index still holds a tree from before corral's latest merges (at the paths they changed)."""
    merges = _corral_merges(project, wt)
    if not merges:
        return None
    head = merges[0][0]
    stale: tuple[str, list[str]] | None = None
    for _commit, parent in merges:
        paths = project.git.changed_between(parent, head, cwd=wt)
        if not paths:
            continue
        off_head = _differ(project, wt, head, paths)
        if not off_head:
            break  # the index matches the ref here: up to date since this merge
        behind = sorted(off_head - _differ(project, wt, parent, paths))
        if behind:
            stale = (parent, behind)  # these paths still hold the tree before this merge; look further back
    if stale is None:
        return None
    base, paths = stale
    shown = shown_paths(paths, most=5)
    return CheckoutFinding(
        "checkout-behind-ref",
        str(wt),
        branch,
        f"{wt} has {branch} checked out, but its index and files still hold the tree from before "
        f"corral merged into it ({shown}); a commit now would revert that work.",
        f"git -C {wt} update-index -q --refresh; git -C {wt} read-tree -m -u {base} {head}",
        {"base": base, "head": head, "paths": paths[:50], "path_count": len(paths)},
    )


def _unmerged(project: Project, wt: Path, branch: str) -> CheckoutFinding | None:
    out = project.git.run("ls-files", "--unmerged", "-z", cwd=wt, check=False).stdout
    paths = sorted({entry.split("\t", 1)[1] for entry in out.split("\0") if "\t" in entry})
    if not paths:
        return None
    return CheckoutFinding(
        "checkout-unmerged",
        str(wt),
        branch,
        f"{wt} has unresolved merge conflicts in: {shown_paths(paths, most=5)}",
        f"In {wt}: resolve them and git add, or git checkout --merge -- PATH",
        {"paths": paths[:50]},
    )


def _kept_stashes(project: Project, wt: Path, branch: str) -> list[CheckoutFinding]:
    listed = project.git.run("stash", "list", "--format=%H%x00%gs", cwd=wt, check=False).stdout
    found = []
    for line in listed.splitlines():
        sha, _, subject = line.partition("\0")
        if "corral accept " in subject:
            found.append(
                CheckoutFinding(
                    "stash-kept",
                    str(wt),
                    branch,
                    f"Local changes an accept could not put back are kept in the stash {sha}.",
                    give_back(wt, sha),
                    {"stash": sha, "subject": subject},
                )
            )
    return found


def check(project: Project) -> list[CheckoutFinding]:
    """Every finding of every worktree that has a branch checked out (the task worktrees included)."""
    findings: list[CheckoutFinding] = []
    seen_stash = False
    for entry in project.git.worktrees(cwd=project.repo):
        ref = entry.get("branch", "")
        wt = Path(entry["worktree"])
        if "bare" in entry or not ref.startswith("refs/heads/") or not wt.is_dir():
            continue
        branch = ref.removeprefix("refs/heads/")
        for finding in (_unmerged(project, wt, branch), _behind(project, wt, branch)):
            if finding is not None:
                findings.append(finding)
        if not seen_stash:  # refs/stash is one for the whole repository
            findings.extend(_kept_stashes(project, wt, branch))
            seen_stash = True
    return findings
