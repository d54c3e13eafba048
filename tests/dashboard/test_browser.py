"""The dashboard in real Chromium (Debian's, driven by Playwright): the board, live updates without a
reload, a person's actions from the page, and an agent's markup rendered as text.

With ``DASHBOARD_SCREENSHOTS=DIR`` the board and a task page are saved there as PNGs
(how docs/images/dashboard-*.png were made)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import expect
from tests.conftest import CLI, FakeAgent
from tests.dashboard.conftest import Dash, Watched

SLOW = [{"init": True}, {"text": "Reading the code."}, {"sleep": 3}, {"result": "First pass done."}]
WORK = [
    {"init": True},
    {"text": "Adding the helper."},
    {"write": {"path": "helper.py", "content": "def helper():\n    return 42\n"}},
    {"commit": "Add the helper"},
    {"result": "Added helper.py."},
]
HOSTILE = (
    "look <script>alert(1)</script> \x1b]0;pwned\x07 <img src=x onerror=alert(2)> "
    '<a href="javascript:alert(3)">click me</a>'
)


def shot(page: Any, name: str) -> None:
    where = os.environ.get("DASHBOARD_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / name), full_page=True, caret="initial")  # no injected style


def no_csp_errors(watched: Watched) -> None:
    assert not [m for m in watched.console if "Content Security Policy" in m], watched.console


def open_with_token(watched: Watched, dash: Dash, then: str = "/") -> None:
    watched.page.goto(dash.url)
    expect(watched.page).to_have_url(dash.base + "/")  # the token left the address bar
    if then != "/":
        watched.page.goto(dash.base + then)


def test_the_board_lists_tasks_of_two_repositories(dash: Dash, page: Watched, browser: Any) -> None:
    open_with_token(page, dash)
    board = page.page.locator("#board")
    expect(board.locator("[data-ref=alpha-one]")).to_be_visible()
    expect(board.locator("[data-ref=beta-one]")).to_be_visible()
    expect(board.locator("section[data-needs=backlog] [data-ref=alpha-one] .project")).to_have_text("alpha")
    expect(board.locator("section[data-needs=backlog] [data-ref=beta-one] .project")).to_have_text("beta")
    expect(page.page.locator("#activity")).to_contain_text("backlog 2")  # the day's counts per status
    cookies = {c["name"]: c for c in browser.cookies()}
    (session,) = cookies.values()
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    shot(page.page, "dashboard-board.png")
    no_csp_errors(page)
    # Another browser profile, without the cookie, is refused.
    browser.clear_cookies()
    refused = page.page.goto(dash.base + "/")
    assert refused is not None and refused.status == 401
    expect(page.page.locator("body")).not_to_contain_text("alpha-one")


def test_a_task_started_from_the_cli_moves_from_working_to_blocked_without_a_reload(
    dash: Dash, page: Watched, agent: FakeAgent
) -> None:
    agent.script(SLOW)
    open_with_token(page, dash)
    page.page.evaluate("window.__notReloaded = true")
    dash.a.ok("start", "alpha-one")
    card = page.page.locator("#board section[data-needs=working] [data-ref=alpha-one]")
    expect(card.locator(".status")).to_have_attribute("data-status", "working")
    blocked = page.page.locator("#board section[data-needs=review] [data-ref=alpha-one] .status")
    expect(blocked).to_have_attribute("data-status", "blocked", timeout=20_000)
    assert page.page.evaluate("window.__notReloaded") is True
    no_csp_errors(page)


def _rest(cli: CLI, ref: str) -> None:
    cli("wait", ref, "--timeout", "30")
    assert cli.json("show", ref)["task"]["status"] == "blocked"


def test_feedback_and_unblock_from_the_page_start_a_human_turn(dash: Dash, page: Watched, agent: FakeAgent) -> None:
    agent.script(WORK, [{"init": True}, {"text": "On it."}, {"result": "Covered the retry path."}])
    dash.a.ok("start", "alpha-one")
    _rest(dash.a, "alpha-one")
    open_with_token(page, dash, dash.task_path(dash.a, "alpha-one"))
    status = page.page.locator("#task-status")
    expect(status).to_have_attribute("data-status", "blocked")
    page.page.fill("#message", "Now cover the retry path too.")
    page.page.click("button[value=unblock]")
    expect(page.page.locator("#flash")).to_contain_text("working on your feedback")
    expect(page.page.locator("#message")).to_have_value("")  # sent: the box is emptied
    page.page.fill("#message", "a draft being typed")
    expect(page.page.locator("#timeline")).to_contain_text("Covered the retry path.", timeout=20_000)
    expect(status).to_have_attribute("data-status", "blocked")
    expect(page.page.locator("#message")).to_have_value("a draft being typed")  # the updates left it alone
    # The updates swapped the buttons in place: once, in the compose box, never into the flash line.
    assert page.page.locator("button[value=unblock]").count() == 1
    assert page.page.locator("#flash button").count() == 0
    doc = dash.a.json("show", "alpha-one")
    asked = [t for t in doc["turns"] if t["role"] == "human" and t["kind"] == "unblock"]
    assert [(t["actor"], t["content"]) for t in asked] == [("human", "Now cover the retry path too.")]
    change = next(c for c in doc["status_changes"] if c["reason"] == "unblock")
    assert change["actor"] == "human"
    no_csp_errors(page)


def test_accept_narrates_its_phases_and_ends_complete(dash: Dash, page: Watched, agent: FakeAgent) -> None:
    agent.script(WORK)
    dash.a.ok("start", "alpha-one")
    _rest(dash.a, "alpha-one")
    open_with_token(page, dash, dash.task_path(dash.a, "alpha-one"))
    expect(page.page.locator("#diff .d-add").first).to_contain_text("+def helper():")
    expect(page.page.locator("#output")).to_contain_text("Adding the helper.")
    shot(page.page, "dashboard-task.png")
    page.page.click("button[value=accept]")
    confirm = page.page.locator("#confirm-accept")  # asked first, as `corral accept` asks
    expect(confirm).to_contain_text("Merge alpha-one into main")
    page.page.click("#confirm-accept-yes")
    narration = page.page.locator("#narration")
    expect(narration.locator("li.n-result")).to_contain_text("complete", timeout=30_000)
    phases = narration.locator("li.n-phase").all_inner_texts()
    assert any(re.search(r"\bdone\b", p) for p in phases), phases
    assert narration.locator("li.n-plan").count() == 1
    expect(page.page.locator("#task-status")).to_have_attribute("data-status", "complete")
    assert dash.a.json("show", "alpha-one")["task"]["status"] == "complete"
    no_csp_errors(page)


def test_an_agents_markup_and_escape_sequences_render_as_text(dash: Dash, page: Watched, agent: FakeAgent) -> None:
    agent.script([{"init": True}, {"text": HOSTILE}, {"result": f"Done. {HOSTILE}"}])
    dash.a.ok("start", "alpha-one")
    _rest(dash.a, "alpha-one")
    open_with_token(page, dash, dash.task_path(dash.a, "alpha-one"))
    output = page.page.locator("#output")
    expect(output).to_contain_text("<script>alert(1)</script>")
    expect(output).to_contain_text("\\x1b]0;pwned\\x07")  # the OSC title sequence, shown, not obeyed
    expect(page.page.locator("#timeline")).to_contain_text('<a href="javascript:alert(3)">click me</a>')
    time.sleep(0.5)  # what would run, had it been markup, would have run by now
    assert page.dialogs == []
    assert page.page.title() == "corral — alpha-one"
    assert page.page.locator("script").count() == 2  # htmx and its SSE extension, nothing else
    assert page.page.locator("main img, main a[href^='javascript']").count() == 0
    no_csp_errors(page)


def _visibility(page: Any, state: str) -> None:
    page.evaluate(
        """(state) => {
            Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        state,
    )


def test_a_hidden_page_closes_its_stream_and_catches_up_when_shown(dash: Dash, page: Watched) -> None:
    open_with_token(page, dash)
    stream = page.page.locator("html")
    expect(stream).to_have_attribute("data-stream-state", "open")
    page.page.evaluate("() => document.body.setAttribute('data-idle-close', '100')")
    _visibility(page.page, "hidden")
    expect(stream).to_have_attribute("data-stream-state", "closed")  # its connection is given back
    dash.a.ok("close", "alpha-one", "-m", "Not needed")
    card = page.page.locator("#board section[data-needs=backlog] [data-ref=alpha-one]")
    time.sleep(1.0)
    expect(card).to_have_count(1)  # nothing arrives while hidden
    _visibility(page.page, "visible")
    expect(stream).to_have_attribute("data-stream-state", "open")
    expect(card).to_have_count(0)
    expect(page.page.locator("#board details")).to_contain_text("alpha-one")  # among the finished
