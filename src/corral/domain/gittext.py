"""Text corral writes into git (a commit message, a reflog message): nothing git refuses, nothing a terminal acts on.

An agent's words reach git in the squash commit's message; git refuses a NUL there
(``commit-tree`` fails, and the task could never be accepted), and ``git log`` would
hand an ESC or an OSC title straight to a person's terminal. So every text corral
writes into git goes through here: a CRLF becomes a line feed, and every other control
character, the bidi controls and undecodable bytes become visible escapes (``\\x00``,
``\\x1b``, ``\\u202e``) exactly as :func:`corral.domain.sanitize.display` shows them;
tabs and line feeds stay. A reflog message is one line. A capped text says how much was
left out. The exact text stays in corral's store (``corral show --json``).
"""

from __future__ import annotations

import re

from corral.domain.sanitize import display

#: The most of one agent's text a commit message carries (UTF-8 bytes).
MESSAGE_CAP = 16 * 1024
#: The most a reflog message carries (characters): git shows it on one line.
REFLOG_CAP = 200

_BLANKS = re.compile(r"[\r\n\t ]+")


def message(text: str, cap: int | None = None) -> str:
    """``text`` safe for a commit message; with ``cap``, at most that many UTF-8 bytes plus a note."""
    safe = display(text.replace("\r\n", "\n"), multiline=True)
    if cap is None:
        return safe
    data = safe.encode("utf-8")
    if len(data) <= cap:
        return safe
    kept = data[:cap].decode("utf-8", "ignore")  # a character cut in half is dropped whole
    left = len(data) - len(kept.encode("utf-8"))
    return f"{kept}\n[corral: {left} more bytes not shown here; the whole text is in corral show]"


def reflog(text: str) -> str:
    """``text`` safe for ``update-ref -m``: one line, escaped, at most :data:`REFLOG_CAP` characters."""
    # Only blanks fold: str.split would also eat VT, FF and FS..US, which must show as escapes.
    line = display(_BLANKS.sub(" ", text).strip(" "), multiline=False)
    return line if len(line) <= REFLOG_CAP else line[: REFLOG_CAP - 1] + "…"
