"""The frame every dashboard page shares: its head (htmx, the stream, the stylesheet), the board's colours,
links to a task, and the flash line an action answers with.

Each page renders a document the engine returned, and decides nothing: the board
(:mod:`corral.dashboard.board_page`) and a task (:mod:`corral.dashboard.task_page`), each from its
templates (``templates/``, :func:`corral.dashboard.html.render`). Plots are inline SVG drawn with
presentation attributes (the CSP allows no inline style).

Colours follow the board's grouping: a task, a status in the day's chart and a status chip take the colour
of the group it is shown in (what it needs from the person, ``domain/needs``), and the legend names them.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral.dashboard.html import Markup, render
from corral.domain.needs import ORDER, TITLES, Need, need_of_status
from corral.domain.status import Status

HTMX = "static/htmx-2.0.11.min.js"
STREAM = "static/dashboard.js"  # the page's event stream (no inline script: the CSP allows none)
CSS = "static/dashboard.css"
#: htmx without eval, without running script tags it swaps in, without its inline indicator style.
HTMX_CONFIG = '{"allowEval":false,"allowScriptTags":false,"includeIndicatorStyles":false,"selfRequestsOnly":true}'

#: The group a finished task is shown in (it needs nothing: ``need_of`` gives None).
FINISHED = "finished"
#: The colour of each of the board's groups, in its order, then the finished tasks'.
NEED_COLOURS: dict[str, str] = {
    Need.REVIEW.value: "#e8a317",
    Need.FAILED.value: "#c92a2a",
    Need.WORKING.value: "#2f9e44",
    Need.BACKLOG.value: "#9aa5b1",
    FINISHED: "#5c636a",
}
#: The legend: each group's colour and title, as the board's columns are named.
LEGEND: tuple[tuple[str, str], ...] = (*((n.value, TITLES[n]) for n in ORDER), (FINISHED, "Finished"))


def group_of(status: str, needs: str | None = None) -> str:
    """The group a status is coloured as: the row's own ``needs`` where the engine gave one (a failed turn
    resting in blocked is ``failed``), else its status's group; a finished status, :data:`FINISHED`."""
    if needs:
        return needs
    try:
        need = need_of_status(Status(status))
    except ValueError:
        return FINISHED
    return need.value if need is not None else FINISHED


def status_colour(status: str) -> str:
    return NEED_COLOURS[group_of(status)]


class Keys(Protocol):
    """What a page needs of the dashboard's keys (``security.Keys``): its CSRF token and its root."""

    csrf: str

    @property
    def prefix(self) -> str: ...


def page(title: str, keys: Keys, body: Markup) -> Markup:
    """A whole page. Its links are relative to ``<base>``, the dashboard's secret root, so no page
    names the root but through it."""
    return render(
        "page.html", title=title, keys=keys, body=body, css=CSS, htmx=HTMX, stream=STREAM, htmx_config=HTMX_CONFIG
    )


def task_href(row: dict[str, Any], state: str) -> str:
    from corral.dashboard.html import path

    return path("p", state, "t", str(row["id"]))


def flash(text: str, *, error: bool = False, hint: str | None = None, link: tuple[str, str] | None = None) -> Markup:
    """The line an action answers with; ``link``: (text, href) of a page it names."""
    return render("flash.html", text=text, error=error, hint=hint, link=link)


def note(text: str, cls: str) -> Markup:
    """One paragraph of text, classed (``meta``, ``problem``)."""
    return render("note.html", text=text, cls=cls)
