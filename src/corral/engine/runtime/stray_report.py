"""What the stray-ref sweep found after a turn (``runtime/stray_refs.sweep``), as it is stored and shown.

**What to do with the report.** Store it (``StrayReport.to_json``) with the turn; ``summary``
is the line ``show`` gives. ``task_refs`` names the refs at corral's own names that were removed
(a task's branch that was a symbolic ref or unreadable): the caller puts each back from the
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta, Struct

#: A count the report keeps: never negative (a stored count that is reads as 0).
Count = Annotated[int, Meta(ge=0)]
#: A stray's kind or name: never empty (a stored one that is, or is not a string, reads as "?").
Named = Annotated[str, Meta(min_length=1)]

S = TypeVar("S", bound=Struct)


def _tolerant(cls: type[S], data: Mapping[str, Any], repair: Mapping[str, Callable[[Any], Any]] | None = None) -> S:
    """``data`` decoded as ``cls`` by msgspec; where it is refused, each field on its own.

    Deliberately tolerant: the report is a note kept with a turn, and a stored one that was damaged or
    hand-edited still reads, a field that does not decode reading as its default (``repair`` first
    mends a field whose parts may be damaged one by one) rather than losing the whole report.
    """
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        pass
    kept: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name not in data:
            continue
        value = data[f.encode_name]
        if repair and f.name in repair:
            value = repair[f.name](value)
        try:
            msgspec.convert(value, f.type)
        except msgspec.ValidationError:
            continue
        kept[f.encode_name] = value
    return msgspec.convert(kept, cls)


class Found(Struct, frozen=True):
    """One stray: a lock file, a ref, a symbolic ref or an unreadable ref file, and what became of it."""

    kind: Named = "?"  # "lock" | "ref" | "symref" | "broken"
    name: Named = "?"  # the ref's name, or the lock's path in the git directory; escaped for display
    value: str | None = None  # a ref's object, a symbolic ref's target; None for a lock or an unreadable file
    removed: bool = False
    why: str | None = None  # why it was left

    def to_json(self) -> dict[str, Any]:
        """The stray as the report stores it: its fields, each by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Found:
        """A stored stray; tolerant of damage as :func:`_tolerant` says (a bad field reads as its default)."""
        return _tolerant(cls, data)


def _items(value: Any) -> Any:
    """A stored report's strays, each read on its own (one that is not an object is dropped)."""
    if not isinstance(value, list):
        return value
    return [Found.from_json(i).to_json() for i in value if isinstance(i, dict)]


def _names(value: Any) -> Any:
    """A stored report's task refs, those that are strings."""
    return [r for r in value if isinstance(r, str)] if isinstance(value, list) else value


class StrayReport(Struct, frozen=True):
    """What :func:`sweep` found: counts of what it removed and left, the first few of each, and any error."""

    locks: Count = 0  # lock files removed
    refs: Count = 0  # refs removed (plain refs corral did not make)
    symrefs: Count = 0  # symbolic refs removed
    broken: Count = 0  # unreadable loose ref files removed
    left: Count = 0  # strays found and left (each with a why)
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
        """The report as it is stored with the turn: its fields, each by name (the tuples as JSON's lists)."""
        doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StrayReport:
        """A stored report; tolerant of damage as :func:`_tolerant` says (a bad count reads as 0, a bad
        stray is dropped, a field of a stray that is bad reads as its default)."""
        return _tolerant(cls, data, {"items": _items, "task_refs": _names})


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
