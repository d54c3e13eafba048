"""Decoding JSON that someone else wrote — a harness's stream, an agent's tool result — within bounds.

The standard decoder recurses once per level of nesting: one line of 100,000 ``[`` raises
``RecursionError`` (not ``ValueError``) in the middle of whatever read it, and a structure
just under the interpreter's limit decodes, then breaks the next code that walks it (a
digest, a ``json.dumps``, a redaction). So every reader of untrusted JSON goes through
:func:`decode`, which refuses before decoding what is too large (``max_bytes``) or nested
too deep (``max_depth``), and says why: the caller keeps such a line as text and reports the
gap, and nothing after it ever meets a structure deeper than ``max_depth``.

The depth is found without the decoder, in linear time and without recursion (:func:`too_deep`):
when the line holds more opening brackets than ``max_depth`` (most never do), its strings are
cut out by one regular expression and the brackets left are measured in C.
Where the line is not valid JSON, what this scan calls a string may differ from the
decoder's view only after the point the decoder gives up (an open string runs to the end, as
the decoder stops there), so the depth it finds is never less than the depth the decoder
would reach.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from itertools import accumulate
from typing import Any

from msgspec import Struct

#: Deeper than any event a harness writes (theirs stay under about twenty levels), and shallow enough
#: that any recursive code walking a decoded value stays far from the interpreter's limit.
MAX_DEPTH = 128
#: The most bytes decoded by default: a harness's event is far smaller; corral's readers pass their own cap.
MAX_BYTES = 2 * 1024 * 1024

#: A string, or one left open to the end of the text (where the decoder stops): a match never fails once
#: begun, so no quote is tried twice and the cut is linear whatever the text (an open string with many
#: escaped quotes would otherwise be scanned again from each of them).
_STRING_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_STRING_TEXT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
#: Each byte's step of the depth: +1 for an opening bracket, -1 for a closing one, 0 for the rest.
_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))
#: Passes taking out innermost pairs before the running sum: a harness's events are this shallow.
_PASSES = 8


class Reason(StrEnum):
    TOO_DEEP = "too-deep"
    TOO_LARGE = "too-large"
    MALFORMED = "malformed"


class Unparseable(Struct, frozen=True):
    """Why a text was not decoded: ``reason`` a code, ``detail`` the plain words for a person."""

    reason: Reason
    detail: str


class Decoded(Struct, frozen=True):
    """The value a text held."""

    value: Any


def too_deep(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``data``, strings left out; linear, no recursion.

    Most texts hold at most ``limit`` opening brackets and are only counted. Otherwise the brackets
    outside strings are kept (the *skeleton*): ``limit + 1`` opening ones first is the usual attack,
    answered at once; a few passes that take out the innermost pairs empty a shallow skeleton;
    what is left is measured by the running sum of its steps.
    """
    if isinstance(data, str):
        if data.count("[") + data.count("{") <= limit:
            return False
        data = _STRING_TEXT.sub("", data).encode("ascii", "ignore")  # brackets are ASCII: the rest may go
    else:
        if data.count(b"[") + data.count(b"{") <= limit:
            return False
        data = _STRING_BYTES.sub(b"", data)
    skeleton = data.translate(None, _NOT_BRACKETS)
    if len(skeleton) > limit and all(skeleton.find(c, 0, limit + 1) < 0 for c in (b"]", b"}")):
        return True
    rest = skeleton
    for _ in range(min(limit, _PASSES)):
        rest = rest.replace(b"[]", b"").replace(b"{}", b"")
        if not rest:
            return False
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0) > limit


def decode(
    data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, length: int | None = None
) -> Decoded | Unparseable:
    """The JSON value ``data`` holds, or why it was refused. ``length`` is the text's whole size when
    ``data`` is only its beginning (a line cut short by its reader): that text is too large."""
    size = len(data) if length is None else length
    if size > max_bytes:
        return Unparseable(Reason.TOO_LARGE, f"larger than {_size(max_bytes)}")
    if too_deep(data, max_depth):
        return Unparseable(Reason.TOO_DEEP, f"nested deeper than {max_depth} levels")
    try:
        return Decoded(json.loads(data))
    except ValueError:  # UnicodeDecodeError too
        return Unparseable(Reason.MALFORMED, "not valid JSON")


def decode_first(text: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Decoded | Unparseable:
    """The first JSON value at the start of ``text`` (blanks before it skipped; what follows it ignored),
    within the same bounds as :func:`decode` — measured over the whole of ``text``."""
    if len(text) > max_bytes:
        return Unparseable(Reason.TOO_LARGE, f"larger than {_size(max_bytes)}")
    if too_deep(text, max_depth):
        return Unparseable(Reason.TOO_DEEP, f"nested deeper than {max_depth} levels")
    try:
        value, _end = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return Unparseable(Reason.MALFORMED, "not valid JSON")
    return Decoded(value)


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"
