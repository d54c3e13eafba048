"""Lines fitted to a terminal: the columns a line takes, a line cut to a width, a window of a height.

Pure. A line here is one the app already made safe: its only escape sequences are corral's own
colour codes, which take no column and are never cut in half.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

#: corral's own colour codes, the only escape sequences a line holds once the app made it safe.
_SGR = re.compile("\x1b\\[[0-9;]*m")


def _cells(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes, its colour codes aside."""
    return sum(_cells(ch) for ch in _SGR.sub("", text))


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns (colour codes kept, never cut in half, reset after a cut)."""
    text = text.expandtabs(4)
    if cells(text) <= width:
        return text
    out: list[str] = []
    used = 0
    pos = 0
    while pos < len(text):
        m = _SGR.match(text, pos)
        if m:
            out.append(m.group())
            pos = m.end()
            continue
        ch = text[pos]
        w = _cells(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
        pos += 1
    return "".join(out) + "…" + ("\x1b[0m" if "\x1b[" in text else "")


def window(lines: Sequence[str], top: int, height: int) -> list[str]:
    """The ``height`` lines from ``top`` (padded with blanks): what a screen of that height shows."""
    shown = list(lines[top : top + height])
    return shown + [""] * (height - len(shown))


def scroll_to(top: int, line: int, height: int) -> int:
    """The first line to show so that ``line`` is in a window of ``height`` lines starting near ``top``."""
    if height <= 0:
        return 0
    if line < top:
        return line
    if line >= top + height:
        return line - height + 1
    return top
