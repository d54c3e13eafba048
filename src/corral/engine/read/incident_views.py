"""Reading a task's incidents: its session's reduced journal, and a scan of any log (docs/incidents.md).

Every surface (``show``, ``list``, ``corral failures``, their ``--json``) reads the one reduced
state from here; none re-derives a label.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from corral.adapters.harness import make_harness
from corral.domain.incidents import (
    CLOSED,
    CORRECTNESS_NOTE,
    EXCERPT_BYTES,
    NEEDS_ACTION,
    FailureState,
    Incident,
    Label,
    cursor_index,
    dismissal_event,
    fit_page,
    page_lines,
    reduce,
    summary_line,
    tool_text,
)
from corral.domain.records import PERMISSION_RELEASED, Task
from corral.engine.runtime.journal import Journal
from corral.errors import NotFoundError, StoreError, UsageError

if TYPE_CHECKING:  # a log's scan (``failures --log``) opens no project: it starts without the store
    from corral.engine.project import Project


def session_state(project: Project, task: Task, session_id: str | None = None) -> FailureState | None:
    """The reduced journal of the task's session (its current one by default); None with no session."""
    sid = session_id or task.session_id
    if sid is None:
        return None
    where = project.paths.journal_dir(task.id, sid)
    if not where.exists():
        return None  # nothing was ever observed there (a turn from before the journal): not "no failures"
    state = Journal(where).read()
    state.base = str(project.paths.task_dir(task.id))  # what its evidence (turns/N/output.log) is under
    return state


def dismiss(project: Project, given: str, incident_id: str, reason: str) -> Incident:
    """A person closes one incident of the task's current session: a ``dismissed`` disposition with their
    words, appended to the journal (kept in history; the cause failing again opens a new incident)."""
    from corral.domain.clock import new_id, rfc3339
    from corral.engine.resolve import resolve_task

    why = reason.strip()
    if not why:
        raise UsageError(
            "Say why you dismiss it: the reason is kept with the incident.",
            hint=f"corral failures {shlex.quote(given)} --dismiss {shlex.quote(incident_id)} -m 'why'",
        )
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    state = session_state(project, task)
    incident = state.incidents.get(state.aliases.get(incident_id, incident_id)) if state is not None else None
    if state is None or task.session_id is None or incident is None or incident.label in CLOSED:
        shown = ", ".join(i.id for i in state.needs_action) if state is not None else ""
        raise NotFoundError(
            f"{task.ref} has no open incident '{incident_id}'.",
            hint=f"Its open incidents: {shown}." if shown else f"corral failures {task.ref} --history lists them all.",
        )
    event = dismissal_event(f"dismiss:{new_id()}", incident.id, why, rfc3339(project.clock()))
    journal = Journal(project.paths.journal_dir(task.id, task.session_id))
    if not journal.append([event]):
        raise StoreError(
            f"The dismissal of '{incident.id}' could not be written: {journal.write_error}",
            hint=f"Check the disk, then: corral failures {task.ref} --dismiss {shlex.quote(incident.id)} "
            f"-m {shlex.quote(why)}",
        )
    return journal.read().incidents.get(incident.id, incident)


def log_failures(
    path: str,
    harness: str,
    *,
    history: bool = False,
    raw: bool = False,
    cursor: str | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """The page of incidents a log outside any task holds, scanned from its start (``corral failures --log``)."""
    state = scan_log(Path(path), harness)
    doc = {**summary(state), "rows": rows(state, history=history, raw=raw)}
    return page(doc, cursor=cursor, max_bytes=max_bytes)


def scan_log(path: Path, harness: str, cwd: str = "") -> FailureState:
    """A log outside any task scanned from its start into a fresh state (``corral failures --log``)."""
    if not os.path.lexists(path):
        raise NotFoundError(f"There is no log at {path}.", hint="Give --log the path of an output log that exists.")
    from corral.engine.runtime.journal_scan import Cursors, scan  # a log's scan; a task's incidents are read

    facts = make_harness(harness, {})
    cursors = Cursors(None)
    events = scan(path, facts, cwd, cursors, final=True, evidence_of=path.name)
    return reduce(FailureState(base=str(path.absolute().parent)), events)


class Hold(Struct, frozen=True):
    """A permission blocker the task's agent reported: the task is held until a person confirms one retry.

    Agent-reported, with the remote outcome unknown: it proves no sandbox causation, no expired
    login, no denial. Derived from the session's incidents (an open incident with a
    ``permission_resource``), so an ask or an unrelated success never releases it; only
    ``corral unblock T --retry-blocked`` (which records the release) or the operation's own
    recovery does.
    """

    incident: str
    resource: str
    summary: str

    def as_view(self) -> dict[str, Any]:
        """The hold as --json gives it: a view (the resource named ``permission_resource``, the fixed provenance)."""
        return {
            "incident": self.incident,
            "permission_resource": self.resource,
            "summary": self.summary,
            "reported_by": "agent",
            "remote_outcome": "unknown",
        }

    def line(self) -> str:
        return (
            f"held: the agent reported that a permission ({self.resource}) blocked {self.summary} "
            "(agent-reported; the remote outcome is unknown)"
        )


def permission_hold(project: Project, task: Task) -> Hold | None:
    """The permission blocker holding ``task``, if one does (its current session's; not yet released)."""
    state = session_state(project, task)
    if state is None:
        return None
    released = task.metadata.get(PERMISSION_RELEASED)
    done = set(released) if isinstance(released, list) else set()
    for incident in state.incidents.values():
        if incident.permission_resource and incident.label is Label.ACTION_REQUIRED and incident.id not in done:
            return Hold(incident.id, incident.permission_resource, _blocked(incident))
    return None


def _blocked(incident: Incident) -> str:
    """What a hold says was blocked: the failed call, by its tool and its incident — never the tool's
    output (paths, a command line) nor the agent's words, which ``corral failures`` shows on request."""
    tool = incident.summary.split(" failed", 1)[0].split(" was not run", 1)[0].strip() or "tool"
    tool = tool if len(tool) <= 60 and " " not in tool else "tool"
    return f"a failed {tool} call ({incident.id})"


def rows(state: FailureState, *, history: bool = False, raw: bool = False) -> list[dict[str, Any]]:
    """The incidents to show: those needing action (all, with ``history``), compact unless ``raw``."""
    chosen = list(state.incidents.values()) if history else state.needs_action
    return [_row(i, raw, state.base) for i in sorted(chosen, key=_order)]


def _order(incident: Incident) -> tuple[int, str]:
    rank = 0 if incident.label in NEEDS_ACTION else 2 if incident.label in CLOSED else 1
    return rank, incident.first_at or ""


def _row(incident: Incident, raw: bool, base: str | None = None) -> dict[str, Any]:
    """A compact row (the excerpt capped, the evidence ``output.log#byte=N``), or a raw one: the whole
    excerpt and the evidence's absolute path (``--raw``)."""
    doc = incident.to_json()
    if not raw:
        doc["summary"] = _cap(tool_text(incident.summary), EXCERPT_BYTES)  # a journal's JSON result as text
        if incident.reason:
            doc["reason"] = _cap(incident.reason, EXCERPT_BYTES)
        if incident.evidence and "/" in incident.evidence:
            doc["evidence"] = incident.evidence.rsplit("/", 1)[-1]  # output.log#byte=N
    elif incident.evidence and base and not os.path.isabs(incident.evidence):
        doc["evidence"] = os.path.join(base, incident.evidence)
    return doc


def _cap(text: str, limit: int) -> str:
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "…"


def summary(state: FailureState | None) -> dict[str, Any]:
    """The one-line account and the counts every surface shows (``needs_action`` decides a badge)."""
    if state is None:
        return {"line": "No failures observed", "note": CORRECTNESS_NOTE, "needs_action": 0, "counts": {}}
    return {
        "line": summary_line(state),
        "note": CORRECTNESS_NOTE,
        "needs_action": len(state.needs_action),
        "counts": state.counts(),
    }


def page(
    doc: dict[str, Any],
    *,
    cursor: str | None = None,
    max_bytes: int | None = None,
    render: Callable[[Mapping[str, Any]], list[str]] = page_lines,
) -> dict[str, Any]:
    """``doc`` (a summary with its rows) cut to one page: from ``cursor`` on, whose text as ``render``
    prints it takes at most ``max_bytes`` (:func:`corral.domain.incidents.fit_page`: rows go before
    the notes, the correctness note is kept whole whenever it fits, a page never exceeds its budget).
    ``next_cursor`` names where the next page begins (None on the last).
    """
    return fit_page(doc, cursor_index(cursor, len(doc["rows"])), max_bytes, render)
