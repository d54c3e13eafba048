"""The board every live view renders (``watch``, the dashboard): every unfinished task of one
project or of every project under ``CORRAL_HOME``, grouped by what it needs from the person.

A board is ``list``'s rows (the projection's ``list_rows``: the same status, substate, reason,
``needs`` and incident badge) with what a person watching wants beside each working one: the
running turn's last output line, its progress line and its live retry state, from the
supervisor's files (``read/live.py``). The last :data:`FINISHED` finished tasks come apart, newest
first, so a board of ten thousand tasks stays the size of what is still going on. Text fields are
the agent's own, not yet made safe: the surface escapes them for its medium.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from corral.domain.clock import parse_time, rfc3339
from corral.domain.needs import ORDER, TITLES
from corral.domain.status import TERMINAL, Status
from corral.engine import identity_files
from corral.engine.project import Project
from corral.engine.read import projection
from corral.engine.resolve import task_config
from corral.engine.runtime.liveness import LiveOf, Observed, live_facts

#: How many finished tasks a board shows (the rest are a ``list --all`` away).
FINISHED = 100

#: The live fields a board row carries beside ``list``'s for a working task (``LiveTurn.as_view``).
LIVE_FIELDS = (
    *("last_line", "progress", "phase", "attempt", "attempts", "attempts_at_most"),
    *("retry_class", "retry_reason", "retry_by", "next_delay_s", "schedule", "schedule_at"),
)


class Board(Struct, frozen=True):
    at: str  # when the board was read
    projects: list[dict[str, Any]]  # {"name", "path"} of each project shown
    groups: list[dict[str, Any]]  # {"needs", "title", "rows"} in ORDER, every group present
    finished: list[dict[str, Any]]  # the latest finished rows, newest first
    problems: list[str]  # projects that could not be read, and what settling could not reconcile

    def to_json(self) -> dict[str, Any]:
        """The board as --json and the dashboard give it: its fields by name."""
        doc: dict[str, Any] = msgspec.to_builtins(self)
        return doc

    def rows(self) -> list[dict[str, Any]]:
        """Every unfinished row, group by group."""
        return [r for g in self.groups for r in g["rows"]]


class Opened(Struct, frozen=True):
    projects: list[tuple[str, Project]]  # (name, project) of each that opened
    problems: list[str]  # those that did not, one line each


def home_projects(home: Path) -> Opened:
    """Every project kept under ``home`` whose checkout still opens (the others, one line each)."""
    opened: list[tuple[str, Project]] = []
    problems: list[str] = []
    for state in identity_files.project_states(home):
        kept = identity_files.read_record(state)
        path = kept.path if kept is not None else None
        if path is None or not Path(path).is_dir():
            continue  # a project whose checkout is gone: nothing to show, nothing to act on
        try:
            project = Project.open(path)
        except Exception as exc:  # a project that cannot be opened is named, the others shown
            problems.append(f"{path}: {getattr(exc, 'message', None) or f'{type(exc).__name__}: {exc}'}")
            continue
        opened.append((Path(path).name, project))
    return Opened(opened, problems)


def board(
    projects: Sequence[tuple[str, Project]],
    *,
    only: Iterable[str] | None = None,
    finished: int = FINISHED,
    settle: bool = True,
    live: LiveOf | None = None,
) -> Board:
    """The board of ``projects`` ((name, project) pairs). ``only``: these refs alone (ids or refs,
    in any project). ``settle``: one reconcile pass per project first (False inside the daemon,
    whose ticks keep its projects settled). ``live``: where live facts come from (default: read now)."""
    wanted = set(only) if only is not None else None
    by_need: dict[str, list[dict[str, Any]]] = {n.value: [] for n in ORDER}
    done: list[tuple[str, dict[str, Any]]] = []
    problems: list[str] = []
    shown: list[dict[str, Any]] = []
    now: datetime | None = None
    for name, project in projects:
        observed: Observed = {}
        if settle:
            from corral.engine.operations.refresh import settle as settle_project  # reconciling: only when asked

            problems.extend(f"{name}: {p}" for p in settle_project(project, observed))
        facts = live or (lambda t, p=project, o=observed: live_facts(p, t, o))  # type: ignore[misc]
        now = project.clock()
        with project.store.read() as tx:
            open_ = tx.tasks(sorted(frozenset(Status) - TERMINAL))
            ended = tx.recent_tasks(sorted(TERMINAL), finished) if finished > 0 else []
            if wanted is not None:
                open_ = [t for t in open_ if t.ref in wanted or t.id in wanted]
                ended = [t for t in ended if t.ref in wanted or t.id in wanted]

            def threshold(t: Any, p: Project = project) -> int:
                return int(task_config(p.config, t)["breaker_threshold"])

            rows = projection.list_rows(tx, open_, facts, breaker_threshold=threshold)
            ended_rows = projection.list_rows(tx, ended, facts, breaker_threshold=threshold)
        working = {t.id: t for t in open_ if t.status is Status.WORKING}
        for row in rows:
            _place(row, name, project, now)
            task = working.get(row["id"])
            row["live"] = _live(project, task, facts(task)) if task is not None else None
            by_need.setdefault(row["needs"] or "backlog", []).append(row)
        for row in ended_rows:
            _place(row, name, project, now)
            row["live"] = None
            done.append((row["updated_at"] or "", row))
        shown.append({"name": name, "path": str(project.paths.repo)})
    done.sort(key=lambda pair: pair[0], reverse=True)
    groups = [{"needs": n.value, "title": TITLES[n], "rows": by_need[n.value]} for n in ORDER]
    return Board(rfc3339(now) or "", shown, groups, [r for _, r in done[:finished]], problems)


def activity(projects: Sequence[tuple[str, Project]], *, hours: int = 24) -> dict[str, Any]:
    """How many tasks were in each status in each hour of the last ``hours`` (the board's chart): a task counts
    once in every status it was in during an hour, however often it went in and out of it, and a task resting in
    a status through the hour counts there too; a finished task counts only in the hour it finished (it stays
    finished, which is no activity). ``{"since", "hours": [start of each hour], "counts": {status: [tasks per
    hour]}, "tasks": {status: tasks in it at some time of the whole span}}``."""
    if not projects:
        return {"since": None, "hours": [], "counts": {}, "tasks": {}}
    now = projects[0][1].clock()
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    since = end - timedelta(hours=hours)
    seen: dict[str, list[set[str]]] = {s.value: [set() for _ in range(hours)] for s in Status}

    def slot(at: datetime) -> int:
        return min(hours - 1, max(0, int((at - since).total_seconds() // 3600)))

    def held(task_id: str, status: Status, start: datetime, until: datetime) -> None:
        last = slot(start) if status in TERMINAL else slot(until)  # finished: the hour it finished in, only
        for h in range(slot(start), last + 1):
            seen[status.value][h].add(task_id)

    for _name, project in projects:
        with project.store.read() as tx:
            changes = tx.changes_since(since)
            open_ = tx.tasks(sorted(frozenset(Status) - TERMINAL))
        moved: dict[str, list[Any]] = {}
        for c in changes:
            moved.setdefault(c.task_id, []).append(c)
        for task in open_:
            if task.id not in moved:  # in this status through the whole span
                held(task.id, task.status, since, now)
        for task_id, steps in moved.items():
            current, at = steps[0].from_status, since
            for c in steps:
                if current is not None:
                    held(task_id, current, at, c.at)
                current, at = c.to_status, c.at
            if current is not None:
                held(task_id, current, at, now)
    counts = {k: [len(h) for h in v] for k, v in seen.items() if any(v)}
    return {
        "since": rfc3339(since),
        "hours": [rfc3339(since + timedelta(hours=h)) for h in range(hours)],
        "counts": counts,
        "tasks": {k: len(set().union(*seen[k])) for k in counts},
    }


def _place(row: dict[str, Any], name: str, project: Project, now: datetime) -> None:
    """The project a row belongs to, and its age (seconds since it last changed)."""
    row["project"] = name
    row["project_path"] = str(project.paths.repo)
    updated = row.get("updated_at")
    at = parse_time(updated) if isinstance(updated, str) else None
    row["age_s"] = round(max(0.0, (now - at).total_seconds()), 1) if at is not None else None


def _live(project: Project, task: Any, facts: Any = None) -> dict[str, Any]:
    from corral.engine.read.live import live_turn  # the logs' reader: only a working task needs it

    doc = live_turn(project, task, facts).as_view()
    return {k: doc.get(k) for k in LIVE_FIELDS}
