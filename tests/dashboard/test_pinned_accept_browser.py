"""The dashboard's Accept in real Chromium merges the tip its page's diff showed: a branch moved under the
page is refused, naming the commit, the diff is read again, and the next Accept merges what it shows."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from playwright.sync_api import expect
from tests.conftest import FakeAgent, git
from tests.dashboard.conftest import Dash, Watched
from tests.dashboard.test_browser import WORK, _rest, no_csp_errors, open_with_token


def test_accept_from_the_page_merges_the_tip_it_showed(dash: Dash, page: Watched, agent: FakeAgent) -> None:
    agent.script(WORK)
    dash.a.ok("start", "alpha-one")
    _rest(dash.a, "alpha-one")
    open_with_token(page, dash, dash.task_path(dash.a, "alpha-one"))
    expect(page.page.locator("#diff .d-add").first).to_contain_text("+def helper():")
    worktree = Path(dash.a.json("show", "alpha-one")["task"]["worktree"])
    shown = git(worktree, "rev-parse", "HEAD")
    expect(page.page.locator("#review-tip")).to_have_attribute("value", shown)
    # The branch moves under the page, by hand: the task's row does not change, the page's diff is the old one.
    (worktree / "extra.py").write_text("EXTRA = 1\n")
    git(worktree, "add", "extra.py")
    git(worktree, "commit", "-qm", "slipped in after the page was read")
    moved = git(worktree, "rev-parse", "HEAD")
    repo = dash.a.cwd
    main = git(repo, "rev-parse", "main")
    sent: list[dict[str, list[str]]] = []
    page.page.on("request", lambda r: sent.append(parse_qs(r.post_data or "")) if r.method == "POST" else None)
    page.page.click("button[value=accept]")
    page.page.click("#confirm-accept-yes")  # the question names the tip shown; confirmed, that tip is sent
    refused = page.page.locator("#narration li.n-error")
    expect(refused).to_contain_text("slipped in after the page was read", timeout=30_000)
    expect(refused).to_contain_text("Accept again")
    assert sent[0]["tip"] == [shown]  # the page's Accept carries the tip its diff showed
    assert git(repo, "rev-parse", "main") == main
    assert dash.a.json("show", "alpha-one")["task"]["status"] == "blocked"
    expect(page.page.locator("#review-tip")).to_have_attribute("value", moved, timeout=10_000)  # read again
    expect(page.page.locator("#diff")).to_contain_text("+EXTRA = 1")
    page.page.click("button[value=accept]")
    page.page.click("#confirm-accept-yes")
    expect(page.page.locator("#narration li.n-result")).to_contain_text("complete", timeout=30_000)
    assert sent[-1]["tip"] == [moved]
    assert git(repo, "show", "main:extra.py") == "EXTRA = 1"
    no_csp_errors(page)
