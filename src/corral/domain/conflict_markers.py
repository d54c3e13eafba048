"""Conflict markers in the lines a squash adds: what ``accept`` refuses to land unless a person means them.

An agent handed a conflict can commit a file just as git left it; its squash would then put
``<<<<<<<`` … ``=======`` … ``>>>>>>>`` on the target. :func:`find` reads a zero-context patch
(``git diff -U0``) and returns each region whose opening (``<<<<<<< ``), separator (a line of
exactly seven ``=``) and closing (``>>>>>>> ``) lines are all added, in that order, in one file:
a Markdown heading's underline of seven ``=`` alone, or a quoted ``>>>>>>>`` line, is no region.

The patch's text is the agent's: this module only reads it, keeps each path as git stores it
(unquoted), and shows it only through :func:`~corral.domain.violations.shown_path`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from msgspec import Struct

from corral.domain.violations import shown_path

OPENING = "<<<<<<< "
SEPARATOR = "======="
CLOSING = ">>>>>>> "
#: The most regions a refusal names (the count is whole).
NAMED = 10

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_ESCAPES = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class Region(Struct, frozen=True):
    """One conflict region a squash adds: its file and its first and last line in the new file."""

    path: str
    first: int
    last: int


def find(patch: str) -> list[Region]:
    """Every region of added conflict markers in ``patch`` (``git diff -U0``), in the patch's order."""
    found: list[Region] = []
    path: str | None = None
    line = 0
    opened: int | None = None
    separated = header = False
    for raw in patch.split("\n"):
        if raw.startswith("diff --git "):
            path, opened, separated, header = None, None, False, True
        elif header and raw.startswith("+++ "):  # in a hunk, "+++ x" is the added line "++ x"
            path = _new_path(raw[4:])
        elif raw.startswith("@@"):
            hunk = _HUNK.match(raw)
            line, header = (int(hunk.group(1)) if hunk else 0), False
        elif raw.startswith("+") and path is not None and not header:
            text = raw[1:].rstrip("\r")
            if text.startswith(OPENING):
                opened, separated = line, False
            elif text == SEPARATOR and opened is not None:
                separated = True
            elif text.startswith(CLOSING) and opened is not None and separated:
                found.append(Region(path, opened, line))
                opened, separated = None, False
            line += 1
    return found


def named(regions: Iterable[Region]) -> str:
    """The regions in words, each path shown as a person reads it, at most :data:`NAMED` of them:
    "a.py:3-9, b.md:1-5 (and 2 more)"."""
    regions = list(regions)
    words = [f"{shown_path(r.path)}:{r.first}-{r.last}" for r in regions[:NAMED]]
    more = f" (and {len(regions) - NAMED} more)" if len(regions) > NAMED else ""
    return ", ".join(words) + more


def _new_path(header: str) -> str | None:
    """The path of a ``+++`` header: ``b/<path>`` as is or C-quoted by git; None for ``/dev/null``."""
    header = header.rstrip("\r")
    if header.startswith('"') and header.endswith('"') and len(header) >= 2:
        header = _unquote(header[1:-1])
    if header == "/dev/null" or not header.startswith("b/"):
        return None
    return header[2:]


def _unquote(quoted: str) -> str:
    """git's C quoting undone: ``\\t``, ``\\"`` and octal bytes (a UTF-8 name is quoted byte by byte)."""
    out = bytearray()
    i = 0
    while i < len(quoted):
        ch = quoted[i]
        if ch != "\\" or i + 1 == len(quoted):
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = quoted[i + 1]
        if nxt in "01234567" and re.fullmatch(r"[0-7]{3}", quoted[i + 1 : i + 4]):
            out.append(int(quoted[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            out += _ESCAPES.get(nxt, nxt).encode("utf-8", "surrogateescape")
            i += 2
    return out.decode("utf-8", "surrogateescape")
