"""The read side every surface calls: settle the project when the present matters, then read the projection.

A surface (the CLI today; the MCP server and the dashboard later) never opens a store
transaction, reconciles or picks status sets itself: it asks here and renders what comes
back. Reads of "what is going on now" (``list``, ``show``, whether a turn still runs)
settle first (``refresh.settle``: one reconcile pass, then auto-resume), so a turn that
ended while nobody looked is seen as ended; reads right after an operation (the task it
just changed) do not need to. The short reads that need no settling are ``operations/lookups``.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from corral.domain.records import RESTORE_CONFLICT, Task
from corral.domain.status import ACTIVE, PAUSED, TERMINAL, Status
from corral.engine.project import Project
from corral.engine.read import projection
from corral.engine.resolve import resolve_task, task_config
from corral.engine.runtime.liveness import LiveOf, Observed, live_facts
from corral.errors import NotFoundError, RefusedError, UsageError
from corral.store import Tx

# What ``list`` shows for each choice; None: every task, finished ones included.
LISTS: dict[str | None, frozenset[Status] | None] = {
    None: frozenset(Status) - TERMINAL,
    "active": ACTIVE,
    "blocked": PAUSED,
    "all": None,
}

# The text view of a long history shows this many of the latest turns.
PAGE_TURNS = 50


def _settle(project: Project, observed: Observed | None = None) -> list[str]:
    # Imported here: reconciling pulls in the recovery room, which a read right after an
    # operation (create, edit, close) does not need.
    from corral.engine.operations.refresh import settle

    return settle(project, observed)


def _threshold(project: Project, task: Task) -> int:
    """The breaker threshold that holds for ``task``: its own, where it keeps one."""
    return int(task_config(project.config, task)["breaker_threshold"])


class Listing(Struct, frozen=True):
    rows: list[dict[str, Any]]  # projection rows, oldest task first
    problems: list[str]  # what settling could not reconcile (the reader is told; the read goes on)


def list_statuses(which: str) -> list[str]:
    """The statuses a ``list`` choice shows, in the lifecycle's order (for help text)."""
    wanted = LISTS[which] or frozenset(Status)
    return [s.value for s in Status if s in wanted]


def list_tasks(project: Project, which: str | None = None, *, settle: bool = True) -> Listing:
    """The rows of ``list``: unfinished tasks (None), ``active``, ``blocked`` or ``all``; settles first.

    ``settle=False`` is for a reader inside the daemon, whose own ticks keep the project settled.
    """
    if which not in LISTS:
        raise UsageError(f"There is no '{which}' list.", hint="Choose one of: active, blocked, all.")
    observed: Observed = {}
    problems = _settle(project, observed) if settle else []
    wanted = LISTS[which]
    with project.store.read() as tx:
        found = tx.tasks(sorted(wanted) if wanted is not None else None)
        rows = projection.list_rows(
            tx, found, lambda t: live_facts(project, t, observed), breaker_threshold=lambda t: _threshold(project, t)
        )
    return Listing(rows, problems)


class Page(Struct, frozen=True):
    rows: list[dict[str, Any]]  # one page of projection rows, oldest task first
    total: int  # rows of the whole list (those ``keep`` kept)
    next_offset: int | None  # where the next page starts; None after the last


def list_page(
    project: Project,
    which: str | None = None,
    *,
    offset: int = 0,
    limit: int = 50,
    subtree_of: str | None = None,
    settle: bool = True,
    live: LiveOf | None = None,
) -> Page:
    """One page of ``list``'s rows: only the page's rows are built. ``subtree_of``: only that task
    and its direct subtasks (what a task agent sees), read by the parent index, not the whole list.
    ``live``: as for :func:`show_task`."""
    if which not in LISTS:
        raise UsageError(f"There is no '{which}' list.", hint="Choose one of: active, blocked, all.")
    observed: Observed = {}
    if settle:
        _settle(project, observed)
    wanted = LISTS[which]
    with project.store.read() as tx:
        if subtree_of is None:
            found = tx.tasks(sorted(wanted) if wanted is not None else None)
        else:
            own = tx.get_task(subtree_of)
            family = ([own] if own is not None else []) + tx.children(subtree_of)
            found = [t for t in family if wanted is None or t.status in wanted]
        page = found[offset : offset + limit]
        rows = projection.list_rows(
            tx,
            page,
            live or (lambda t: live_facts(project, t, observed)),
            breaker_threshold=lambda t: _threshold(project, t),
        )
    end = offset + len(page)
    return Page(rows, len(found), end if end < len(found) else None)


class Shown(Struct, frozen=True):
    doc: dict[str, Any]  # projection.show: the ``show --json`` document (all of it unless paged)
    merges_into: str | None  # the branch the task merges into (a subtask: its parent's); None when it has none
    earlier_turns: int  # turns paged out of ``doc`` (0: every turn is there)
    problems: list[str]  # what settling could not reconcile


def show_task(
    project: Project, given: str, *, last_turns: int | None = None, settle: bool = True, live: LiveOf | None = None
) -> Shown:
    """One task's whole read model with its live facts, diagnostics resolved; settles first.

    With ``last_turns``, only that many of the latest turns are kept, and the status
    changes and comments from before the first kept turn are left out with them.
    ``settle=False``: as for :func:`list_tasks`. ``live``: where live facts come from (default: read
    now; the daemon's endpoint passes its short-lived ``LiveCache``), the task's and its children's.
    """
    from corral.engine import workspace  # what only one task's read needs: not loaded for ``list``
    from corral.engine.read import incident_views as incidents
    from corral.engine.recovery import destination

    observed: Observed = {}
    problems = _settle(project, observed) if settle else []
    earlier = 0
    with project.store.read() as tx:
        task = resolve_task(tx, given)
    if RESTORE_CONFLICT in task.metadata and destination.clear_resolved(project, [task]):
        pass  # the person restored their stash: the note goes, and show reads the task anew below
    with project.store.read() as tx:
        task = resolve_task(tx, task.id)
        facts = live or (lambda t: live_facts(project, t, observed))
        current = facts(task)
        threshold, where = _threshold(project, task), project.paths.diagnostics
        marks = _marks(project, task, tx, facts)
        if last_turns is None:
            doc = projection.show(tx, task, current, breaker_threshold=threshold, diagnostics=where, **marks)
        else:
            doc, earlier = projection.show_latest(
                tx, task, current, turns=last_turns, breaker_threshold=threshold, diagnostics=where, **marks
            )
        try:
            merges_into: str | None = workspace.target_branch(tx, task)
        except RefusedError:
            merges_into = None
    # A working task's running turn as a watcher sees it: how long it has run, its last line.
    doc["live"] = None
    if task.status is Status.WORKING:
        from corral.engine.read.live import live_turn  # the logs' reader: only a working task needs it

        doc["live"] = live_turn(project, task, current).as_view()
    state = incidents.session_state(project, task)
    doc["incidents"] = {**incidents.summary(state), "rows": incidents.rows(state) if state else []}
    hold = incidents.permission_hold(project, task)
    doc["permission_hold"] = hold.as_view() if hold is not None else None
    return Shown(doc, merges_into, earlier, problems)


def _marks(project: Project, task: Task, tx: Tx, live: LiveOf | None = None) -> dict[str, Any]:
    """What ``projection.show`` counts an agent's waited time and its children's substates from."""
    from corral.engine.runtime.wait_intervals import intervals  # the waits' file: only a show reads it

    return {"intervals": intervals(project, task.id, tx), "live_of": live or (lambda t: live_facts(project, t))}


class Failures(Struct, frozen=True):
    task: Task | None
    doc: dict[str, Any]  # summary (line, note, counts) and rows
    problems: list[str]


def failures(
    project: Project,
    given: str,
    *,
    history: bool = False,
    raw: bool = False,
    session: str | None = None,
    cursor: str | None = None,
    max_bytes: int | None = None,
) -> Failures:
    """A task's incidents (its current session's by default): those needing action, or every one; one page."""
    from corral.engine.read import incident_views as incidents  # the journal's reader: only the incident reads load it

    problems = _settle(project)
    with project.store.read() as tx:
        task = resolve_task(tx, given)
        known = [s.id for s in tx.sessions(task.id)]
    if session is not None and session not in known:
        raise NotFoundError(
            f"{task.ref} has no session '{session}'.",
            hint=f"Its sessions: {', '.join(known)}." if known else f"{task.ref} never started.",
        )
    state = incidents.session_state(project, task, session)
    rows = incidents.rows(state, history=history, raw=raw) if state else []
    doc = {**incidents.summary(state), "rows": rows, "session_id": session or task.session_id}
    return Failures(task, incidents.page(doc, cursor=cursor, max_bytes=max_bytes), problems)


def find_task(project: Project, given: str) -> Task:
    """The task a ref, an id or a unique prefix names (NotFoundError, AmbiguousTask otherwise)."""
    with project.store.read() as tx:
        return resolve_task(tx, given)


def task_view(project: Project, task: Task) -> projection.TaskView:
    """What surfaces show beside a task an operation just returned (its JSON, its next step)."""
    with project.store.read() as tx:
        return projection.view(tx, task, live_facts(project, task), breaker_threshold=_threshold(project, task))


def task_doc(project: Project, task: Task | str) -> dict[str, Any]:
    """The read model of a task that was just settled (``wait``) or is named (the demo); no settling."""
    with project.store.read() as tx:
        found = resolve_task(tx, task) if isinstance(task, str) else task
        return projection.show(
            tx,
            found,
            live_facts(project, found),
            breaker_threshold=_threshold(project, found),
            **_marks(project, found, tx),
        )


def turn_running(project: Project, task_id: str) -> bool:
    """Whether the task's turn still runs, once a reconcile pass has seen what ended (``logs -f``)."""
    _settle(project)
    with project.store.read() as tx:
        current = tx.get_task(task_id)
    return current is not None and current.status is Status.WORKING
