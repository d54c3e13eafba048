"""A task's branch deleted so that a failure is said, never swallowed.

``git branch -D`` with its failure ignored left a branch behind a stray lock while corral
reported it archived, and followed nothing but could be refused silently. Here the ref is
deleted with ``update-ref --no-deref -d`` — a symbolic ref is deleted itself, never followed —
as a compare-and-swap, with hooks and fsmonitor off.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from corral.adapters.git import UNTRUSTED_WORKTREE_ARGS as QUIET
from corral.adapters.git import Git
from corral.adapters.ref_files import common_dir
from corral.domain.sanitize import sanitize_field
from corral.errors import GitError

#: One ref a line: name, object, and the ref a symbolic ref names (NUL-separated: names are taken byte for byte).
FORMAT = "--format=%(refname)%00%(objectname)%00%(symref)"


def delete_task_branch(git: Git, repo: Path | str, branch: str, *, expected: str | None = None) -> str | None:
    """Delete ``refs/heads/<branch>``; the value it held, or None when it was already absent.

    Replaces ``Git.delete_branch`` (``branch -D`` with its failure swallowed): the ref is deleted
    with ``update-ref --no-deref -d`` — a symbolic ref is deleted itself, never followed — as a
    compare-and-swap against the value read (or ``expected``, when the caller archived a tip and
    must not lose a commit made after it), with hooks off. A branch that is absent (or goes
    meanwhile) is success. Anything else is a :class:`GitError` with a hint: a lock file in the
    way, a branch moved since, an unreadable ref file.
    """
    where = Path(repo)
    ref = f"refs/heads/{branch}"
    value = branch_value(git, where, ref)
    if value is None:
        return None
    oid, symref = value
    if expected is not None and oid != expected:
        raise GitError(
            f"Branch {sanitize_field(branch)} moved to {oid[:12] or 'nothing'} since corral read {expected[:12]}; "
            "corral did not delete it.",
            code="branch-moved",
            hint=f"See what it holds with `git log {sanitize_field(branch)}`, then run the command again.",
        )
    args = [*QUIET, "update-ref", "--no-deref", "-d", ref] + ([oid] if oid else [])
    done = git.run(*args, cwd=where, check=False)
    if done.returncode == 0 or branch_value(git, where, ref) is None:
        return oid or symref
    said = (done.stderr or done.stdout).strip()
    raise GitError(
        f"corral could not delete branch {sanitize_field(branch)}: {first_error(said, done.returncode)}",
        code="branch-delete-failed",
        hint=_delete_hint(where, ref, said),
    )


def first_error(said: str, code: int) -> str:
    """git's own line about what failed (its ``fatal:``/``error:`` line, not the advice after it), escaped."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    found = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "")
    return sanitize_field(found or f"exit {code}")[:300]


def branch_value(git: Git, repo: Path, ref: str) -> tuple[str, str] | None:
    """(object, symref target) of ``ref``; ``("", "")`` for a loose file git cannot read; None when absent."""
    out = git.run("for-each-ref", FORMAT, ref, cwd=repo).stdout
    for line in out.split("\n"):
        name, _, rest = line.partition("\0")
        if name == ref:
            oid, _, symref = rest.partition("\0")
            return oid, symref
    common = common_dir(repo)
    if common is not None and os.path.lexists(common / ref):
        return "", ""  # a file git does not list: a dangling symbolic ref, garbage
    return None


def _delete_hint(repo: Path, ref: str, said: str) -> str:
    lock = re.search(r"'([^'\n]*\.lock)'", said)
    if lock is not None:
        path = sanitize_field(lock.group(1))
        return (
            f"A lock file is in the way: {path}. When no git runs in the repository, remove it "
            f"(rm '{path}') and run the command again."
        )
    return f"Run `git update-ref --no-deref -d {sanitize_field(ref)}` in {repo} to see why, then run the command again."
