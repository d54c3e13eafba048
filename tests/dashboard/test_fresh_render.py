"""A page asked for right after a change is rendered from that change: the board and a task page read the
stores' change marks anew for a page (the event streams may share one read of them), so a render made before
the change is never served after it. The streams' shared read is made to last a minute here, so a page that
leaned on it would be stale every time rather than within a tenth of a second of a change."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import CLI
from tests.dashboard.conftest import Dash

from corral.dashboard import hub, security, web
from corral.engine.api import corral_home


@pytest.fixture
def served(two: tuple[CLI, CLI], monkeypatch: pytest.MonkeyPatch) -> Iterator[Dash]:
    """The dashboard served in this process (a real server on loopback), its shared stamp held a minute."""
    a, b = two
    a.ok("create", "Alpha task", "--ref", "alpha-one")
    b.ok("create", "Beta task", "--ref", "beta-one")
    monkeypatch.setattr(hub, "POLL_SECONDS", 120.0)
    home = Path(corral_home())
    running = web.start(home)
    try:
        yield Dash(security.signed_url(running.url, home), a, b)
    finally:
        running.stop()


def get(dash: Dash, path: str, cookie: str) -> str:
    conn = http.client.HTTPConnection(dash.host, dash.port, timeout=30)
    conn.request("GET", dash.root + path, headers={"Host": f"{dash.host}:{dash.port}", "Cookie": cookie})
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    assert response.status == 200, body
    return body


def column(board: str, needs: str) -> str:
    found = re.search(rf'<section class="col[^"]*" data-needs="{needs}">(.*?)</section>', board, re.S)
    assert found is not None, board
    return found.group(1)


def test_the_board_asked_for_after_a_change_shows_it(served: Dash) -> None:
    cookie = served.cookie()
    assert 'data-ref="alpha-one"' in column(get(served, "/", cookie), "backlog")
    served.a.ok("close", "alpha-one", "-m", "Not needed")
    after = get(served, "/", cookie)
    assert 'data-ref="alpha-one"' not in column(after, "backlog")
    assert 'data-ref="beta-one"' in column(after, "backlog")


def test_a_task_page_asked_for_after_a_change_shows_it(served: Dash) -> None:
    cookie = served.cookie()
    path = served.task_path(served.a, "alpha-one")
    assert 'data-status="backlog"' in get(served, path, cookie)
    served.a.ok("close", "alpha-one", "-m", "Not needed")
    after = get(served, path, cookie)
    assert 'id="task-status" data-status="abandoned"' in after
    assert "backlog → abandoned by human: Not needed" in after
