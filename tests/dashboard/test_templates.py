"""Every piece of the dashboard rendered from its templates with an agent's hostile text in every field it could
have written: nothing of it is markup, no control character, escape sequence or bidi control reaches the page
raw, and template syntax in a value stays text (a value is data, never a template)."""

from __future__ import annotations

import html
import re
from typing import Any

from corral.dashboard import board_page, task_page, views
from corral.dashboard.html import Markup, render

HOSTILE = "\u202eevil\u202c \x1b]0;pwned\x07 <script>alert(1)</script> \"quoted' {{ 7*7 }} {% if 1 %}J{% endif %}"
#: What no rendered page may hold raw: C0 controls but tab and newline, DEL, C1, bidi controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(page: str) -> None:
    assert not RAW.search(page), RAW.search(page)
    assert page.count("<script") == page.count('<script src="static/')  # the page's own scripts, no other
    assert "\"quoted'" not in page
    text = html.unescape(page)
    assert "{{ 7*7 }}" in text and "{% if 1 %}J{% endif %}" in text and "49" not in text
    assert "\\u202eevil\\u202c \\x1b]0;pwned\\x07 <script>alert(1)</script>" in text


def keys() -> Any:
    class Keys:
        csrf = "c"
        prefix = "/k"

    return Keys()


def hostile_doc() -> dict[str, Any]:
    at = "2026-12-06T05:07:12.123456Z"
    return {
        "task": {
            "id": "t1",
            "ref": "fix",
            "goal": HOSTILE,
            "prompt": HOSTILE,
            "status": "blocked",
            "substate": None,
            "needs": "review",
            "branch": "corral/fix",
            "target": "main",
            "harness": "command",
            "updated_at": at,
        },
        "stopped_because": HOSTILE,
        "live": {"last_line": HOSTILE, "retry_class": "unknown", "retry_reason": HOSTILE, "attempt": 2},
        "violations": [{"path": HOSTILE, "decision": "pending"}],
        "status_changes": [{"from": None, "to": "blocked", "actor": "agent", "reason": HOSTILE, "at": at}],
        "turns": [
            {
                "sequence": 1,
                "role": "agent",
                "actor": None,
                "kind": "start",
                "content": HOSTILE,
                "reason": HOSTILE,
                "started_at": at,
                "ended_at": at,
                "agent_s": 1.0,
                "attempts": [{"number": 1, "outcome": HOSTILE, "started_at": at, "ended_at": at}],
            }
        ],
        "incidents": {
            "line": HOSTILE,
            "rows": [{"id": HOSTILE, "label": "Action required", "summary": HOSTILE, "evidence": HOSTILE}],
        },
        "children": [{"ref": HOSTILE, "status": "backlog", "substate": HOSTILE}],
    }


def test_a_task_page_renders_an_agents_text_inert() -> None:
    doc = hostile_doc()
    parts = task_page.task_parts(doc, "state")
    diff = task_page.diff_fragment("a" * 40, [HOSTILE], f"+{HOSTILE}\n-{HOSTILE}\n {HOSTILE}", (HOSTILE,))
    narration = task_page.narration_items(
        [{"event": "phase", "label": HOSTILE, "state": "done"}, {"event": "error", "message": HOSTILE, "hint": HOSTILE}]
    )
    page = task_page.task_page(keys(), "state", "t1", HOSTILE, {**parts, "diff": diff, "narration": narration})
    inert(str(page))
    inert(str(task_page.output_lines([("stdout", HOSTILE), ("stderr", HOSTILE)])))
    inert(str(task_page.confirm_accept("p/s/t/t1", HOSTILE, HOSTILE, "b" * 40) + HOSTILE))  # joined: sanitized too
    # a time is shown to the second, never with its fraction
    assert "2026-12-06 05:07:12 UTC" in page and "05:07:12.123456" not in html.unescape(
        re.sub(r'data-time="[^"]*"|datetime="[^"]*"', "", page)
    )


def test_the_board_renders_an_agents_text_inert() -> None:
    row = {
        "id": "t1",
        "ref": "fix",
        "status": "working",
        "substate": "agent",
        "needs": "working",
        "goal": HOSTILE,
        "reason": HOSTILE,
        "needs_action": 1,
        "project": HOSTILE,
        "project_path": "/x",
        "age_s": 3.0,
        "live": {"last_line": HOSTILE, "retry_class": "unknown", "retry_reason": HOSTILE, "attempt": 2},
    }
    groups = [{"needs": n, "title": n, "rows": [row] if n == "working" else []} for n in views.NEED_COLOURS]
    doc = {
        "projects": [{"name": HOSTILE}],
        "problems": [HOSTILE],
        "groups": groups[:-1],
        "finished": [{**row, "status": "complete", "needs": None}],
    }
    act = {"hours": ["2026-12-06T05:00:00Z"], "counts": {"working": [1]}, "tasks": {"working": 1}}
    fragment = board_page.board_fragment(doc, {"/x": "s"}, act)
    inert(str(board_page.board_page(keys(), fragment, [("s", HOSTILE)])))
    inert(str(views.flash(HOSTILE, error=True, hint=HOSTILE, link=(HOSTILE, "p/s/t/t1"))))


def test_only_the_templates_html_is_markup() -> None:
    said = render("note.html", text=Markup("<b>made here</b>"), cls="meta")
    assert "<b>made here</b>" in said  # HTML a template or the dashboard built passes
    assert "&lt;b&gt;" in render("note.html", text="<b>from outside</b>", cls="meta")


def test_the_templates_ship_as_package_data() -> None:
    """An installed corral (not this checkout) has every template: pyproject's package data names them."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shipped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    templates = root / "src" / "corral" / "dashboard" / "templates"
    names = sorted(p.relative_to(templates.parent).as_posix() for p in templates.iterdir())
    assert names
    for name in names:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in shipped["corral.dashboard"]), name
