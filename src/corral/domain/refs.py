"""Task refs (short unique slugs that name a task and its branch ``corral/<ref>``) and plain ids:
the names that become a path part or a branch, so a name read from outside (a shared store's row,
a harness's session id) is checked here before it leads anywhere.

A ref is made from the goal's words; accented letters become their ASCII letters
("Café crème" → ``cafe-creme``), so a goal in another Latin-script language keeps its words.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from corral.errors import InvalidRef

MAX_REF = 48
_REF = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
#: An id (a task's, a session's, a harness session's UUID): a plain token, one path component.
_PLAIN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")


def is_ref(ref: str) -> bool:
    """A ref is lowercase letters, digits and inner hyphens: safe as a branch and a path part."""
    return len(ref) <= MAX_REF and "--" not in ref and _REF.fullmatch(ref) is not None


def is_plain_id(name: str) -> bool:
    """Whether ``name`` is a token a file name may be made of (never a path)."""
    return _PLAIN_ID.fullmatch(name) is not None


def validate_ref(ref: str) -> str:
    """``ref`` itself, when :func:`is_ref`; else the coded error a person is shown."""
    if not is_ref(ref):
        raise InvalidRef(
            f"'{ref}' is not a valid ref.",
            hint=f"Use lowercase letters, digits and single hyphens, at most {MAX_REF} characters "
            "(e.g. fix-login-timeout).",
        )
    return ref


#: Letters that Unicode does not decompose into an ASCII letter and a mark.
_LETTERS = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "þ": "th", "ð": "d", "ı": "i"})


def ascii_words(text: str) -> str:
    """``text`` lowercased with each letter as ASCII: marks dropped (NFKD), ß → ss, æ → ae …"""
    import unicodedata  # only a new task's ref is made of words; every path checks a ref

    folded = unicodedata.normalize("NFKD", text.lower().translate(_LETTERS))
    return "".join(ch for ch in folded if not unicodedata.combining(ch)).translate(_LETTERS)


def slugify(goal: str, limit: int = 32) -> str:
    words = re.findall(r"[a-z0-9]+", ascii_words(goal))
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    if not slug and words:
        slug = words[0][:limit]
    return slug or "task"


def unique_ref(goal: str, taken: Callable[[str], bool]) -> str:
    """A ref made from the goal, with -2, -3, … appended until it is free."""
    base = slugify(goal)
    if not taken(base):
        return base
    n = 2
    while taken(f"{base}-{n}"):
        n += 1
    return f"{base}-{n}"
