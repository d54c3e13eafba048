"""The one place the dashboard makes text safe for HTML: Jinja2 templates, autoescaped, behind corral's sanitizer.

Every page and every fragment is a template under ``templates/`` rendered by :func:`render`. The environment
escapes every value it prints (autoescape), and before that runs corral's terminal sanitizer over it
(``finalize``: ``domain/sanitize.display``: controls, escape sequences such as an OSC title, bidi controls and
undecodable bytes become visible escapes like ``\\x1b``), so an agent's ``<script>``, ``javascript:`` link or
``{{ }}`` is text, in an attribute as in an element; a value is data, never a template. Only HTML a template
made is :class:`Markup`; nothing a caller passes is trusted but that. A URL corral puts in an ``href`` is made of
ids and refs, each percent-quoted (:func:`path`). A time is shown to the second, in UTC until the page's
script puts it in the person's zone (:func:`when`).
"""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import quote

import markupsafe
from markupsafe import escape

from corral.domain.clock import parse_time
from corral.domain.sanitize import display

__all__ = ["DIFF_LINES", "Markup", "Shown", "diff_lines", "esc", "path", "render", "when"]


class Markup(markupsafe.Markup):
    """HTML a template or the dashboard built; text joined to it (``+``, ``format``) is sanitized, then escaped."""

    __slots__ = ()

    @classmethod
    def escape(cls, s: Any) -> Markup:
        if hasattr(s, "__html__"):
            return cls(s.__html__())
        return cls(escape(display(str(s))))


class Shown(str):
    """Text already through the sanitizer (one line, :func:`line`): escaped, not sanitized again."""

    __slots__ = ()


def esc(text: object, *, multiline: bool = True) -> Markup:
    """Any text made inert in HTML outside a template (the guard's refusals): sanitized, then escaped."""
    if isinstance(text, markupsafe.Markup):
        return Markup(text)
    if text is None:
        return Markup("")
    return Markup(escape(display(str(text), multiline=multiline)))


def _finalize(value: Any) -> Any:
    """What every ``{{ value }}`` prints before autoescape: made visible by the sanitizer unless it is the
    templates' own HTML or already sanitized; None prints nothing."""
    if value is None:
        return ""
    if isinstance(value, markupsafe.Markup | Shown) or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    text = str(value)
    if text.isascii() and text.isprintable():  # nothing the sanitizer would change (the most of a page)
        return text
    return display(text)


def line(text: object) -> Shown:
    """One line of output: every control character visible, a line break too."""
    return Shown(display("" if text is None else str(text), multiline=False))


def path(*parts: object) -> str:
    """A path of this dashboard from ids and refs (each percent-quoted, no scheme ever), relative to
    the page's ``<base>`` (the dashboard's secret root, ``security.Keys.prefix``)."""
    return "/".join(quote(str(p), safe="") for p in parts)


def utc(value: object) -> str:
    """A stored time to the second, in UTC (the page's script shows it in the person's zone)."""
    try:
        at = parse_time(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None:
        return "" if value is None else str(value)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def when(value: object) -> Markup:
    """A ``<time>`` the page's script rewrites in the person's zone, to the second (``data-time``)."""
    if not value:
        return Markup("")
    return Markup('<time datetime="{0}" data-time="{0}">{1}</time>').format(str(value), display(utc(value)))


#: A diff longer than this is cut (the rest is one `corral diff` away).
DIFF_LINES = 4000

_FILE_HEADS = ("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file", "similarity", "rename ")


def diff_lines(text: str) -> tuple[list[tuple[str, Shown]], int]:
    """A unified diff's lines, each with its kind (file header, hunk, added, removed, context), and how
    many were cut past :data:`DIFF_LINES`. Every line of it is text from the task's branch."""
    lines = text.splitlines()
    out: list[tuple[str, Shown]] = []
    for text_line in lines[:DIFF_LINES]:
        if text_line.startswith(_FILE_HEADS):
            kind = "file"
        elif text_line.startswith("@@"):
            kind = "hunk"
        elif text_line.startswith("+"):
            kind = "add"
        elif text_line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line(text_line)))
    return out, max(0, len(lines) - DIFF_LINES)


@cache
def environment() -> Any:
    """The templates' environment, made on the first render (importing jinja2 is not free)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("corral.dashboard", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters.update(line=line, when=when, utc=utc)
    env.globals.update(path=path)
    return env


def render(name: str, **context: Any) -> Markup:
    """The template ``name`` rendered with ``context``: HTML, every value in it escaped."""
    return Markup(environment().get_template(name).render(**context))
