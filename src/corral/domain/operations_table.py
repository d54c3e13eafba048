"""Which operation may run from which status: the operations table (docs/lifecycle.md#operations-table).

Every operation's guard (:func:`check_operation`), every "Next:" hint, every error naming the
statuses an operation takes and every surface's offer (a dashboard's buttons, ``watch``'s keys)
reads :data:`OPERATIONS`; none decides it for itself. Where an operation that moves the task
takes it (:data:`OP_TARGET`) must be a move the transition table (:mod:`corral.domain.status`)
allows from each of those statuses.
"""

from __future__ import annotations

import re
from enum import StrEnum

from corral.domain.actors import Actor
from corral.domain.status import PAUSED, RESTING, TERMINAL, Status, allowed_targets, sources_for, status_text
from corral.errors import IllegalTransition

S = Status


class Op(StrEnum):
    """The lifecycle operations a person, a builder or an agent can ask for."""

    START = "start"
    UNBLOCK = "unblock"
    RESUME = "resume"
    ASK = "ask"
    PRE_ACCEPT = "pre-accept"
    STOP = "stop"
    SYNC = "sync"
    PAIR = "pair"
    CHAT = "chat"
    ACCEPT = "accept"
    SUBMIT = "submit"
    CLOSE = "close"
    REJECT = "reject"
    REOPEN = "reopen"
    EDIT = "edit"
    DELETE = "delete"


#: Where an operation that moves the task takes it; the statuses it runs from must all reach it.
OP_TARGET: dict[Op, Status] = {
    Op.START: S.WORKING,
    Op.UNBLOCK: S.WORKING,
    Op.RESUME: S.WORKING,
    Op.ASK: S.WORKING,
    Op.PRE_ACCEPT: S.WORKING,
    Op.PAIR: S.PAIRING,
    Op.ACCEPT: S.MERGING,
    Op.SUBMIT: S.SUBMITTED,
    Op.CLOSE: S.ABANDONED,
    Op.REJECT: S.ABANDONED,
}

_RESTING_WITH_WORK = frozenset({S.BLOCKED, S.CONFLICT, S.INTERRUPTED, S.SUBMITTED})

#: The statuses each operation runs from: the one home of every such rule.
OPERATIONS: dict[Op, frozenset[Status]] = {
    Op.START: frozenset({S.BACKLOG}),
    Op.UNBLOCK: _RESTING_WITH_WORK,
    Op.RESUME: frozenset({S.INTERRUPTED}),
    Op.ASK: PAUSED,
    Op.PRE_ACCEPT: frozenset({S.BLOCKED, S.SUBMITTED}),
    Op.STOP: frozenset({S.WORKING}),
    Op.SYNC: _RESTING_WITH_WORK,
    Op.PAIR: frozenset({S.BLOCKED, S.CONFLICT, S.INTERRUPTED}),
    Op.CHAT: PAUSED | TERMINAL,  # on a finished task: its captured session, read-only, in the project root
    Op.ACCEPT: frozenset({S.BLOCKED, S.SUBMITTED}),
    Op.SUBMIT: frozenset({S.BLOCKED}),
    Op.CLOSE: frozenset(sources_for(S.ABANDONED)),
    Op.REJECT: frozenset(sources_for(S.ABANDONED)),
    Op.REOPEN: TERMINAL,
    Op.EDIT: frozenset(Status) - TERMINAL,
    Op.DELETE: TERMINAL,
}

#: The operations that first escape a merge an accept left stranded: a task in ``merging`` whose
#: accept died goes back to the status that accept recorded, then the operation runs from it; a merge in
#: flight is refused (``engine/recovery/merges.escape_stranded``).
ESCAPES_STRANDED_MERGE: frozenset[Op] = frozenset({Op.UNBLOCK, Op.SUBMIT, Op.CLOSE, Op.REJECT})

#: Statuses in which a task rests for ``corral wait``: no turn running, no pair open, no merge in flight.
WAIT_RESTS: frozenset[Status] = RESTING | TERMINAL
#: The rests ``wait`` answers with exit 1 even without a resting cause: closed without its work, or a
#: decision on protected files owed before the work can go on.
WAIT_FAILS: frozenset[Status] = frozenset({S.ABANDONED, S.CONFLICT})


def may(op: Op, status: Status) -> bool:
    return status in OPERATIONS[op]


def escapes_merge(op: Op, status: Status) -> bool:
    """Whether ``op`` on a task in ``status`` first puts back a stranded merge (:data:`ESCAPES_STRANDED_MERGE`)."""
    return status is S.MERGING and op in ESCAPES_STRANDED_MERGE


def allowed_from(op: Op) -> tuple[Status, ...]:
    """The statuses ``op`` runs from, in the table's order of statuses."""
    return tuple(s for s in Status if s in OPERATIONS[op])


def allowed_operations(status: Status) -> tuple[Op, ...]:
    """The operations a task in ``status`` may take, in the order of :class:`Op`: what every surface offers
    (a dashboard's buttons, ``watch``'s keys, a "Next:" hint) is asked of this, never decided by a surface."""
    return tuple(op for op in Op if status in OPERATIONS[op])


def takes(op: Op) -> str:
    """The statuses ``op`` runs from, in words: "blocked, conflict or interrupted"."""
    names = [s.value for s in allowed_from(op)]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


#: An operation named in a hint, as a command (``corral resume``) or in words ("then resume it").
_OP_WORD = re.compile(r"\b(" + "|".join(re.escape(o.value) for o in sorted(Op, key=len, reverse=True)) + r")\b")


def offers(text: str, status: Status, ref: str | None = None) -> bool:
    """Whether every operation ``text`` names, as a command or in words, may run on a task in ``status``
    (the operations table). The task's ``ref`` is not read for names: a task may be called ``start-page``."""
    if ref:
        text = re.sub(rf"(?<![\w-]){re.escape(ref)}(?![\w-])", " ", text)
    return all(may(Op(name), status) for name in _OP_WORD.findall(text.lower()))


#: What a person can do now with a task in each status, in words with the command that does it: the
#: hint of a refusal (:func:`check_operation`). Each command is one the table allows from that status.
NOW: dict[Status, str] = {
    S.BACKLOG: "start it: corral start {ref}",
    S.WORKING: "wait for its turn to end (corral wait {ref}), or stop it: corral stop {ref}",
    S.BLOCKED: "review its work (corral diff {ref}), then accept it (corral accept {ref}) "
    "or give the agent feedback: corral unblock {ref} -m 'your feedback'",
    S.CONFLICT: "decide its protected files (see them, and how to decide them: corral show {ref})",
    S.PAIRING: "wait until the pairing ends (corral wait {ref})",
    S.INTERRUPTED: "resume it: corral resume {ref}",
    S.MERGING: "see how its merge ends (corral show {ref})",
    S.SUBMITTED: "accept it once the remote approves it: corral accept {ref}",
    S.ZOMBIE: "only wait while it is being completed",
    S.COMPLETE: "reopen it, saying why: corral reopen {ref} -m 'it regressed'",
    S.ABANDONED: "reopen it: corral reopen {ref}",
}


def now_words(status: Status, ref: str) -> str:
    """What a person can do now with a task in ``status``, as one sentence (:data:`NOW`)."""
    return f"Now you can {NOW[status].format(ref=ref)}"  # no full stop: a command ends it, as typed


def _refusal_hint(hint: str | None, status: Status, ref: str) -> str:
    """The caller's hint where it names an operation the table lets run now; where it names none (a look:
    ``corral show``), it and what the person can do now; where it names one refused now, the latter alone."""
    now = now_words(status, ref)
    if not hint or not offers(hint, status, ref):
        return now
    named = _OP_WORD.findall(re.sub(rf"(?<![\w-]){re.escape(ref)}(?![\w-])", " ", hint.lower()))
    return hint if named else f"{hint} {now}"


def check_operation(op: Op, status: Status, ref: str, *, hint: str | None = None) -> None:
    """Refuse ``op`` on a task in ``status`` unless the operations table allows it: the refusal says what
    the status means, what ``op`` takes, and (unless the caller has a better hint) what the person can do now."""
    if may(op, status):
        return
    takes = [s.value for s in allowed_from(op)]
    which = ", ".join(takes[:-1]) + f" or {takes[-1]}" if len(takes) > 1 else "".join(takes)
    raise IllegalTransition(
        status.value,
        OP_TARGET[op].value if op in OP_TARGET else status.value,
        [t.value for t in allowed_targets(status, Actor.HUMAN)],  # zombie is the system's alone
        what=f"{op.value} {ref}",
        takes=takes,
        hint=_refusal_hint(hint, status, ref),
        message=f"Cannot {op.value} {ref}: it is {status_text(status)}; {op.value} takes {which}.",
    )
