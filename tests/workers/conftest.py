"""A team of hosts for the worker tests (tests/workers/team.py) on one PostgreSQL database and one remote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import postgres as pg_support
from tests.workers.team import Host, git

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database

#: Short enough for a test to outlive a lease, long enough that a loaded machine's late beat never loses one.
LEASE = 4.0


class Team:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        seed = root / "seed"
        seed.mkdir()
        git(seed, "init", "-q", "-b", "main")
        (seed / "README.md").write_text("# team\n")
        git(seed, "add", "README.md")
        git(seed, "commit", "-q", "-m", "initial")
        self.remote = root / "remote.git"
        git(root, "clone", "-q", "--bare", str(seed), str(self.remote))
        self.hosts: list[Host] = []

    def host(self, name: str, *, url: str | None = None, **settings: Any) -> Host:
        """A host; ``url``: how it reaches the database (another address than the team's, for a host on
        a network of its own)."""
        host = Host(self.root / "hosts", name, self.remote, url or self.url, {"lease_seconds": LEASE, **settings})
        self.hosts.append(host)
        return host

    def refuse_pushes(self) -> Path:
        """The remote refuses every push while the returned file exists (a pre-receive hook)."""
        flag = self.remote / "refuse-pushes"
        hook = self.remote / "hooks" / "pre-receive"
        hook.write_text(f'#!/bin/sh\nif [ -e "{flag}" ]; then echo "pushes are refused" >&2; exit 1; fi\n')
        hook.chmod(0o755)
        flag.touch()
        return flag

    def laptop(self) -> Host:
        """A reviewer's host: it runs no worker, and sends its turns to the workers."""
        return self.host("laptop", dispatch="workers")

    def worker(self, name: str, *, url: str | None = None, **settings: Any) -> Host:
        clone = self.root / "hosts" / name / "clone"  # where Host clones it
        return self.host(name, url=url, worker_projects=[str(clone)], wip_push_interval=1.0, **settings)


@pytest.fixture
def team(tmp_path: Path, pg_database: str) -> Iterator[Team]:
    built = Team(tmp_path, pg_database)
    try:
        yield built
    finally:
        for host in built.hosts:
            host.stop_worker(timeout=20)
            host.stop_daemon()
