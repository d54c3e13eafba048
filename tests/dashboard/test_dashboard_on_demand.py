"""The daemon serves its web dashboard once the home asks for it (``corral dashboard``), and from then on at
every start: a daemon a launch starts for its agent's tools alone, in a home whose person never opened the
dashboard, starts no web server, loads no templates and reads no board for it."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from tests.conftest import CLI
from tests.dashboard.conftest import make_repo

from corral.engine import daemons


def _served(url: str) -> int:
    """The status of the dashboard's root, asked with the URL's token (its exchange answers 303)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 0, timeout=10)
    conn.request("GET", f"{parts.path}?{parts.query}")
    status = conn.getresponse().status
    conn.close()
    return status


def _log_events(home: Path) -> list[str]:
    log = home / "daemon" / "daemon.log"
    return [line.split()[3] for line in log.read_text().splitlines() if len(line.split()) > 3]


def test_a_daemon_serves_no_dashboard_until_asked_then_starts_it_without_restarting(tmp_path: Path) -> None:
    cli = CLI(make_repo(tmp_path / "alpha"))
    home = Path(cli.json("paths")["paths"]["home"])
    try:
        started = cli.json("daemon", "start")["daemon"]
        assert started["running"] and started["mcp_url"]
        status = cli.json("daemon", "status")["daemon"]
        assert status["dashboard_url"] is None  # never asked in this home: no web server
        assert "dashboard-serving" not in _log_events(home)
        assert not (home / "daemon" / "dashboard-wanted").exists()

        asked = cli.json("dashboard")
        assert asked["daemon"]["pid"] == started["pid"]  # the same daemon started it, at once
        assert asked["dashboard_url"] and asked["url"].startswith(asked["dashboard_url"])
        assert _served(asked["url"]) == 303  # a real server: the token exchanged for a cookie
        assert cli.json("daemon", "status")["daemon"]["dashboard_url"] == asked["dashboard_url"]
        assert cli.json("dashboard")["dashboard_url"] == asked["dashboard_url"]  # asked again: the same one
        assert _log_events(home).count("dashboard-serving") == 1
    finally:
        cli("daemon", "stop")


def test_once_asked_every_later_daemon_serves_it_from_its_start(tmp_path: Path) -> None:
    cli = CLI(make_repo(tmp_path / "alpha"))
    home = Path(cli.json("paths")["paths"]["home"])
    try:
        first = cli.json("dashboard")  # no daemon ran: the one it starts serves it
        assert _served(first["url"]) == 303
        assert (home / "daemon" / "dashboard-wanted").exists()
        cli.ok("daemon", "stop")

        again = cli.json("daemon", "start")["daemon"]  # asked before: its state names the dashboard at once
        assert again["pid"] != first["daemon"]["pid"]
        assert again["dashboard_url"] is not None
        state = json.loads((home / "daemon" / "daemon.json").read_text())
        assert state["dashboard_url"] == again["dashboard_url"]
    finally:
        cli("daemon", "stop")


def _logged(home: Path, event: str, count: int = 1) -> None:
    deadline = time.monotonic() + 15
    while _log_events(home).count(event) < count:
        assert time.monotonic() < deadline, f"no {event} in the daemon's log: {_log_events(home)}"
        time.sleep(0.05)


def test_a_dashboard_that_failed_to_start_is_tried_again_when_asked_again(tmp_path: Path) -> None:
    """The dashboard's start fails where its secret cannot be read (a directory in its place): the daemon runs
    on without it and says so; the next ask starts it, once the cause is gone."""
    cli = CLI(make_repo(tmp_path / "alpha"))
    home = Path(cli.json("paths")["paths"]["home"])
    try:
        cli.ok("daemon", "start")
        secret = home / "daemon" / "dashboard.secret"
        secret.mkdir()  # not a file: the dashboard cannot start
        daemons.want_dashboard(home)
        _logged(home, "dashboard-unavailable")
        assert cli.json("daemon", "status")["daemon"]["dashboard_url"] is None
        secret.rmdir()
        asked = cli.json("dashboard")  # rings again: started now
        assert _served(asked["url"]) == 303
        assert _log_events(home).count("dashboard-unavailable") == 1
    finally:
        cli("daemon", "stop")
