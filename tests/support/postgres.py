"""A real PostgreSQL server for tests: started once per test session (per xdist worker), loopback only.

``CORRAL_TEST_PG_URL`` names a server to use instead (CI may start one); otherwise ``initdb``
makes a cluster in a temporary directory and ``pg_ctl`` starts it on 127.0.0.1 at a free port,
its unix socket in the same directory. PostgreSQL refuses to run as root, so as root the
cluster belongs to the ``postgres`` user and its binaries run through ``runuser``.

Fixtures (import them into a test module): ``pg_server`` (the session's server URL),
``pg_schema`` (a fresh schema name, dropped after the test) and ``pg_database`` (the URL of a
fresh database, dropped after the test).
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ENV_URL = "CORRAL_TEST_PG_URL"
#: Read as the tests are collected: each test's hermetic environment drops every CORRAL_ variable.
GIVEN_URL = os.environ.get(ENV_URL) or None


def pg_bin(name: str) -> str:
    """The PostgreSQL binary ``name``: on PATH, in /usr/local/bin, or in a Debian cluster's bin/."""
    for candidate in (
        shutil.which(name),
        f"/usr/local/bin/{name}",
        *sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(f"the PostgreSQL binary {name} is not installed (Debian: apt-get install postgresql)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A PostgreSQL cluster in ``root``, running until :meth:`stop`."""

    def __init__(
        self,
        *,
        fsync: bool = True,
        listen: str = "127.0.0.1",
        trust_network: str | None = None,
        max_connections: int | None = None,
    ) -> None:
        """``listen``: the addresses it listens on (loopback unless a test links another network to it);
        ``trust_network``: a CIDR whose clients it trusts besides loopback (a test's network namespaces);
        ``max_connections``: the server's limit, for a run with many workers (bench/bench_workers.py)."""
        self.root = Path(tempfile.mkdtemp(prefix="corral-pg-"))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.user = "corral"
        self._as: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        try:
            self._run(
                pg_bin("initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                self.user,
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
            if trust_network is not None:
                hba = self.data / "pg_hba.conf"
                hba.write_text(hba.read_text() + f"host all all {trust_network} trust\n")
            options = f"-h {listen} -p {self.port} -k {self.root} -c fsync={'on' if fsync else 'off'}"
            if max_connections is not None:
                options += f" -c max_connections={max_connections}"
            ctl = (pg_bin("pg_ctl"), "-D", str(self.data))
            self._run(*ctl, "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
            self._watcher, self._alive = self._watch()
        except BaseException:
            if (self.data / "postmaster.pid").exists():  # started, but not in time: stop it
                stop = [*self._as, pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]
                subprocess.run(stop, capture_output=True, check=False)
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def postmaster(self) -> int:
        """The server's own pid (its CPU is counted by a benchmark)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def _run(self, *argv: str) -> None:
        done = subprocess.run([*self._as, *argv], capture_output=True, text=True, cwd=self.root, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr or done.stdout}\n{log}")

    def _watch(self) -> tuple[subprocess.Popen[bytes], int]:
        """A watcher that stops the server once this process is gone, however it went.

        A test run killed by a signal runs no finalizer, and ``pg_ctl`` leaves the server running on its
        own: each such run left a server behind. The watcher reads a pipe only this process holds the
        write end of (not inherited: Python's pipes are close-on-exec), so it reads end-of-file when this
        process exits, killed or not. It runs in a session of its own, so the Ctrl-C that interrupts a run
        does not take it first.
        """
        read, write = os.pipe()
        stop = shlex.join([*self._as, pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        script = f'cat >/dev/null; if [ -f "$1/data/postmaster.pid" ]; then {stop} >/dev/null 2>&1; fi; rm -rf "$1"'
        try:
            watcher = subprocess.Popen(
                ["sh", "-c", script, "pg-watcher", str(self.root)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)
        return watcher, write

    def stop(self) -> None:
        try:
            self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            os.close(self._alive)  # the watcher finds the server gone and ends
            self._watcher.wait()


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    if GIVEN_URL:
        yield GIVEN_URL
        return
    # fsync off: what it guards against is the machine itself crashing, which no test does; a
    # killed server still recovers all it committed. With it on, every commit of a test's schema
    # creation, migration and drop waited on the disk: 0.3-0.7 s of each PostgreSQL test's setup
    # on a busy disk, 0.1-0.2 s without.
    server = Server(fsync=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def pg_schema(pg_server: str) -> Iterator[str]:
    name = f"corral_test_{uuid.uuid4().hex[:16]}"
    yield name
    admin(pg_server, f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_database(pg_server: str) -> Iterator[str]:
    name = f"corral_test_{uuid.uuid4().hex[:16]}"
    admin(pg_server, f'CREATE DATABASE "{name}"')
    yield with_database(pg_server, name)
    admin(pg_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
