"""How the ref guard's findings read: the lines ``show`` gives, derived when read and never stored.

The report itself is :class:`~corral.engine.runtime.ref_guard.RefGuard`; what a line says of a
move follows its ``by`` and ``restored`` (docs/harnesses.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.engine.runtime.ref_guard import (
    RefGuard,
    RefMove,
)


def _short(ref: str) -> str:
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref.startswith(prefix):
            return ("tag " if prefix == "refs/tags/" else "") + ref.removeprefix(prefix)
    return ref


#: What the branch check found, in words (``corral.engine.runtime.branch_check``'s codes).
BRANCH_FINDINGS = {
    "branch-symref": "the agent made {name} a symbolic ref ({after})",
    "branch-not-a-commit": "the agent pointed {name} at {after}, which is not a commit",
    "branch-missing": "the agent deleted {name}",
    "branch-foreign-commits": "the agent pointed {name} at {after}, with commits it did not make in this turn",
    "branch-objects-incomplete": "the agent pointed {name} at {after}, whose objects are incomplete",
    "branch-objects-rejected": "the agent's turn wrote git objects that failed corral's check (its {name} at {after})",
}


def move_line(m: RefMove) -> str:
    """One plain line about one move: what the agent did, what corral did, where its version is."""
    name = _short(m.ref)
    finding = BRANCH_FINDINGS.get(m.code or "")
    if finding is not None:
        did = finding.format(name=name, after=(m.after or "nothing")[:60])
        done = (
            f"corral put it back at its last verified tip {(m.before or '')[:12]}"
            if m.restored
            else f"corral could NOT put it back ({m.error or 'unknown reason'})"
        )
        keep = f"; its version is kept on {m.kept}" if m.kept else ""
        return f"{did}; {done}{keep}."
    if m.after is None:
        did = f"the agent deleted {name}"
    elif m.before is None:
        did = f"the agent created {name} at {m.after[:12]}"
    else:
        did = f"the agent moved {name} from {m.before[:12]} to {m.after[:12]}"
    if m.restored:
        done = "corral removed it" if m.before is None else "corral put it back"
    else:
        done = f"corral could NOT put it back ({m.error or 'unknown reason'})"
    keep = f"; its version is kept on {m.kept}" if m.kept else ""
    return f"{did}; {done}{keep}."


def summary(guard: RefGuard | Mapping[str, Any]) -> str | None:
    """The one line ``show`` gives a turn whose agent moved refs; None when it moved none."""
    g = guard if isinstance(guard, RefGuard) else RefGuard.from_json(guard)
    if not g.moves:
        return _objects_line(g) or _strays_line(g)
    first = move_line(g.moves[0])
    more = len(g.moves) - 1
    line = first[0].upper() + first[1:]
    if more:
        line = line[:-1] + f" (and {more} more ref{'' if more == 1 else 's'}: corral show --json lists them)."
    return line


def _objects_line(g: RefGuard) -> str | None:
    objects = g.objects or {}
    rejected = objects.get("rejected")
    if not isinstance(rejected, int) or rejected <= 0:
        return None
    kept = objects.get("kept")
    where = f" (kept aside for a look: {kept})" if isinstance(kept, str) else ""
    return (
        f"The agent's turn wrote {rejected} git object{'' if rejected == 1 else 's'} that failed corral's check; "
        f"none reached the repository{where}."
    )


def _strays_line(g: RefGuard) -> str | None:
    if not g.strays:
        return None
    from corral.engine.runtime.stray_report import summary as strays_summary

    try:
        return strays_summary(g.strays)
    except (ValueError, TypeError, KeyError):
        return None


def target_moved(guard: RefGuard | Mapping[str, Any], target: str) -> RefMove | None:
    """The agent's move of the branch ``target``, if this report has one."""
    g = guard if isinstance(guard, RefGuard) else RefGuard.from_json(guard)
    name = target if target.startswith("refs/") else f"refs/heads/{target}"
    return next((m for m in g.moves if m.ref == name), None)
