"""The frame every dashboard page shares: its head (htmx, the stream, the stylesheet), the status colours,
links to a task, and the flash line an action answers with.

Each page renders a document the engine returned, and decides nothing: the board
(:mod:`corral.dashboard.board_page`) and a task (:mod:`corral.dashboard.task_page`). Every piece
of text goes through :func:`corral.dashboard.html.esc`. Plots are inline SVG drawn with
presentation attributes (the CSP allows no inline style).
"""

from __future__ import annotations

from typing import Any, Protocol

from corral.dashboard.html import Markup, esc, path, tag

HTMX = "static/htmx-2.0.11.min.js"
STREAM = "static/dashboard.js"  # the page's event stream (no inline script: the CSP allows none)
CSS = "static/dashboard.css"
#: htmx without eval, without running script tags it swaps in, without its inline indicator style.
HTMX_CONFIG = '{"allowEval":false,"allowScriptTags":false,"includeIndicatorStyles":false,"selfRequestsOnly":true}'

STATUS_COLOURS = {
    "backlog": "#9aa5b1",
    "working": "#2f9e44",
    "blocked": "#e8a317",
    "conflict": "#d9480f",
    "pairing": "#1971c2",
    "interrupted": "#c92a2a",
    "merging": "#7048e8",
    "submitted": "#1098ad",
    "zombie": "#495057",
    "complete": "#2b8a3e",
    "abandoned": "#868e96",
}


class Keys(Protocol):
    """What a page needs of the dashboard's keys (``security.Keys``): its CSRF token and its root."""

    csrf: str

    @property
    def prefix(self) -> str: ...


def page(title: str, keys: Keys, body: Markup) -> Markup:
    """A whole page. Its links are relative to ``<base>``, the dashboard's secret root, so no page
    names the root but through it."""
    csrf = keys.csrf
    return Markup(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<base href="{esc(keys.prefix)}/">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="htmx-config" content="{esc(HTMX_CONFIG)}">'
        f"<title>{esc(title)}</title>"
        f'<link rel="stylesheet" href="{CSS}">'
        f'<script src="{HTMX}"></script><script src="{STREAM}"></script>'
        f'</head><body hx-headers=\'{{"X-Corral-CSRF": "{esc(csrf)}"}}\'>'
        '<header class="top"><a href="./" class="brand">corral</a></header>'
        f"{body}</body></html>"
    )


def task_href(row: dict[str, Any], state: str) -> str:
    return path("p", state, "t", str(row["id"]))


def flash(text: str, *, error: bool = False, hint: str | None = None) -> Markup:
    body = esc(text) + (Markup(" ") + tag("span", hint, class_="hint") if hint else Markup(""))
    return tag("p", body, class_="flash error" if error else "flash ok", role="status")
