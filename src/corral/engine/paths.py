"""Where corral keeps a repository's state: outside the working tree, one directory per repo.

``$CORRAL_HOME/projects/<slug>--<digest>/`` (default ``CORRAL_HOME``: the platform
user-data dir for ``corral``) holds ``corral.db``, ``tasks/<task>/protocol/``,
``tasks/<task>/turns/<seq>/output.log``, ``diagnostics/``, ``worktrees/<ref>/`` and
the operational log. ``CORRAL_HOME`` moves all of it (tests set it).
Which directory a checkout uses is chosen by its project identity (``engine/identity.py``:
the root commit and the remote, so a moved repository keeps its state); :func:`project_slug`,
the path's digest, names the directories older corrals made and a repository without a commit.

The state is the user's alone (``engine/private_state``: directories 0700, files 0600).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from msgspec import Struct

from corral.domain.refs import is_plain_id, is_ref
from corral.errors import UnsafeName


def _user_dir(kind: str) -> Path:
    """corral's user data or config directory: XDG's on Linux (what platformdirs answers there,
    without loading it on every command), the platform's own elsewhere."""
    if sys.platform.startswith("linux"):
        var, fallback = ("XDG_DATA_HOME", ".local/share") if kind == "data" else ("XDG_CONFIG_HOME", ".config")
        base = os.environ.get(var, "").strip()
        return (Path(base) if base else Path.home() / fallback) / "corral"
    import platformdirs

    found = platformdirs.user_data_dir if kind == "data" else platformdirs.user_config_dir
    return Path(found("corral", appauthor=False))


def corral_home() -> Path:
    env = os.environ.get("CORRAL_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return _user_dir("data")


#: The shared usage-limit pause of every project under one CORRAL_HOME (engine/runtime/usage_pause.py).
USAGE_LIMITS = "usage-limits.json"


#: The home daemon's directory under ``CORRAL_HOME`` (engine/daemons.py), and its log there.
DAEMON_DIR = "daemon"
DAEMON_LOG = "daemon.log"


def usage_limits_file(home: Path | None = None) -> Path:
    return (home or corral_home()) / USAGE_LIMITS


def user_config_file() -> Path:
    env = os.environ.get("CORRAL_CONFIG_FILE")
    if env:
        return Path(env).expanduser()
    return _user_dir("config") / "config.toml"


def project_slug(repo: Path) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", repo.name.lower()).strip("-") or "repo"
    import hashlib  # an older corral's path-keyed state: looked for only when no identity is cached

    digest = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]
    return f"{name[:40]}--{digest}"


#: Where each task's own files live, under the project's state directory.
TASKS_DIR = "tasks"
#: One empty entry per task whose agent left a marker (its waits, its progress line): ``runtime/marked``.
MARKED_DIR = "marked"

#: The project's identity and the checkout attached, in the state directory (engine/identity.py).
REPOSITORY_RECORD = "repository.json"
#: The identity cache, in the repository's (common) git directory (engine/identity.py).
IDENTITY_CACHE = Path("corral") / "identity.json"

#: A turn's verbatim harness output and its stderr, in the turn's directory.
OUTPUT_LOG = "output.log"
STDERR_LOG = "stderr.log"
TURN_LOGS = (OUTPUT_LOG, STDERR_LOG)
#: The order of the two: JSON Lines of (stream, offsets, time), written by the supervisor's copy.
OUTPUT_INDEX = "output.index"


#: A diagnostic's file name as ``read/diagnostics.reference`` makes it: one plain component.
_DIAGNOSTIC = re.compile(r"[0-9A-Za-z_-]{1,80}\.json")


def plain(name: str, what: str) -> str:
    """``name`` itself when it is one plain path component; else :class:`UnsafeName`. Every id a
    path is made of passes here: on a shared store a row may come from another host (or a hostile
    one), and ``../`` or ``/`` in it must never lead a write, a read or a removal anywhere else."""
    if not is_plain_id(name):
        raise _unsafe(what, name)
    return name


def _unsafe(what: str, name: str) -> UnsafeName:
    shown = name.encode("unicode_escape").decode("ascii")[:80]
    return UnsafeName(
        f"The store names a {what} that is not a plain name: '{shown}'.",
        hint="No corral writes such a row; nothing was read, written or removed through it. "
        "`corral doctor` checks the store.",
    )


class ProjectPaths(Struct, frozen=True):
    """The layout of one repository's state directory."""

    repo: Path
    home: Path
    root: Path

    @classmethod
    def for_repo(cls, repo: Path, home: Path | None = None) -> ProjectPaths:
        home = home or corral_home()
        return cls(repo=repo, home=home, root=home / "projects" / project_slug(repo))

    @property
    def db(self) -> Path:
        return self.root / "corral.db"

    @property
    def tasks(self) -> Path:
        return self.root / TASKS_DIR

    def task_dir(self, task_id: str) -> Path:
        return self.tasks / plain(task_id, "task id")

    def protocol_dir(self, task_id: str) -> Path:
        # Built in one step, not joined three times: the reconciler asks this of every working task.
        return Path(os.path.join(self.root, TASKS_DIR, plain(task_id, "task id"), "protocol"))

    def turns_dir(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "turns"

    def journal_dir(self, task_id: str, session_id: str) -> Path:
        """Where a session's failure journal lives (docs/incidents.md): it goes with the task."""
        return self.task_dir(task_id) / "sessions" / plain(session_id, "session id")

    def turn_dir(self, task_id: str, sequence: int) -> Path:
        return self.turns_dir(task_id) / str(sequence)

    def output_log(self, task_id: str, sequence: int) -> Path:
        return self.turn_dir(task_id, sequence) / OUTPUT_LOG

    def lifecycle_lock(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "lifecycle.lock"

    def pairing_lock(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "pairing.lock"

    def chat_lock(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "chat.lock"

    @property
    def chat_holds(self) -> Path:
        """Where open chats' holds live, one file per task: the reconciler lists this directory on
        every pass, so it holds only them (never one entry per task ever made)."""
        return self.root / "chat-holds"

    def chat_hold(self, task_id: str) -> Path:
        """The worktree's state before an open chat, until its changes are kept aside (recovery/pairs)."""
        return self.chat_holds / f"{plain(task_id, 'task id')}.json"

    @property
    def marked(self) -> Path:
        """The tasks whose agents left markers, one entry each (``runtime/marked``)."""
        return self.root / MARKED_DIR

    @property
    def worktrees(self) -> Path:
        return self.root / "worktrees"

    def worktree(self, ref: str) -> Path:
        if not is_ref(ref):
            raise _unsafe("ref", ref)
        return self.worktrees / ref

    @property
    def diagnostics(self) -> Path:
        return self.root / "diagnostics"

    def diagnostics_dir(self, task_id: str) -> Path:
        """Where a task's diagnostics live (``read/diagnostics``): they go with the task."""
        return self.diagnostics / plain(task_id, "task id")

    def diagnostic(self, reference: str) -> Path:
        """The file a diagnostic reference (``<task id>/<name>.json``, as stored) names."""
        task_id, _, name = reference.partition("/")
        if _DIAGNOSTIC.fullmatch(name) is None:
            raise _unsafe("diagnostic reference", reference)
        return self.diagnostics_dir(task_id) / name

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def daemon_lock(self) -> Path:
        return self.root / "daemon.lock"

    @property
    def daemon_state(self) -> Path:
        return self.root / "daemon.json"

    @property
    def daemon_log(self) -> Path:
        """The log of the home's daemon, which serves this project among others."""
        return self.home / DAEMON_DIR / DAEMON_LOG

    @property
    def supervisor_log(self) -> Path:
        """Where detached supervisors' own stdout and stderr go (never an agent's output)."""
        return self.logs / "supervisor.log"

    @property
    def worktrees_lock(self) -> Path:
        """Held while corral prunes and adds a worktree (a worker runs several turns at once)."""
        return self.root / "locks" / "worktrees.lock"

    @property
    def worker_lock(self) -> Path:
        """Held by this home's one ``corral worker`` (docs/workers.md)."""
        return self.home / "worker.lock"

    @property
    def merged_sweep(self) -> Path:
        """The merged-branch sweep's memory of which branch and target tips it already looked at."""
        return self.root / "merged-sweep.json"

    @property
    def project_config(self) -> Path:
        return self.repo / "corral.toml"

    @property
    def repository_record(self) -> Path:
        return self.root / REPOSITORY_RECORD

    @property
    def identity_cache(self) -> Path:
        return self.repo / ".git" / IDENTITY_CACHE

    def as_dict(self) -> dict[str, str]:
        return {
            "repository": str(self.repo),
            "home": str(self.home),
            "state": str(self.root),
            "database": str(self.db),
            "tasks": str(self.tasks),
            "worktrees": str(self.worktrees),
            "diagnostics": str(self.diagnostics),
            "daemon_log": str(self.daemon_log),
            "supervisor_log": str(self.supervisor_log),
            "project_config": str(self.project_config),
            "repository_record": str(self.repository_record),
            "identity_cache": str(self.identity_cache),
            "user_config": str(user_config_file()),
        }


def marked_entry(protocol_dir: Path) -> Path:
    """The :attr:`ProjectPaths.marked` entry of the task whose protocol directory this is."""
    task_dir = protocol_dir.parent
    return task_dir.parent.parent / MARKED_DIR / plain(task_dir.name, "task id")
