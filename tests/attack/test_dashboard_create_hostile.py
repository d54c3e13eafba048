"""The dashboard's create form and Accept's confirmation, posted as a hostile page or a careless paste would post
them: every field hostile, through the real server and its guard (tests/dashboard's fixtures)."""

from __future__ import annotations

import http.client
import os
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from corral.dashboard import security
from tests.conftest import FakeAgent, git
from tests.dashboard.conftest import Dash
from tests.dashboard.test_browser import WORK, _rest

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def post(dash: Dash, path: str, body: bytes, cookie: str, **extra: str) -> tuple[int, str]:
    """A POST from the dashboard's own page (cookie, Origin, CSRF), its status and body."""
    keys = security.Keys(Path(os.environ["CORRAL_HOME"]), dash.token)
    conn = http.client.HTTPConnection(dash.host, dash.port, timeout=30)
    headers = {
        "Host": f"{dash.host}:{dash.port}",
        "Cookie": cookie,
        "Origin": f"http://127.0.0.1:{dash.port}",
        "X-Corral-CSRF": keys.csrf,
        **FORM,
        **extra,
    }
    conn.request("POST", dash.root + path, body=body, headers=headers)
    response = conn.getresponse()
    text = response.read().decode("utf-8", "replace")
    conn.close()
    return response.status, text


def get(dash: Dash, path: str, cookie: str) -> str:
    conn = http.client.HTTPConnection(dash.host, dash.port, timeout=30)
    conn.request("GET", dash.root + path, headers={"Host": f"{dash.host}:{dash.port}", "Cookie": cookie})
    response = conn.getresponse()
    text = response.read().decode("utf-8", "replace")
    conn.close()
    assert response.status == 200, text[:500]
    return text


def narration(dash: Dash, task: str, cookie: str, seconds: float = 30) -> str:
    """The task's event stream until an accept's narration ends (its result or its error)."""
    conn = http.client.HTTPConnection(dash.host, dash.port, timeout=seconds)
    conn.request("GET", dash.root + "/events" + task, headers={"Host": f"{dash.host}:{dash.port}", "Cookie": cookie})
    response = conn.getresponse()
    seen, event = [], ""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        raw = response.fp.readline().decode("utf-8", "replace")
        if raw.startswith("event:"):
            event = raw[6:].strip()
        elif raw.startswith("data:") and event == "narration":
            seen.append(raw[5:])
            if "n-error" in raw or "n-result" in raw:
                break
    conn.close()
    return "".join(seen)


def test_hostile_fields_are_stored_and_shown_as_text(dash: Dash) -> None:
    cookie = dash.cookie()
    state = Path(dash.a.json("paths")["paths"]["state"]).name
    goal = "Fix {{ 7*7 }} {% raw %}<script>alert(1)</script>\x00\x1b]0;owned\x07\u202eevil\u202c"
    fields = {
        "project": state,
        "goal": goal,
        "prompt": "{{ config }}\x1b[2J<img src=x onerror=alert(1)>",
        "protect": "db/**\n\x1b[31m*\u202e\n../../etc/passwd\n[",
        "ref": "hostile",
    }
    status, said = post(dash, "/create", urlencode(fields).encode(), cookie)
    assert status == 200 and 'class="flash error"' not in said, said
    task = dash.a.json("show", "hostile")["task"]
    stored = task["goal"] + task.get("prompt", "") + " ".join(task.get("protected") or [])
    for raw in ("\x00", "\x1b", "\x07"):  # controls are escaped at intake, as corral create does
        assert raw not in stored, (raw, stored)
    pages = get(dash, "/", cookie) + get(dash, dash.task_path(dash.a, "hostile"), cookie)
    assert "<script>alert" not in pages and "<img src=x" not in pages
    assert "49" not in pages.split("Fix", 1)[-1][:40]  # the goal's {{ 7*7 }} is text, never evaluated
    assert "{{ 7*7 }}" in pages
    for raw in ("\x00", "\x1b", "\x07", "\u202e", "\u202c"):  # bidi controls too, where a page shows them
        assert raw not in pages, raw


def test_a_ref_or_target_git_would_read_as_an_option_is_refused_in_words(dash: Dash) -> None:
    cookie = dash.cookie()
    state = Path(dash.a.json("paths")["paths"]["state"]).name
    for extra in (
        {"ref": "--upload-pack=touch /tmp/owned"},
        {"target": "--upload-pack=touch /tmp/owned"},
        {"target": "main:refs/heads/x"},
        {"target": "../../HEAD"},
        {"harness": "sh -c 'touch /tmp/owned'"},
    ):
        body = urlencode({"project": state, "goal": "Odd", **extra}).encode()
        status, said = post(dash, "/create", body, cookie)
        assert status == 200 and 'class="flash error"' in said, (extra, said[:400])
        assert "Traceback" not in said
    assert [t["ref"] for t in dash.a.json("list", "--all")["tasks"]] == ["alpha-one"]


def test_an_oversized_or_undecodable_form_creates_nothing_and_says_why(dash: Dash) -> None:
    cookie = dash.cookie()
    state = Path(dash.a.json("paths")["paths"]["state"]).name
    huge = urlencode({"project": state, "goal": "x" * (security.MAX_BODY + 10)}).encode()
    status, _said = post(dash, "/create", huge, cookie)
    assert status == 413
    long_goal = urlencode({"project": state, "goal": "y" * 200_000}).encode()
    status, said = post(dash, "/create", long_goal, cookie)
    assert status == 200 and 'class="flash error"' in said and "Traceback" not in said, said[:400]
    broken = f"project={quote(state)}&goal=%FF%FE%00ok&ref=bytes".encode()
    status, said = post(dash, "/create", broken, cookie)
    assert status == 200, said[:400]
    if 'class="flash error"' not in said:
        assert "\x00" not in dash.a.json("show", "bytes")["task"]["goal"]
    assert "hostile" not in [t["ref"] for t in dash.a.json("list", "--all")["tasks"]]


def test_a_confirmation_without_the_pages_tip_merges_nothing_the_page_did_not_show(
    dash: Dash, agent: FakeAgent
) -> None:
    """A Merge posted without a tip (a page whose diff had not come, or a hand-made post) merges no commit the
    dashboard did not show: the tip its task page last showed stands for what was reviewed."""
    agent.script(WORK)
    dash.a.ok("start", "alpha-one")
    _rest(dash.a, "alpha-one")
    cookie = dash.cookie()
    page = get(dash, dash.task_path(dash.a, "alpha-one"), cookie)  # the diff shown: its tip recorded
    worktree = Path(dash.a.json("show", "alpha-one")["task"]["worktree"])
    assert git(worktree, "rev-parse", "HEAD") in page
    (worktree / "extra.py").write_text("EXTRA = 1\n")
    git(worktree, "add", "extra.py")
    git(worktree, "commit", "-qm", "slipped in after the page was read")
    repo = dash.a.cwd
    main = git(repo, "rev-parse", "main")
    path = dash.task_path(dash.a, "alpha-one")
    status, said = post(dash, path + "/accept", b"confirm=yes&tip=", cookie)
    assert status == 200, said[:300]
    told = narration(dash, path, cookie)
    assert "slipped in after the page was read" in told and "n-result" not in told, told[-800:]
    assert git(repo, "rev-parse", "main") == main
    assert dash.a.json("show", "alpha-one")["task"]["status"] == "blocked"
