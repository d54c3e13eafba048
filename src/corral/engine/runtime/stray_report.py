"""What the stray-ref sweep found after a turn (``runtime/stray_refs.sweep``), as it is stored and shown.

**What to do with the report.** Store it (``StrayReport.to_json``) with the turn; ``summary``
is the line ``show`` gives. ``task_refs`` names the refs at corral's own names that were removed
(a task's branch that was a symbolic ref or unreadable): the caller puts each back from the
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct


class Found(Struct, frozen=True):
    """One stray: a lock file, a ref, a symbolic ref or an unreadable ref file, and what became of it."""

    kind: str  # "lock" | "ref" | "symref" | "broken"
    name: str  # the ref's name, or the lock's path in the git directory; escaped for display
    value: str | None  # a ref's object, a symbolic ref's target; None for a lock or an unreadable file
    removed: bool
    why: str | None = None  # why it was left

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "value": self.value, "removed": self.removed, "why": self.why}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Found:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(text("kind") or "?", text("name") or "?", text("value"), data.get("removed") is True, text("why"))


class StrayReport(Struct, frozen=True):
    """What :func:`sweep` found: counts of what it removed and left, the first few of each, and any error."""

    locks: int = 0  # lock files removed
    refs: int = 0  # refs removed (plain refs corral did not make)
    symrefs: int = 0  # symbolic refs removed
    broken: int = 0  # unreadable loose ref files removed
    left: int = 0  # strays found and left (each with a why)
    items: tuple[Found, ...] = ()  # the first ITEMS_KEPT: what was left first, then what was removed
    task_refs: tuple[str, ...] = ()  # refs at corral's own names that were removed: put them back
    error: str | None = None  # why the sweep could not finish

    @property
    def removed(self) -> int:
        return self.locks + self.refs + self.symrefs + self.broken

    @property
    def clean(self) -> bool:
        return not (self.removed or self.left or self.error)

    def to_json(self) -> dict[str, Any]:
        return {
            "locks": self.locks,
            "refs": self.refs,
            "symrefs": self.symrefs,
            "broken": self.broken,
            "left": self.left,
            "items": [i.to_json() for i in self.items],
            "task_refs": list(self.task_refs),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StrayReport:
        def count(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

        items = data.get("items")
        task_refs = data.get("task_refs")
        error = data.get("error")
        return cls(
            count("locks"),
            count("refs"),
            count("symrefs"),
            count("broken"),
            count("left"),
            tuple(Found.from_json(i) for i in items if isinstance(i, dict)) if isinstance(items, list) else (),
            tuple(r for r in task_refs if isinstance(r, str)) if isinstance(task_refs, list) else (),
            error if isinstance(error, str) else None,
        )


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def summary(report: StrayReport | Mapping[str, Any]) -> str | None:
    """The one line ``show`` gives a turn after which strays were found; None when there were none."""
    r = report if isinstance(report, StrayReport) else StrayReport.from_json(report)
    if r.clean:
        return None
    parts = [
        _plural(r.refs, "ref", "refs") if r.refs else "",
        _plural(r.symrefs, "symbolic ref", "symbolic refs") if r.symrefs else "",
        _plural(r.broken, "unreadable ref file", "unreadable ref files") if r.broken else "",
        _plural(r.locks, "lock file", "lock files") if r.locks else "",
    ]
    said = [p for p in parts if p]
    line = ""
    if said:
        names = [i.name for i in r.items if i.removed][:3]
        more = f", {names[0]}" + (" …" if r.removed > 1 else "") if names else ""
        line = f"corral removed {', '.join(said)} left in the repository's refs (not corral's{more})."
    left = [i for i in r.items if not i.removed]
    if r.left:
        first = f": {left[0].name} ({left[0].why})" if left else ""
        line += f" {_plural(r.left, 'stray was', 'strays were')} left{first}."
    if r.error:
        line += f" The sweep stopped: {r.error}."
    return line.strip()
