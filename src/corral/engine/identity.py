"""A project's identity, and which state directory a checkout of it uses.

A project is its repository's **root commit** plus its **normalized remote URL** (``origin``;
the root commit alone where there is no remote). Where history has several root commits
(unrelated histories merged), the lowest SHA of those reachable from ``HEAD`` is taken, so
every clone computes the same one whatever order git walks them in. The URL is normalized so
that the ways of spelling one remote agree: the scheme and the user (``git@``, ``https://me@``)
are dropped, as are the port, a trailing ``/`` and ``.git``, and the host is lower-cased;
``git@github.com:o/r.git`` and ``https://GitHub.com/o/r`` are both ``github.com/o/r``. A local
path remote is its absolute path. Workers on other hosts will match clones by this identity.

The identity is computed once per checkout and cached in the repository's git directory
(``.git/corral/identity.json``, in the common dir so the task worktrees share it), with the
state directory it names and the path the checkout was seen at. Every state directory holds
``repository.json``: the identity and the path of the one checkout attached to it. Opening a
checkout compares the two:

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

State whose repository is gone is listed by :func:`orphans` (for ``doctor`` and ``corral project
list``) and put aside by :func:`archive` into ``$CORRAL_HOME/archive/`` (nothing is deleted).
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corral.adapters.files import write_atomic
from corral.adapters.git import Git
from corral.adapters.locks import is_locked
from corral.domain.record import record, replace
from corral.engine.paths import IDENTITY_CACHE, REPOSITORY_RECORD, ProjectPaths, corral_home, project_slug
from corral.engine.private_state import PRIVATE_FILE_MODE, make_private_dir, private_umask
from corral.errors import NotFoundError, RefusedError, RepositoryCopied

CACHE = IDENTITY_CACHE  # relative to the repository's (common) git directory
RECORD = REPOSITORY_RECORD  # in each state directory: the checkout it belongs to
VERSION = 1
_MAX_FILE = 64 * 1024  # both files are a few hundred bytes: anything bigger is not ours


@record
class Identity:
    """Who a project is: its root commit, its normalized remote, and (for a copy started fresh) an instance."""

    root_commit: str
    remote: str | None = None
    instance: str | None = None

    @property
    def project(self) -> str:
        """The project's id, the same in every clone: what workers on several hosts match."""
        return _digest(self.root_commit, self.remote or "")[:16]

    @property
    def key(self) -> str:
        """The id of this project's state on this host (a fresh copy's instance makes it its own)."""
        if not self.instance:
            return self.project
        return _digest(self.root_commit, self.remote or "", self.instance)[:16]

    def to_json(self) -> dict[str, Any]:
        return {
            "root_commit": self.root_commit,
            "remote": self.remote,
            "instance": self.instance,
            "project": self.project,
            "key": self.key,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Identity | None:
        root = data.get("root_commit")
        remote = data.get("remote")
        instance = data.get("instance")
        if not isinstance(root, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", root):
            return None
        return cls(
            root,
            remote if isinstance(remote, str) and remote else None,
            instance if isinstance(instance, str) and instance else None,
        )


def _digest(*parts: str) -> str:
    import hashlib  # only when an identity is first computed: a command that finds it cached never hashes

    return hashlib.sha256("\0".join(("corral-project", *parts)).encode()).hexdigest()


def _instance() -> str:
    import secrets  # only for a checkout that starts a list of its own

    return secrets.token_hex(8)


# -- computing it ------------------------------------------------------------------------------

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.*)$", re.S)


def normalize_remote(url: str, base: Path | None = None) -> str | None:
    """One spelling for one remote: ``host/path`` (no scheme, user, port, ``.git``), or a local path."""
    text = url.strip()
    if not text:
        return None
    host = ""
    found = _SCHEME.match(text)
    if found and found.group(1).lower() != "file":
        authority, _, path = found.group(2).partition("/")
        host = authority.rpartition("@")[2]
        if not host.startswith("["):  # an IPv6 literal keeps its colons
            host = host.partition(":")[0]
    elif found:
        path = found.group(2)
        path = path[path.index("/") :] if "/" in path else path  # file://host/path: the host is local
    elif (scp := _SCP.match(text)) and "/" not in text.split(":", 1)[0]:
        host, path = scp.group(1), scp.group(2)
    else:
        path = text
    path = re.sub(r"/{2,}", "/", path).rstrip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")].rstrip("/")
    if host:
        return f"{host.lower()}/{path.lstrip('/')}"
    local = Path(path).expanduser()
    if not local.is_absolute() and base is not None:
        local = base / local
    return os.path.normpath(str(local))


def compute(git: Git, repo: Path) -> Identity | None:
    """The identity of the repository at ``repo``, or None while it has no commit."""
    found = git.run("rev-list", "--max-parents=0", "HEAD", cwd=repo, check=False)
    roots = sorted(line.strip() for line in found.stdout.splitlines() if line.strip())
    if found.returncode != 0 or not roots:
        return None
    remote = git.run("config", "--get", "remote.origin.url", cwd=repo, check=False)
    url = remote.stdout.strip() if remote.returncode == 0 else ""
    return Identity(roots[0], normalize_remote(url, repo) if url else None)


# -- the two files -----------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_FILE + 1)
    except OSError:
        return None
    if len(raw) > _MAX_FILE:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, Any]) -> bool:
    """Best effort: a directory that refuses writes (a read-only mount, a full disk) never stops a
    command here; what needs the state directory reports it with its own coded error, and the
    next command tries again."""
    try:
        make_private_dir(path.parent)
        with private_umask():
            write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), durable=False)
        os.chmod(path, PRIVATE_FILE_MODE)
    except OSError:
        return False
    return True


def cache_file(repo: Path) -> Path:
    return repo / ".git" / CACHE


@record
class Cache:
    """What a checkout's git directory remembers: its identity, its state directory, where it was seen."""

    identity: Identity
    state: str  # the state directory's name under projects/
    path: str
    home: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            **self.identity.to_json(),
            "state": self.state,
            "path": self.path,
            "home": self.home,
        }


def read_cache(repo: Path) -> Cache | None:
    data = _read_json(cache_file(repo))
    if data is None:
        return None
    identity = Identity.from_json(data)
    state, path, home = data.get("state"), data.get("path"), data.get("home")
    if identity is None or not all(isinstance(v, str) and v for v in (state, path, home)):
        return None
    assert isinstance(state, str) and isinstance(path, str) and isinstance(home, str)
    if "/" in state or state in (".", ".."):
        return None
    return Cache(identity, state, path, home)


def write_cache(repo: Path, cache: Cache) -> None:
    _write_json(cache_file(repo), cache.to_json())


@record
class Record:
    """A state directory's record of the checkout attached to it."""

    state: Path
    identity: Identity | None  # None: made by an older corral and not adopted yet
    path: str | None  # the attached checkout (None: unknown)
    attached_at: str | None = None

    @property
    def name(self) -> str:
        return self.state.name

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            **(self.identity.to_json() if self.identity else {}),
            "path": self.path,
            "attached_at": self.attached_at,
        }


def read_record(state: Path) -> Record | None:
    data = _read_json(state / RECORD)
    if data is None:
        return None
    path = data.get("path")
    at = data.get("attached_at")
    return Record(
        state,
        Identity.from_json(data),
        path if isinstance(path, str) and path else None,
        at if isinstance(at, str) else None,
    )


def write_record(state: Path, identity: Identity, path: Path) -> Record:
    record = Record(state, identity, str(path), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    _write_json(state / RECORD, record.to_json())
    return record


def projects_dir(home: Path) -> Path:
    return home / "projects"


def archive_dir(home: Path) -> Path:
    return home / "archive"


def project_states(home: Path) -> list[Path]:
    """The state directory of every project kept under ``home``, in name order."""
    try:
        return sorted(Path(e.path) for e in os.scandir(projects_dir(home)) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _legacy_repo(state: Path) -> str | None:
    """The repository a state directory of an older corral belonged to, read off a worktree's ``.git`` file."""
    try:
        entries = sorted(os.scandir(state / "worktrees"), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        try:
            with open(Path(entry.path) / ".git", encoding="utf-8", errors="replace") as f:
                line = f.read(4096).strip()
        except OSError:
            continue
        found = re.match(r"gitdir:\s*(.+?)/\.git/worktrees/[^/]+$", line)
        if found:
            return found.group(1)
    return None


def _moved_legacy(repo: Path, home: Path) -> Path | None:
    """An older corral's state directory (no record) whose task worktrees this repository's git
    directory lists, and whose repository, as its worktrees name it, is gone: this one moved."""
    try:
        entries = sorted(os.scandir(repo / ".git" / "worktrees"), key=lambda e: e.name)
    except OSError:
        return None
    prefix = str(projects_dir(home)) + os.sep
    for entry in entries:
        try:
            target = (Path(entry.path) / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if not target.startswith(prefix):
            continue
        state = projects_dir(home) / target[len(prefix) :].split(os.sep, 1)[0]
        record = read_record(state)
        if not state.is_dir() or (record is not None and record.identity is not None):
            continue
        old = _legacy_repo(state)
        if old is not None and old != str(repo) and not os.path.exists(old):
            return state
    return None


def holds(path: str | None, state: str) -> bool:
    """Whether the checkout at ``path`` is there and its cache names the state directory ``state``."""
    if not path:
        return False
    cache = read_cache(Path(path))
    return cache is not None and cache.state == state


# -- choosing the state directory ----------------------------------------------------------------


@record
class Located:
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
    before = _moved_legacy(repo, home)
    if before is not None:  # an older corral's state, and the repository moved before this corral saw it
        located = _attach(git, repo, home, identity, before)
        return replace(located, moved_from=_legacy_repo(before), adopted=True)
    alive = next((r for r in mine if holds(r.path, r.name)), None)
    if alive is not None:  # a second checkout of a project whose state another checkout holds
        return _settle(git, repo, home, identity, alive.state, choice)
    # the project's state, if any, belongs to a checkout that is gone: a fresh clone starts its
    # own list (doctor shows the old one, to reattach or archive)
    if mine:
        identity = replace(identity, instance=_instance())
    return _attach(git, repo, home, identity, _new_state(repo, home, identity))


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
        return _attach(git, repo, home, identity, state)
    if record.path == str(repo):
        if cache is None or cache.path != str(repo) or cache.state != state.name or cache.home != str(home):
            write_cache(repo, Cache(identity, state.name, str(repo), str(home)))
        return Located(ProjectPaths(repo=repo, home=home, root=state), identity)
    if not holds(record.path, state.name):  # the old path is gone (or holds something else): a move
        located = _attach(git, repo, home, identity, state)
        return replace(located, moved_from=record.path)
    if choice == "attach":
        located = _attach(git, repo, home, identity, state)
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


def _attach(git: Git, repo: Path, home: Path, identity: Identity, state: Path) -> Located:
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
    return _attach(git, repo, home, own, _new_state(repo, home, own))


# -- state whose repository is gone ----------------------------------------------------------------


@record
class Orphan:
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

    def to_json(self) -> dict[str, Any]:
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
        path = _legacy_repo(state)
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
    located = _attach(git, repo, home, own, state)
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
