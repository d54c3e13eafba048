"""Text at corral's two boundaries: sanitized at intake (sanitize and deliver, never reject), escaped for display.

Every text a person or a builder hands corral passes through here before it is
stored. Non-printable control characters (C0 except tab, LF and CR; DEL; C1) are
replaced by their printable escapes, so a NUL becomes the six characters
``\\u0000``. Bytes that were not valid UTF-8 (which Python hands us as lone
surrogates) become ``\\xNN`` so nothing is dropped and SQLite can store them.

Prose fields (feedback, a message, a prompt, a note, a reason, a question) get a
short disclosure note appended when anything was replaced, so the substitution is
visible rather than silent. Non-prose fields (a goal, a file path, each element
of an array whose elements become git argv) are escaped without it: a note
appended to a path would corrupt the path. Ordinary text passes byte for byte.

Display, the other boundary: :func:`display` renders any text for a terminal
(harness output, an agent's words, a path, a branch, an error line). What a terminal
would act on rather than show becomes a visible escape: C0 (``\\x1b``; tab and, in a
multi-line block, the line feed stay), DEL, C1 (``\\x9b``), the Unicode bidi controls
that reorder what a reader sees (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069:
``\\u202e``), the line and paragraph separators U+2028/U+2029, and undecodable bytes
(``\\xNN``). Escaping the ESC byte disarms every escape sequence (CSI, OSC titles ended
by BEL or ST, any ``ESC x``): what follows it is plain printable text. The result holds
no control character, so :func:`display` of it is itself. A backslash is not escaped, so
a literal ``\\x1b`` an agent printed reads the same as an escaped ESC: the exact text
is what ``--json`` and ``logs --raw`` give.
"""

from __future__ import annotations

import re
from functools import cache

from msgspec import Struct

from corral.domain.settings import default
from corral.errors import TextTooLarge

#: Default cap on one text at intake: the ``text_cap`` setting's default.
DEFAULT_TEXT_CAP = default("text_cap", int)

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte from invalid UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


class Sanitized(Struct, frozen=True):
    text: str
    replaced: int


def escape_controls(text: str) -> Sanitized:
    """Replace every non-printable control character (and undecodable byte) by its escape."""
    out, n = _CONTROL.subn(_escape, text)
    return Sanitized(out, n)


def without_nul(text: str) -> str:
    """``text`` with each NUL as its printable escape (``\\u0000``), the rest as it is: what a store
    whose text cannot hold a NUL (PostgreSQL) keeps of an agent's words that carried one."""
    return text.replace("\x00", "\\u0000") if "\x00" in text else text


def disclosure_note(replaced: int) -> str:
    plural = "s were" if replaced != 1 else " was"
    return (
        f"\n\n[corral: {replaced} non-printable character{plural} replaced with a "
        "printable escape such as \\u0000; nothing else was changed.]"
    )


def sanitize_prose(text: str) -> str:
    """A free-text field that becomes prose in a prompt: escaped, with a note when changed."""
    result = escape_controls(text)
    if not result.replaced:
        return text
    return result.text + disclosure_note(result.replaced)


def sanitize_field(text: str) -> str:
    """A short or structural field (a goal, a path, an array element): escaped, no note."""
    return escape_controls(text).text


def one_line(text: str, cap: int | None = None) -> str:
    """A short line another process wrote, for a table cell: whitespace collapsed to single spaces,
    controls escaped, at most ``cap`` characters (cut with an ellipsis). A line it made comes back as it is."""
    line = sanitize_field(" ".join(text.split()))
    return line if cap is None or len(line) <= cap else line[: cap - 1] + "…"


def sanitize_goal(text: str) -> str:
    """A goal is one line: line breaks fold to single spaces, then the field is escaped."""
    # Only CR and LF break a goal's line: str.splitlines would also eat VT, FF, FS, GS, RS, US
    # and NEL, which must survive as printable escapes like every other control character.
    parts = (part.strip(" \t") for part in re.split(r"\r\n|\r|\n", text))
    one_line = " ".join(part for part in parts if part)
    return sanitize_field(one_line)


def sanitize_paths(paths: list[str]) -> list[str]:
    return [sanitize_field(p) for p in paths]


#: Everything a terminal acts on instead of showing, for :func:`display`.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape'd byte from invalid UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: A colour (SGR) sequence, the one escape sequence ``keep_sgr`` lets through: it changes colours only.
_SGR = "\x1b\\[[0-9;:]*m"


@cache
def _display_pattern(multiline: bool, keep_sgr: bool) -> re.Pattern[str]:
    """What :func:`display` escapes, compiled on first use: each of the four is a class of a few hundred
    code points, about a millisecond of every command's start-up if compiled at import."""
    unsafe = f"[{_UNSAFE}]" if multiline else f"[{_UNSAFE}\n]"
    return re.compile(f"{_SGR}|{unsafe}" if keep_sgr else unsafe)


def _visible_or_sgr(match: re.Match[str]) -> str:
    found = match.group()
    return found if len(found) > 1 else _visible(match)


def display(text: str, *, multiline: bool = True, keep_sgr: bool = False) -> str:
    """``text`` made safe to write to a terminal: every control, bidi control and undecodable byte
    as a visible escape (``\\x1b``, ``\\u202e``, ``\\xff``); tabs stay, and line feeds stay in a
    ``multiline`` block (a one-line field shows them as ``\\x0a``).

    ``keep_sgr`` lets colour sequences (``ESC [ … m``) through and escapes every other: for text a
    tool coloured (git's diff), where colour is all an outside author could add.
    """
    pattern = _display_pattern(multiline, keep_sgr)
    if keep_sgr:
        return pattern.sub(_visible_or_sgr, text)
    if pattern.search(text) is None:  # the common case: nothing to do, no copy
        return text
    return pattern.sub(_visible, text)


def check_size(field: str, text: str, cap: int = DEFAULT_TEXT_CAP) -> None:
    """Refuse, before anything is stored, a text whose UTF-8 size is over ``cap``."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > cap:
        raise TextTooLarge(field, size, cap)
