"""One repository's corral: its paths, store, settings, git and clock, opened together.

Every engine operation takes a ``Project``; surfaces build one per invocation.
Dependencies are injected so tests replace only what they must.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from corral.adapters.git import Git
from corral.domain.actors import Actor
from corral.domain.clock import Clock, utcnow
from corral.engine.config import Config, load_config
from corral.engine.paths import ProjectPaths, user_config_file
from corral.errors import UsageError
from corral.store import SQLiteStore, Store


def default_actor() -> Actor:
    """The CLI's channel is ``human``; ``CORRAL_ACTOR`` lets a wrapper say otherwise."""
    raw = os.environ.get("CORRAL_ACTOR", "").strip().lower()
    if not raw:
        return Actor.HUMAN
    try:
        return Actor(raw)
    except ValueError:
        raise UsageError(
            f"CORRAL_ACTOR is '{raw}', which is not an actor.",
            hint="Use one of: " + ", ".join(a.value for a in Actor) + ", or unset it.",
        ) from None


@dataclass
class Project:
    paths: ProjectPaths
    config: Config
    git: Git
    clock: Clock = utcnow
    _store: Store | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        repo: str | Path | None = None,
        *,
        git: Git | None = None,
        clock: Clock = utcnow,
    ) -> Project:
        given = git
        git = git or Git()
        root = git.main_root(Path(repo) if repo else Path.cwd())
        paths = ProjectPaths.for_repo(root)
        config = load_config(user_file=user_config_file(), project_file=paths.project_config)
        if given is None:  # an injected Git keeps its own limits (tests)
            git.timeout = float(config["git_timeout"])
            git.hook_timeout = float(config["git_hook_timeout"])
        return cls(paths=paths, config=config, git=git, clock=clock)

    @property
    def repo(self) -> Path:
        return self.paths.repo

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = SQLiteStore(self.paths.db, clock=self.clock)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
