"""Where corral keeps a repository's state: outside the working tree, one directory per repo.

``$CORRAL_HOME/projects/<slug>--<digest>/`` (default ``CORRAL_HOME``: the platform
user-data dir for ``corral``) holds ``corral.db``, ``tasks/<task>/protocol/``,
``tasks/<task>/turns/<seq>/output.log``, ``diagnostics/``, ``worktrees/<ref>/`` and
the operational log. ``CORRAL_HOME`` moves all of it (tests set it).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path


def corral_home() -> Path:
    env = os.environ.get("CORRAL_HOME")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs  # only when CORRAL_HOME is unset: every test and most runs never need it

    return Path(platformdirs.user_data_dir("corral", appauthor=False))


def user_config_file() -> Path:
    env = os.environ.get("CORRAL_CONFIG_FILE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("corral", appauthor=False)) / "config.toml"


def project_slug(repo: Path) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", repo.name.lower()).strip("-") or "repo"
    digest = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:12]
    return f"{name[:40]}--{digest}"


#: A turn's verbatim harness output and its stderr, in the turn's directory.
OUTPUT_LOG = "output.log"
STDERR_LOG = "stderr.log"
TURN_LOGS = (OUTPUT_LOG, STDERR_LOG)


@dataclass(frozen=True)
class ProjectPaths:
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
        return self.root / "tasks"

    def task_dir(self, task_id: str) -> Path:
        return self.tasks / task_id

    def protocol_dir(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "protocol"

    def turns_dir(self, task_id: str) -> Path:
        return self.task_dir(task_id) / "turns"

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
    def worktrees(self) -> Path:
        return self.root / "worktrees"

    def worktree(self, ref: str) -> Path:
        return self.worktrees / ref

    @property
    def diagnostics(self) -> Path:
        return self.root / "diagnostics"

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
        return self.logs / "daemon.log"

    @property
    def daemon_out(self) -> Path:
        """The daemon's own stdout and stderr (what it prints before its log is set up)."""
        return self.logs / "daemon.out"

    @property
    def supervisor_log(self) -> Path:
        """Where detached supervisors' own stdout and stderr go (never an agent's output)."""
        return self.logs / "supervisor.log"

    @property
    def merged_sweep(self) -> Path:
        """The merged-branch sweep's memory of which branch and target tips it already looked at."""
        return self.root / "merged-sweep.json"

    @property
    def project_config(self) -> Path:
        return self.repo / "corral.toml"

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
            "user_config": str(user_config_file()),
        }
