"""The one place the dashboard makes text safe for HTML, and the small builders every view uses.

:func:`esc` is the only way text reaches a page: the terminal sanitizer first
(``domain/sanitize.display``: controls, escape sequences such as an OSC title, bidi controls and
undecodable bytes become visible escapes like ``\\x1b``), then ``html.escape`` (``<``, ``>``,
``&`` and both quotes), so an agent's ``<script>`` or ``javascript:`` link is text, and text is
safe in an attribute as in an element. Views build HTML from :func:`esc`'d pieces and
:class:`Markup` (HTML built here); nothing else is trusted. A URL corral puts in an ``href`` is
made of ids and refs, each :func:`esc`'d and percent-quoted (:func:`path`). A patch is built
here too (:func:`diff`): every line of it is text from the task's branch.
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable
from urllib.parse import quote

from corral.domain.sanitize import display


class Markup(str):
    """HTML built by the dashboard (never text from outside)."""

    __slots__ = ()

    def __add__(self, other: str) -> Markup:
        return Markup(str.__add__(self, other if isinstance(other, Markup) else esc(other)))

    def __radd__(self, other: str) -> Markup:
        return Markup(str.__add__(other if isinstance(other, Markup) else esc(other), self))


def esc(text: object, *, multiline: bool = True) -> Markup:
    """Any text made inert in HTML: terminal controls made visible, then HTML-escaped."""
    if isinstance(text, Markup):
        return text
    if text is None:
        return Markup("")
    return Markup(_html.escape(display(str(text), multiline=multiline), quote=True))


def join(parts: Iterable[str]) -> Markup:
    return Markup("".join(p if isinstance(p, Markup) else esc(p) for p in parts))


def tag(name: str, body: object = "", /, **attrs: object) -> Markup:
    """``<name attrs>body</name>``; attribute names use ``_`` for ``-`` (``hx_post`` → ``hx-post``)
    and a trailing ``_`` for a Python keyword (``class_``); a value of True is a bare attribute."""
    out = [f"<{name}"]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.rstrip("_").replace("_", "-")
        out.append(f" {attr}" if value is True else f' {attr}="{esc(value)}"')
    out.append(">")
    content = body if isinstance(body, Markup) else esc(body)
    out += [str(content), f"</{name}>"]
    return Markup("".join(out))


def path(*parts: str) -> str:
    """A path of this dashboard from ids and refs (each percent-quoted, no scheme ever), relative to
    the page's ``<base>`` (the dashboard's secret root, ``security.Keys.prefix``)."""
    return "/".join(quote(p, safe="") for p in parts)


#: A diff longer than this is cut (the rest is one `corral diff` away).
DIFF_LINES = 4000


def diff(text: str) -> Markup:
    """A unified diff, one element per line, classed by kind (file header, hunk, added, removed)."""
    lines = text.splitlines()
    out: list[str] = []
    for line in lines[:DIFF_LINES]:
        if line.startswith(
            ("diff --git", "index ", "--- ", "+++ ", "new file", "deleted file", "similarity", "rename ")
        ):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        # One block per line (a copy still gives one line each); a newline inside it would double them.
        out.append(f'<span class="d-{kind}">{esc(line, multiline=False) or " "}</span>')
    if len(lines) > DIFF_LINES:
        out.append(f'<span class="d-note">… {len(lines) - DIFF_LINES} more lines: corral diff shows them all</span>')
    return Markup('<pre class="diff">' + "".join(out) + "</pre>")
