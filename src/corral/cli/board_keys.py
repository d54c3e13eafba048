"""The board's keys (``corral watch`` on a terminal): which key asks for which operation, and what the key line offers.

The operations table (:mod:`corral.domain.operations_table`) decides which of these a selected task may
take; this module only names the keys. A key for an operation the table refuses is not offered on the
key line, and pressed anyway it is refused the way the engine refuses the operation, before anything
is asked or opened.
"""

from __future__ import annotations

from corral.domain.operations_table import Op, allowed_operations
from corral.domain.status import Status

#: The keys that act on the selected task, and the operation each asks for.
ACTION_KEYS: dict[str, Op] = {
    "s": Op.START,
    "x": Op.STOP,
    "u": Op.UNBLOCK,
    "?": Op.ASK,
    "a": Op.ACCEPT,
    "p": Op.PAIR,
    "c": Op.CLOSE,
    "r": Op.REJECT,
}

#: Textual's name of each key in :data:`ACTION_KEYS` that is not its own character.
KEY_NAMES: dict[str, str] = {"?": "question_mark"}

#: The keys that only read, or act on no task in particular, as the key line words them.
READ_KEYS = ("n new", "⏎ open", "t/l/d timeline/log/diff")


def offered(status: Status | None) -> list[tuple[str, Op]]:
    """The action keys the operations table lets a task in ``status`` take (None: no task selected, none)."""
    allowed = allowed_operations(status) if status is not None else ()
    return [(key, op) for key, op in ACTION_KEYS.items() if op in allowed]


def keys_line(status: Status | None, *, detail: bool = False) -> str:
    """What the board's last line says: the keys, those that act only where the table lets the selected
    task's ``status`` take their operation; ``detail``: a task's pane is open (Esc closes it)."""
    acts = [f"{key} {op.value}" for key, op in offered(status)]
    last = "Esc back · q quit" if detail else "q quit"
    return " · ".join([*READ_KEYS, *acts, last])
