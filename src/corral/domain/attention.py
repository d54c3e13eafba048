"""When a person is told about incidents (docs/incidents.md#notices): the one rule, with time given.

- **While a turn runs** a single tool error wakes nobody: the agent owns it. After a grace
  period (:data:`GRACE_SECONDS` from the moment an incident first needed action), a non-tool
  failure, an operation that failed three times and an incident marked open are told, each once.
  Incomplete observations wait for the turn's end: nobody can act on them mid-turn.
- **When the turn ends** (or is found lost) every incident still open is told once: those needing
  action in full, incomplete observations in full, unclassified tool errors as a count; those a
  running notice already told are counted, not repeated.

A notice is identified by what it tells (``key``), so whoever delivers it records that key after
handing it over, and nobody delivers it twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from msgspec import Struct

from corral.domain.clock import parse_time
from corral.domain.incidents import CLOSED, FailureState, Incident, Label

GRACE_SECONDS = 60.0


class Notice(Struct, frozen=True):
    kind: str  # attention (while running) | completion | lost
    key: str  # what a delivery receipt records
    incidents: tuple[Incident, ...]  # told in full
    unclassified: int = 0  # tool errors not told one by one
    already_told: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "incidents": [i.to_json() for i in self.incidents],
            "unclassified": self.unclassified,
            "already_told": self.already_told,
        }

    def line(self) -> str:
        """One line for a person: what needs them, then what is only counted."""
        told = "; ".join(f"{i.label.value}: {i.summary}" for i in self.incidents)
        rest = []
        if self.unclassified:
            rest.append(f"{self.unclassified} unclassified tool error{'s' if self.unclassified != 1 else ''}")
        if self.already_told:
            rest.append(f"{self.already_told} told before")
        tail = f" ({', '.join(rest)})" if rest else ""
        head = {"attention": "needs attention", "completion": "turn ended with", "lost": "turn lost with"}[self.kind]
        return f"{head}: {told or 'no incident needing action'}{tail}"


def due(
    state: FailureState,
    told: set[str],
    now: datetime,
    *,
    ended: str | None = None,
    grace: float = GRACE_SECONDS,
) -> Notice | None:
    """The notice to deliver now, or None. ``told``: the incident ids and notice keys already delivered;
    ``ended``: ``completion:<turn>`` or ``lost:<turn>`` once the turn is over (None while it runs)."""
    if ended is None:
        ready = [i for i in state.by_label(Label.ACTION_REQUIRED) if i.id not in told and _past_grace(i, now, grace)]
        if not ready:
            return None
        earlier = sum(1 for i in state.incidents.values() if i.id in told and i.label not in CLOSED)
        return Notice("attention", "attention:" + ",".join(sorted(i.id for i in ready)), tuple(ready), 0, earlier)
    if ended in told:
        return None
    open_ = [i for i in state.incidents.values() if i.label not in CLOSED and i.label is not Label.EXPECTED]
    full = tuple(i for i in open_ if i.label in (Label.ACTION_REQUIRED, Label.INCOMPLETE) and i.id not in told)
    unclassified = sum(1 for i in open_ if i.label is Label.UNCLASSIFIED and i.id not in told)
    already = sum(1 for i in open_ if i.id in told)
    if not full and not unclassified:
        return None
    kind = ended.split(":", 1)[0]
    return Notice(kind, ended, full, unclassified, already)


def _past_grace(incident: Incident, now: datetime, grace: float) -> bool:
    since = parse_time(incident.actionable_at or incident.first_at)
    return since is None or now - since >= timedelta(seconds=grace)
