"""Which state directory a checkout uses: the usual case, a repository that moved, and a copy.

Opening a checkout compares the identity cached in its git directory with the record in the state
directory it names (``engine/identity_files``):

- the state is attached here: the usual case, two small file reads;
- the state is attached to a path that no longer holds this project (the old path is gone, or
  something else is there): the repository **moved**. The state is reattached here at once and
  ``git worktree repair`` relinks the tasks' worktrees (they live in the state directory; their
  ``.git`` files name the repository's git directory, which moved);
- the state is attached to a path that still holds this project: this checkout is a **copy**
  (``cp -r``, or a second clone). It is refused with :class:`~corral.errors.RepositoryCopied`
  until the person chooses: ``corral project attach`` (the tasks follow this checkout; their
  worktrees are relinked to it) or ``corral project fresh`` (this checkout starts its own,
  empty task list: its identity gains an *instance* token, and git's records of the original's
  worktrees are dropped from the copy's git directory, never the worktrees themselves).

A checkout seen for the first time (no cache) adopts the state directory recorded for it, or
one made by an older corral (keyed by the repository's path: it is adopted where it is, never
renamed, so running supervisors and recorded worktree paths stay valid; and found by its task
worktrees when the repository moved before this corral saw it). A repository without
a commit has no identity yet and keeps the path-keyed directory until its first commit.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from msgspec import Struct
from msgspec.structs import replace

from corral.adapters.git import Git
from corral.engine.identity import Identity, compute
from corral.engine.identity_files import (
    Cache,
    holds,
    legacy_repo,
    moved_legacy,
    project_states,
    projects_dir,
    read_cache,
    read_record,
    write_cache,
    write_record,
)
from corral.engine.paths import ProjectPaths, corral_home
from corral.errors import RepositoryCopied


def _instance() -> str:
    import secrets  # only for a checkout that starts a list of its own

    return secrets.token_hex(8)


class Located(Struct, frozen=True):
    """Where a checkout's state is, and what opening it found."""

    paths: ProjectPaths
    identity: Identity | None
    moved_from: str | None = None  # the repository moved from here; its tasks were reattached
    adopted: bool = False  # a state directory of an older corral, now recorded


def locate(git: Git, repo: Path, home: Path | None = None, choice: str | None = None) -> Located:
    """The state directory of the checkout at ``repo`` (its main root), recognising a move and a copy.

    ``choice`` answers the copy question: ``"attach"`` (the tasks follow this checkout) or
    ``"fresh"`` (this checkout starts its own task list). Without one, a copy is refused with
    :class:`RepositoryCopied`.
    """
    home = home or corral_home()
    cache = read_cache(repo)
    if cache is not None and cache.home == str(home) and (projects_dir(home) / cache.state).is_dir():
        return _settle(git, repo, home, cache.identity, projects_dir(home) / cache.state, choice, cache)
    identity = cache.identity if cache is not None else compute(git, repo)
    if identity is None:  # no commit yet: the path keys it, as before
        return Located(ProjectPaths.for_repo(repo, home), None)
    if cache is not None and cache.identity.instance:  # a fresh copy's own state, in another home
        return _settle(git, repo, home, identity, _new_state(repo, home, identity), choice)
    return _first_sight(git, repo, home, identity, choice)


def _first_sight(git: Git, repo: Path, home: Path, identity: Identity, choice: str | None) -> Located:
    """No usable cache: the state recorded for this project, else an older corral's, else a new one."""
    mine = [r for r in (read_record(s) for s in project_states(home)) if r is not None and r.identity == identity]
    here = next((r for r in mine if r.path == str(repo)), None)
    if here is not None:
        return _settle(git, repo, home, identity, here.state, choice)
    legacy = ProjectPaths.for_repo(repo, home).root
    old = read_record(legacy) if legacy.is_dir() else None
    if legacy.is_dir() and (old is None or old.identity is None):
        write_record(legacy, identity, repo)
        write_cache(repo, Cache(identity, legacy.name, str(repo), str(home)))
        return Located(ProjectPaths(repo=repo, home=home, root=legacy), identity, adopted=True)
    before = moved_legacy(repo, home)
    if before is not None:  # an older corral's state, and the repository moved before this corral saw it
        located = attach(git, repo, home, identity, before)
        return replace(located, moved_from=legacy_repo(before), adopted=True)
    alive = next((r for r in mine if holds(r.path, r.name)), None)
    if alive is not None:  # a second checkout of a project whose state another checkout holds
        return _settle(git, repo, home, identity, alive.state, choice)
    # the project's state, if any, belongs to a checkout that is gone: a fresh clone starts its
    # own list (doctor shows the old one, to reattach or archive)
    if mine:
        identity = replace(identity, instance=_instance())
    return attach(git, repo, home, identity, _new_state(repo, home, identity))


def _new_state(repo: Path, home: Path, identity: Identity) -> Path:
    name = re.sub(r"[^a-z0-9]+", "-", repo.name.lower()).strip("-") or "repo"
    existing = [s for s in project_states(home) if s.name.endswith(f"--{identity.key[:12]}")]
    return existing[0] if existing else projects_dir(home) / f"{name[:40]}--{identity.key[:12]}"


def _settle(
    git: Git,
    repo: Path,
    home: Path,
    identity: Identity,
    state: Path,
    choice: str | None,
    cache: Cache | None = None,
) -> Located:
    record = read_record(state)
    if record is None or record.path is None:
        return attach(git, repo, home, identity, state)
    if record.path == str(repo):
        if cache is None or cache.path != str(repo) or cache.state != state.name or cache.home != str(home):
            write_cache(repo, Cache(identity, state.name, str(repo), str(home)))
        return Located(ProjectPaths(repo=repo, home=home, root=state), identity)
    if not holds(record.path, state.name):  # the old path is gone (or holds something else): a move
        located = attach(git, repo, home, identity, state)
        return replace(located, moved_from=record.path)
    if choice == "attach":
        located = attach(git, repo, home, identity, state)
        return replace(located, moved_from=record.path)
    if choice == "fresh":
        return start_fresh(git, repo, home, identity, state)
    raise RepositoryCopied(
        f"{repo} is a copy of the repository at {record.path}, whose tasks corral keeps in {state}. "
        "corral will not let two checkouts drive one task list.",
        hint=(
            f"Choose for this checkout: `corral --repo '{repo}' project attach` moves the tasks here "
            f"(their worktrees follow; {record.path} then has none), or "
            f"`corral --repo '{repo}' project fresh` starts an empty task list here."
        ),
    )


def attach(git: Git, repo: Path, home: Path, identity: Identity, state: Path) -> Located:
    """Record ``repo`` as the checkout of ``state`` (both files) and relink the tasks' worktrees to it."""
    write_record(state, identity, repo)
    write_cache(repo, Cache(identity, state.name, str(repo), str(home)))
    relink_worktrees(git, repo, state)
    return Located(ProjectPaths(repo=repo, home=home, root=state), identity)


def relink_worktrees(git: Git, repo: Path, state: Path) -> None:
    """Point the state's task worktrees back at ``repo``'s git directory (``git worktree repair``)."""
    try:
        worktrees = [str(Path(e.path)) for e in os.scandir(state / "worktrees") if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    if worktrees:
        # a worktree git does not know in this repository is left as it is (repair says so and goes on)
        git.run("worktree", "repair", *sorted(worktrees), cwd=repo, check=False)


def start_fresh(git: Git, repo: Path, home: Path, identity: Identity, shared: Path) -> Located:
    """This checkout (a copy) gets its own identity instance and an empty state directory.

    The copy's git directory still lists the original's task worktrees (copied with it): those
    records are dropped, so git in the copy neither shows them nor refuses their branches; the
    worktrees themselves, and the original's records of them, are untouched.
    """
    import shutil  # only a copy starting fresh removes anything

    admin = repo / ".git" / "worktrees"
    try:
        entries = list(os.scandir(admin))
    except OSError:
        entries = []
    inside = str(shared / "worktrees") + os.sep
    for entry in entries:
        try:
            target = (Path(entry.path) / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if target.startswith(inside):
            shutil.rmtree(entry.path, ignore_errors=True)
    own = replace(identity, instance=_instance())
    return attach(git, repo, home, own, _new_state(repo, home, own))
