"""A worker on a network of its own (a network namespace with a veth link to the host that runs
PostgreSQL), cut off from the database past its lease and then linked again (docs/workers.md)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.domain.clock import parse_time
from corral.domain.team import BEATS_PER_LEASE
from tests.support.polling import until
from tests.support.postgres import Server, admin, with_database
from tests.workers.conftest import LEASE, Team
from tests.workers.team import alive, git, work

pytestmark = pytest.mark.slow


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Link:
    """A network namespace and the veth pair that links it to this host: ``down`` cuts it, ``up`` heals it."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ns, self.outside, self.inside = f"corral-{tag}", f"cvh{tag}", f"cvn{tag}"
        net = int(tag[:2], 16) % 200 + 20
        self.host_ip, self.ns_ip, self.cidr = f"10.231.{net}.1", f"10.231.{net}.2", f"10.231.{net}.0/24"
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _ip("link", "set", self.inside, "netns", self.ns)
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.outside)
        _ip("link", "set", self.outside, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/24", "dev", self.inside)
        _ip("-n", self.ns, "link", "set", self.inside, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")

    def down(self) -> None:
        _ip("link", "set", self.outside, "down")

    def up(self) -> None:
        _ip("link", "set", self.outside, "up")

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.outside], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)


@pytest.fixture
def link() -> Iterator[Link]:
    made = Link()
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def linked_team(tmp_path: Path, link: Link) -> Iterator[tuple[Team, str]]:
    """A team whose database listens on loopback and on the link; the URL for the namespaced host."""
    server = Server(fsync=False, listen=f"127.0.0.1,{link.host_ip}", trust_network=link.cidr)
    try:
        name = f"corral_part_{uuid.uuid4().hex[:8]}"
        admin(server.url, f'CREATE DATABASE "{name}"')
        team = Team(tmp_path, with_database(server.url, name))
        try:
            yield team, team.url.replace("127.0.0.1", link.host_ip)
        finally:
            for host in team.hosts:
                host.stop_worker(timeout=20)
    finally:
        server.stop()


def test_a_worker_cut_off_from_the_database_past_its_lease_loses_its_turn_and_writes_nothing_when_linked_again(
    linked_team: tuple[Team, str], link: Link
) -> None:
    team, far_url = linked_team
    laptop = team.laptop()
    far = team.worker("far", url=far_url)
    near = team.worker("near")
    far.script([{"init": True}, {"write": {"path": "far.txt", "content": "x\n"}}, {"keepalive": 120}])
    near.script(work("near.txt"))
    laptop.corral("create", "Cut off", "--ref", "cut")
    far.start_worker(prefix=("ip", "netns", "exec", link.ns))
    far.wait_event("started")
    laptop.json("start", "cut")
    far.wait_event("claim")
    agents = until(lambda: [c["pid"] for c in far.calls()], poll=0.2, what="its agent runs")
    link.down()  # the far host's connections hang; its heartbeats stop reaching the store
    cut_at = time.monotonic()
    near.start_worker()
    until(
        lambda: laptop.json("show", "cut")["task"]["status"] == "blocked",
        timeout=90,
        poll=0.2,
        what="the near worker finished the turn",
    )
    assert time.monotonic() - cut_at > LEASE * (1 - 1 / BEATS_PER_LEASE)  # its last beat came before the cut
    before = laptop.json("show", "cut")
    # Never taken over before its lease ran out: interrupted over a lease after its last heartbeat.
    far_beat = next(w for w in laptop.json("workers")["workers"] if w["host"] == "far")["heartbeat_at"]
    interrupted = next(c for c in before["status_changes"] if c["to"] == "interrupted")["at"]
    assert (parse_time(interrupted) - parse_time(far_beat)).total_seconds() > LEASE
    assert before["lease"]["host"] == "near"
    lost = [t for t in before["turns"] if t["role"] == "agent" and t["kind"] == "error"]
    assert lost and "worker lost" in lost[0]["content"] and "far" in lost[0]["content"]
    link.up()
    far.wait_event("lease-lost", timeout=90)
    until(lambda: not any(alive(pid) for pid in agents), timeout=30, poll=0.2, what="its agent is stopped")
    time.sleep(LEASE)  # its loops run on: anything it would still write would be there now
    after = laptop.json("show", "cut")
    assert after["turns"] == before["turns"] and after["task"]["status"] == "blocked"
    assert "far.txt" not in git(team.remote, "ls-tree", "-r", "--name-only", "corral/cut").splitlines()
