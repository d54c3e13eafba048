"""File-permission violations: the park label they derive and the decisions on them.

``conflict`` is derived, never asserted (docs/lifecycle.md): the pending violation set is
the source of truth, and :func:`park_status` is the only rule that turns it into
a status. Decisions are sticky: once a file is approved or reverted, a later
decision names only what is still pending, silence never re-decides a file, and
re-naming a decided file is accepted as a no-op.

A decided file that the agent changes again: an approved file stays approved for
the session (the approval covers the path); a reverted file becomes pending
again, because the agent redid what a person undid.

A violation's path is the exact name git stores (read with ``-z``): tabs, line feeds, quotes,
backslashes, escape bytes and letters outside ASCII included, so a protected pattern matches it
as it matches any other name. It is escaped only where it is shown (:func:`shown_path`), and a
person may name a file by that shown form as well as by its exact name (:func:`plan_decisions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from msgspec import Struct, field

from corral.domain.sanitize import display, sanitize_field
from corral.domain.status import Status


class Decision(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REVERTED = "reverted"


def park_status(pending: int) -> Status:
    """The resting label of a paused task: conflict while any violation is pending."""
    return Status.CONFLICT if pending > 0 else Status.BLOCKED


def after_change(current: Decision | None) -> Decision | None:
    """The decision a path gets when an agent turn changes it again (None: leave as is)."""
    if current is None or current is Decision.REVERTED:
        return Decision.PENDING
    return None


class DecisionPlan(Struct):
    """What an unblock's file decisions do to the violation set."""

    decide: dict[str, Decision] = field(default_factory=dict)
    already: dict[str, Decision] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    conflicting: list[str] = field(default_factory=list)


def plan_decisions(
    records: Mapping[str, Decision],
    approve: Iterable[str] = (),
    revert: Iterable[str] = (),
    *,
    revert_rest: bool = False,
) -> DecisionPlan:
    """Apply a person's file decisions to ``records`` (path -> current decision).

    ``revert_rest`` is ``--no-approve-files``: every pending file not approved in the
    same command is reverted. Files not in ``records`` are reported unknown; a file
    both approved and reverted in one command is reported conflicting.
    """
    plan = DecisionPlan()
    approve_set = list(dict.fromkeys(_named(records, p) for p in approve))
    revert_set = list(dict.fromkeys(_named(records, p) for p in revert))
    both = set(approve_set) & set(revert_set)
    plan.conflicting = sorted(both)
    for path, wanted in [(p, Decision.APPROVED) for p in approve_set] + [(p, Decision.REVERTED) for p in revert_set]:
        if path in both:
            continue
        current = records.get(path)
        if current is None:
            plan.unknown.append(path)
        elif current is Decision.PENDING:
            plan.decide[path] = wanted
        else:
            plan.already[path] = current
    for path, current in records.items():
        if current is Decision.PENDING and path not in plan.decide:
            if revert_rest and path not in both:
                plan.decide[path] = Decision.REVERTED
            else:
                plan.undecided.append(path)
    plan.undecided.sort()
    return plan


def _named(records: Mapping[str, Decision], name: str) -> str:
    """The recorded path a person means by ``name``: the exact name, else the one path shown as
    ``name`` (:func:`shown_path`) or made ``name`` by intake's escaping (an ESC typed becomes
    ``\\u001b``); ``name`` itself, so reported unknown, when none or several are."""
    if name in records:
        return name
    meant = [p for p in records if name in (shown_path(p), sanitize_field(p))]
    return meant[0] if len(meant) == 1 else name


#: What git's own quoting escapes in a name, as it escapes it.
_QUOTED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def shown_path(path: str) -> str:
    """``path`` as a person reads it: itself when plain; otherwise in double quotes, with each tab,
    line feed, carriage return, quote and backslash escaped as git quotes them (``\\t``, ``\\n``,
    ``\\"``, ``\\\\``) and every other control, bidi control or undecodable byte as
    :func:`~corral.domain.sanitize.display` shows it (``\\x1b``). Letters outside ASCII stay letters.

    Only for showing: the store, git and every match keep the exact name.
    """
    if not any(c in _QUOTED for c in path) and display(path, multiline=False) == path:
        return path
    return '"' + display("".join(_QUOTED.get(c, c) for c in path), multiline=False) + '"'


def shown_paths(paths: Iterable[str], *, most: int | None = None) -> str:
    """``paths`` shown (:func:`shown_path`) and joined by commas; past ``most`` of them, an ellipsis."""
    listed = list(paths)
    kept = listed if most is None else listed[:most]
    return ", ".join(shown_path(p) for p in kept) + (" …" if len(listed) > len(kept) else "")
