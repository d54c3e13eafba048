"""A loose object read from the repository's files, as git reads it: its type and the start of its content.

accept reads a few objects it could ask git about — the task branch's tip and the target's commit at
pre-flight (a commit? which tree?), the squash it made at verification (its tree, its trailers) — and
each question asked of git is a process. An object git keeps loose (``objects/xx/yyyy…``, zlib-deflated
``<type> <size>\\0<content>``) answers it from one small file. Anything else — packed, in an alternate,
compressed oddly, a size or type git would reject — is None, and the caller asks git as before.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_TYPES = frozenset({b"commit", b"tree", b"blob", b"tag"})
#: How much of a file is inflated when only the header and the first lines are wanted.
HEAD_BYTES = 512
#: The most of an object read and inflated whole (a commit's parents, a squash's trailers): a commit larger than
#: this is rare, and git reads it; a file that inflates past it (a zlib bomb an agent left) is never inflated whole.
WHOLE_BYTES = 1 << 20


def read_loose(common: Path, oid: str, *, whole: bool = False) -> tuple[str, bytes] | None:
    """The type of the loose object ``oid`` in ``common``'s object directory and its content (``whole``), or the
    start of it (its first lines: at least a commit's ``tree`` line); None where it is not there loose, or its
    file is not a well-formed object."""
    if not _OID.fullmatch(oid):
        return None
    try:
        with (common / "objects" / oid[:2] / oid[2:]).open("rb") as f:
            data = f.read(WHOLE_BYTES + 1 if whole else HEAD_BYTES * 8)  # the start inflates from a start
    except OSError:
        return None
    if whole and len(data) > WHOLE_BYTES:  # deflated larger than the bound: it inflates larger still
        return None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(data, WHOLE_BYTES + 64 if whole else HEAD_BYTES)  # never past the bound
    except zlib.error:
        return None
    header, nul, content = raw.partition(b"\0")
    kind, space, size = header.partition(b" ")
    if not nul or not space or kind not in _TYPES or not size.isdigit():
        return None
    if whole and (not inflate.eof or len(content) != int(size)):
        return None
    return kind.decode(), content


def loose_commit_tree(common: Path, oid: str) -> str | None:
    """The tree of the commit ``oid`` where git keeps it loose; None otherwise (packed, absent, not a commit)."""
    found = read_loose(common, oid)
    return commit_tree(found[1]) if found is not None and found[0] == "commit" else None


def commit_tree(content: bytes) -> str | None:
    """The tree a commit's content names on its first line (``tree <oid>``), or None."""
    first = content.split(b"\n", 1)[0]
    if not first.startswith(b"tree "):
        return None
    tree = first[5:].decode("ascii", "replace")
    return tree if _OID.fullmatch(tree) else None
