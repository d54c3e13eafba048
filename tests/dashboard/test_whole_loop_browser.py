"""The dashboard drives the whole loop in real Chromium (Debian's, driven by Playwright) on the `command` harness:
a task created from the board's form as `corral create` creates it, started from its page, its agent's hostile
output shown as text on the board and on its page, accepted after a confirmation, its phases narrated. Times
are the person's (the browser's zone), to the second; the legend's colours are the board's groups'."""

from __future__ import annotations

import re
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect
from tests.dashboard.conftest import ZONE, Dash, Watched
from tests.dashboard.test_browser import no_csp_errors, open_with_token

from corral.dashboard.views import NEED_COLOURS

#: What the agent writes: a bidi override, an OSC title, HTML, and template syntax (a value is never a template).
MARKUP = "<script>alert(1)</script> <img src=x onerror=alert(2)> {{ 7*7 }} {% if 1 %}J{% endif %}"
HOSTILE = "\u202eevil\u202c \x1b]0;pwned\x07 " + MARKUP
#: How the page shows it: every control made visible, every tag and brace as typed.
SHOWN = "\\u202eevil\\u202c \\x1b]0;pwned\\x07 " + MARKUP

#: The agent: says the hostile line, then more until a file named "go" beside it exists; then commits a file
#: holding it (its message too) and says it once more, as its last.
AGENT = textwrap.dedent(
    f"""\
    import os, subprocess, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    hostile = {HOSTILE!r}
    print("reading " + hostile, flush=True)
    n = 0
    while not os.path.exists(os.path.join(here, "go")):
        n += 1
        print(f"chunk {{n}} " + hostile, flush=True)
        time.sleep(0.2)
    open("notes.txt", "a").write("a line " + hostile + "\\n")
    subprocess.run(["git", "add", "notes.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "notes " + hostile], check=True)
    print("done " + hostile, flush=True)
    """
)


@pytest.fixture
def go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The `command` harness runs the agent above (set before the dashboard's daemon starts); its "go" file
    lets a turn end."""
    script = tmp_path / "cmd-agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT)
    monkeypatch.setenv("CORRAL_COMMAND", f"{sys.executable} {script}")
    return script.parent / "go"


def rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


#: The background of a group's legend swatch and of the first status chip of its column, read at one moment.
_LEGEND_AND_CHIP = """group => [
    document.querySelector(`#legend li[data-group=${group}]`),
    document.querySelector(`#board section[data-needs=${group}] .card .status`),
].map(el => el && getComputedStyle(el).backgroundColor)"""


def no_hostile_effects(watched: Watched, title: str) -> None:
    time.sleep(0.3)  # what would run, had it been markup, would have run by now
    assert watched.dialogs == []
    assert watched.page.title() == title
    assert watched.page.locator("script").count() == 2  # htmx and the page's stream, nothing else
    assert watched.page.locator("main img, main a[href^='javascript']").count() == 0
    assert "onerror=alert(2)> 49" not in watched.page.locator("main").inner_text()  # no template evaluated it
    no_csp_errors(watched)


def local(stamp: str) -> str:
    """A stored time as the person in :data:`ZONE` reads it, to the second."""
    at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return at.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%d %H:%M:%S")


def times_are_local(watched: Watched, where: str) -> None:
    stamps = watched.page.locator(f"{where} time[data-time]")
    assert stamps.count() > 0
    for i in range(stamps.count()):
        one = stamps.nth(i)
        expect(one).to_contain_text(local(one.get_attribute("datetime") or ""))
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", watched.page.locator(where).inner_text())  # no fractions


def test_create_start_and_accept_with_confirmation_from_the_pages(go: Path, dash: Dash, zoned_page: Watched) -> None:
    page = zoned_page.page
    open_with_token(zoned_page, dash)
    # Create, as `corral create` does: goal, prompt, harness, target, protected paths.
    page.click("#create-box summary")
    page.select_option("#create-project", label="alpha")
    page.fill("#create-goal", "Write the notes file")
    page.fill("#create-ref", "notes")
    page.fill("#create-prompt", "Append a line to notes.txt.")
    page.select_option("#create-harness", "command")
    page.fill("#create-target", "main")
    page.fill("#create-protect", "secrets/*\nlocked.txt")
    page.click("#create-submit")
    expect(page.locator("#create-flash")).to_contain_text("Created notes in backlog.")
    expect(page.locator("#create-goal")).to_have_value("")  # created: the form is emptied
    expect(page.locator("#board section[data-needs=backlog] [data-ref=notes]")).to_be_visible()
    made = dash.a.json("show", "notes")["task"]
    assert (made["goal"], made["prompt"], made["harness"], made["target"]) == (
        "Write the notes file",
        "Append a line to notes.txt.",
        "command",
        "main",
    )
    assert made["protected"] == ["secrets/*", "locked.txt"]

    # Its page: Next is the actions' buttons; Start runs the agent.
    page.click("#create-flash a")
    expect(page.locator("#task-status")).to_have_attribute("data-status", "backlog")
    expect(page.locator("#next button[value=start]")).to_be_visible()
    expect(page.locator("#head")).not_to_contain_text("corral start")  # no command to type
    page.click("#next button[value=start]")
    expect(page.locator("#flash")).to_contain_text("notes is working.")
    expect(page.locator("#task-status")).to_have_attribute("data-status", "working")
    expect(page.locator("#output")).to_contain_text("reading " + SHOWN)
    expect(page.locator("#next button[value=stop]")).to_be_visible()
    no_hostile_effects(zoned_page, "corral — notes")

    # The board, while it works: the agent's last line as text, the legend's colours the groups'.
    page.goto(dash.base + "/")
    card = page.locator("#board section[data-needs=working] [data-ref=notes]")
    expect(card.locator(".lastline")).to_contain_text(SHOWN, timeout=20_000)
    for group in ("working", "backlog"):
        swatch = page.locator(f"#legend li[data-group={group}]")
        expect(swatch).to_have_text({"working": "Working", "backlog": "Backlog"}[group])
        # Both read in one go from the page as it is: the board's stream may swap a card in between two reads,
        # and a card taken out of the page has no computed style.
        shown = page.evaluate(_LEGEND_AND_CHIP, group)
        assert shown == [rgb(NEED_COLOURS[group])] * 2, (group, shown)
        bar = page.locator(f"#activity rect[data-status={group}]").first
        assert bar.get_attribute("fill") == NEED_COLOURS[group]  # the chart's rows, coloured as the board
    expect(page.locator("#activity figcaption")).to_contain_text("working 1")  # tasks, not moves
    no_hostile_effects(zoned_page, "corral — board")

    # Its turn ends; its page shows the agent's work, every piece of it as text, the times the person's.
    go.write_text("")
    dash.a("wait", "notes", "--timeout", "30")
    page.goto(dash.base + dash.task_path(dash.a, "notes"))
    expect(page.locator("#task-status")).to_have_attribute("data-status", "blocked")
    expect(page.locator("#diff .d-add").first).to_contain_text("+a line " + SHOWN)
    expect(page.locator("#diff .commits")).to_contain_text("notes " + SHOWN)
    expect(page.locator("#output")).to_contain_text("done " + SHOWN)
    times_are_local(zoned_page, "#head")
    times_are_local(zoned_page, "#timeline")
    no_hostile_effects(zoned_page, "corral — notes")

    # Accept asks first; cancelled, nothing happens.
    tip = page.locator("#review-tip").get_attribute("value") or ""
    page.click("#next button[value=accept]")
    question = page.locator("#confirm-accept")
    expect(question).to_contain_text(f"Merge notes into main at {tip[:12]}")
    page.click("#confirm-accept-no")
    expect(question).to_have_count(0)
    time.sleep(0.5)
    assert dash.a.json("show", "notes")["task"]["status"] == "blocked"
    assert page.locator("#narration li").count() == 0
    # Confirmed, it merges the tip shown and narrates its phases.
    page.click("#next button[value=accept]")
    page.click("#confirm-accept-yes")
    narration = page.locator("#narration")
    expect(narration.locator("li.n-result")).to_contain_text("notes is complete", timeout=30_000)
    assert narration.locator("li.n-plan").count() == 1
    phases = narration.locator("li.n-phase").all_inner_texts()
    assert any(re.search(r"\bdone\b", p) for p in phases), phases
    expect(page.locator("#task-status")).to_have_attribute("data-status", "complete")
    assert dash.a.json("show", "notes")["task"]["status"] == "complete"
    no_hostile_effects(zoned_page, "corral — notes")


def test_a_create_the_engine_refuses_says_why_and_keeps_the_form(dash: Dash, page: Watched) -> None:
    open_with_token(page, dash)
    page.page.click("#create-box summary")
    page.page.select_option("#create-project", label="alpha")
    page.page.fill("#create-goal", "Twice the same ref")
    page.page.fill("#create-ref", "alpha-one")  # taken
    page.page.click("#create-submit")
    flash = page.page.locator("#create-flash .flash.error")
    expect(flash).to_contain_text("alpha-one")
    expect(page.page.locator("#create-goal")).to_have_value("Twice the same ref")  # kept, to be fixed
    assert [t["ref"] for t in dash.a.json("list", "--all")["tasks"]] == ["alpha-one"]
