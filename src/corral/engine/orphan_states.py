"""State whose repository is gone is listed by :func:`orphans` (for ``doctor`` and ``corral project
list``) and put aside by :func:`archive` into ``$CORRAL_HOME/archive/`` (nothing is deleted).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from corral.adapters.git import Git
from corral.adapters.locks import is_locked
from corral.engine.identity import Identity, compute
from corral.engine.identity_files import (
    archive_dir,
    holds,
    legacy_repo,
    project_states,
    projects_dir,
    read_cache,
    read_record,
)
from corral.engine.paths import ProjectPaths, corral_home, project_slug
from corral.engine.private_state import make_private_dir
from corral.engine.state_location import Located, attach
from corral.errors import NotFoundError, RefusedError


class Orphan(Struct, frozen=True):
    """A state directory whose checkout is not where it was attached."""

    state: Path
    path: str | None  # where its repository was (None: unknown)
    reason: str  # gone | elsewhere | unknown
    identity: Identity | None
    holds: list[str]  # what the state still holds, for the person to judge

    @property
    def message(self) -> str:
        where = self.path or "an unknown path"
        what = f" It holds {', '.join(self.holds)}." if self.holds else " It holds no task."
        if self.reason == "gone":
            return f"state {self.state.name} belongs to {where}, which is gone (moved or removed).{what}"
        if self.reason == "elsewhere":
            return f"state {self.state.name} belongs to {where}, which now holds another repository.{what}"
        return f"state {self.state.name} names no repository (made by an older corral, not opened since).{what}"

    @property
    def hint(self) -> str:
        return (
            "If the repository moved, run any corral command in its new place and its tasks follow "
            f"(or: corral --repo NEW_PATH project attach --state {self.state.name}); "
            f"if it is gone for good: corral project archive {self.state.name} "
            f"(kept in {archive_dir(self.state.parent.parent)})"
        )

    def as_view(self) -> dict[str, Any]:
        """The orphaned state as --json gives it: a view (its name, identity and hint derived, its path as text)."""
        return {
            "state": str(self.state),
            "name": self.state.name,
            "repository": self.path,
            "reason": self.reason,
            "identity": self.identity.to_json() if self.identity else None,
            "holds": self.holds,
            "hint": self.hint,
        }


def _holding(paths: ProjectPaths) -> list[str]:
    """What a state directory still holds: its tasks and worktrees, counted."""
    found = []
    for what, directory in (("task directories", paths.tasks), ("worktrees", paths.worktrees)):
        try:
            count = sum(1 for _ in os.scandir(directory))
        except OSError:
            continue
        if count:
            found.append(f"{count} {what}")
    return found


def orphans(home: Path | None = None) -> list[Orphan]:
    """Every state directory under ``home`` whose repository moved, is gone or is unknown."""
    home = home or corral_home()
    out = []
    for state in project_states(home):
        record = read_record(state)
        paths = ProjectPaths(repo=Path("."), home=home, root=state)
        if record is not None and record.path:
            if holds(record.path, state.name):
                continue
            reason = "gone" if not os.path.exists(record.path) else "elsewhere"
            out.append(Orphan(state, record.path, reason, record.identity, _holding(paths)))
            continue
        path = legacy_repo(state)
        if path is not None and os.path.isdir(path) and project_slug(Path(path)) == state.name:
            continue  # an older corral's state of a repository still there: adopted when next opened
        reason = "unknown" if path is None else ("gone" if not os.path.exists(path) else "elsewhere")
        out.append(Orphan(state, path, reason, None, _holding(paths)))
    return out


def find_state(home: Path, given: str) -> Path:
    """A state directory named by its name, its path, or a unique prefix of its name."""
    direct = Path(given).expanduser()
    if direct.is_absolute() and direct.parent == projects_dir(home) and direct.is_dir():
        return direct
    states = project_states(home)
    exact = [s for s in states if s.name == given]
    matches = exact or [s for s in states if s.name.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    raise NotFoundError(
        f"No state directory '{given}' under {projects_dir(home)}" + (f" ({len(matches)} match)." if matches else "."),
        code="state-not-found",
        hint="See them with `corral project list`.",
    )


def attach_state(git: Git, repo: Path, state: Path, home: Path | None = None) -> Located:
    """Attach the checkout at ``repo`` to the state directory ``state`` (a repository re-cloned or found again).

    Refused when the state is another project's, or another checkout still holds it.
    """
    home = home or corral_home()
    identity = compute(git, repo)
    if identity is None:
        raise RefusedError(f"{repo} has no commit yet, so it is no project's checkout.", code="project-mismatch")
    record = read_record(state)
    theirs = record.identity if record is not None else None
    if theirs is not None and theirs.project != identity.project:
        raise RefusedError(
            f"{state.name} is the state of another project (root commit {theirs.root_commit[:12]}, "
            f"remote {theirs.remote or 'none'}); {repo} is {identity.root_commit[:12]}, "
            f"{identity.remote or 'no remote'}.",
            code="project-mismatch",
            hint="Attach a checkout of that project, or archive the state: corral project archive " + state.name,
        )
    if record is not None and record.path and record.path != str(repo) and holds(record.path, state.name):
        raise RefusedError(
            f"{record.path} still holds {state.name}.",
            code="state-attached",
            hint=f"In a copy, choose: corral --repo '{repo}' project attach (without --state), or project fresh.",
        )
    before = read_cache(repo)
    own = theirs or identity
    located = attach(git, repo, home, own, state)
    if before is not None and before.home == str(home) and before.state != state.name:
        # the empty list this checkout started meanwhile (a fresh clone's) is put aside, not left as an orphan
        previous = projects_dir(home) / before.state
        if previous.is_dir() and not _holding(ProjectPaths(repo=repo, home=home, root=previous)):
            try:
                archive(previous, home)
            except (OSError, RefusedError):
                pass
    return replace(located, moved_from=record.path if record is not None else None)


def archive(state: Path, home: Path | None = None) -> Path:
    """Move a state directory whose repository is gone into ``$CORRAL_HOME/archive/`` (nothing is deleted)."""
    home = home or corral_home()
    record = read_record(state)
    if record is not None and holds(record.path, state.name):
        raise RefusedError(
            f"{state.name} belongs to {record.path}, which is there.",
            code="state-attached",
            hint="Archive only the state of a repository that is gone; see `corral project list`.",
        )
    if is_locked(ProjectPaths(repo=Path("."), home=home, root=state).daemon_lock):
        raise RefusedError(
            f"A corral daemon holds {state.name}.",
            code="state-in-use",
            hint="Stop it first (`corral daemon stop`).",
        )
    make_private_dir(archive_dir(home))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = archive_dir(home) / f"{state.name}--{stamp}"
    os.rename(state, target)
    return target
