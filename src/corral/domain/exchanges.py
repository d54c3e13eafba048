"""How the timeline numbers a task's turns: by exchange, the way a person counts them.

The store numbers every turn (``sequence``): a person's message is one, the agent's answer the
next. A person counts exchanges: the message and the answer to it are one numbered turn. A
turn that answers no person's message — an auto-resume and what it ran, a pre-accept turn, a
sync, an error recorded on its own — is an exchange of its own. ``show``, ``logs --turn``,
``failures``, the dashboard and MCP all number by :func:`number`, so "turn 3" is one thing
everywhere; ``--json`` keeps ``sequence`` beside ``exchange``.
"""

from __future__ import annotations

from collections.abc import Sequence

from corral.domain.actors import Role
from corral.domain.records import Turn


def number(turns: Sequence[Turn], *, before: int = 0) -> dict[int, int]:
    """Each turn's exchange number, by its sequence. ``turns`` are oldest first; ``before`` is how
    many exchanges began before the first of them (a page of the latest turns).

    An agent turn joins the exchange of the turn that launched it: the same command, or — a turn
    recorded as lost, with no command of its own — the launching turn its output belongs to
    (``log_turn``). Every other turn begins one. An answer whose launching turn is before the
    page joins the last exchange that began before it, which is that one: nothing else begins
    between a command and its answer (the task is working in between).
    """
    launched: dict[str, int] = {}  # a launching turn's exchange, by its command
    by_sequence: dict[int, int] = {}  # the same, by the launching turn's sequence
    out: dict[int, int] = {}
    current = before
    for t in turns:
        if t.role is Role.AGENT:
            log_turn = t.details.get("log_turn") if t.command_id is None else None
            if t.command_id is not None and t.command_id in launched:
                out[t.sequence] = launched[t.command_id]
                continue
            if isinstance(log_turn, int) and log_turn in by_sequence:
                out[t.sequence] = by_sequence[log_turn]
                continue
            if not out and before > 0 and (t.command_id is not None or isinstance(log_turn, int)):
                out[t.sequence] = current
                continue
        current += 1
        out[t.sequence] = current
        if t.role is Role.HUMAN and t.command_id is not None:
            launched[t.command_id] = current
            by_sequence[t.sequence] = current
    return out


def launcher(turns: Sequence[Turn], exchange: int) -> Turn | None:
    """The turn that began exchange ``exchange`` (whose directory holds its output), or None."""
    numbers = number(turns)
    return next((t for t in turns if numbers[t.sequence] == exchange), None)
