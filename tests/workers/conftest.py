"""A team of hosts for the worker tests (tests/workers/team.py) on one PostgreSQL database and one remote."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import postgres as pg_support
from tests.support.polling import until
from tests.workers.team import Host, git, work

pg_server = pg_support.pg_server
pg_database = pg_support.pg_database

#: Short enough for a test to outlive a lease, long enough that a loaded machine's late beat never loses one.
LEASE = 4.0

#: The waits of every host's turns, set through the person's own settings as a person would: the output's
#: drain and the reap of leftover processes at milliseconds, so a turn ends when its agent does. The
#: supervisor's heartbeat keeps its period (a loaded machine's late beat must never read as a frozen turn).
TURN_DELAYS: dict[str, float] = {"drain_quiet": 0.05, "drain_longest": 2.0, "reap_grace": 0.2}

#: How often a worker settles its projects (a lost worker's turns taken over): a quarter of its default,
#: so a test outlives a lease and sees the takeover without the store being asked more than a few times a second.
SETTLE = 0.5


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
        host = Host(
            self.root / "hosts", name, self.remote, url or self.url, {"lease_seconds": LEASE, **TURN_DELAYS, **settings}
        )
        self.hosts.append(host)
        return host

    @contextmanager
    def sql(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to the team's database with the project's own schema on its search path: what the
        shared store holds, read as it is (no corral command, no reconcile pass)."""
        with psycopg.connect(self.url) as conn:
            [schema] = [
                r[0]
                for r in conn.execute(
                    "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'corral_%'"
                )
                if r[0] != "corral_dispatch"
            ]
            conn.execute(f'SET search_path = "{schema}"')
            yield conn

    def restarted_mid_turn(self, *during: dict[str, Any]) -> tuple[Host, Host]:
        """The laptop and a worker whose process alone was killed while it ran the task ``adopt`` (its
        supervisor and agent ran on: ``during`` are the agent's steps before it commits), then started
        again, which re-adopted the turn and followed it to its end."""
        laptop, host = self.laptop(), self.worker("restarted")
        host.script(work("adopted.txt", then=list(during)))
        laptop.corral("create", "Adopted", "--ref", "adopt")
        host.start_worker()
        host.wait_event("started")
        laptop.json("start", "adopt")
        host.wait_event("claim")
        until(host.supervisors, poll=0.2, what="its supervisor runs")
        assert host.proc is not None
        host.proc.kill()  # the worker alone: its supervisor and agent run on
        host.proc.wait(10)
        host.start_worker()
        adopted = host.wait_event("adopt", timeout=LEASE)
        host.wait_event("turn-done", timeout=60, task=adopted["task"])
        return laptop, host

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
        waits = {"wip_push_interval": 1.0, "worker_settle_interval": SETTLE}
        return self.host(name, url=url, worker_projects=[str(clone)], **{**waits, **settings})


@pytest.fixture
def team(tmp_path: Path, pg_database: str) -> Iterator[Team]:
    built = Team(tmp_path, pg_database)
    try:
        yield built
    finally:
        for host in built.hosts:
            host.stop_worker(timeout=20)
            host.stop_daemon()
