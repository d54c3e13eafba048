"""Reading running turns' supervisors from outside: what ``status.json`` says and whether they live.

A turn another host holds (a worker's claim, or that host's own local turn, on the shared store) has no
``status.json`` here: what is known of it is what its host shipped (:func:`away`), never this host's view
of a pid it cannot see.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from corral.domain.agent_tools import PROGRESS_CAP, WAIT_TARGET_CAP
from corral.domain.clock import parse_time
from corral.domain.failures import RETRY_REASON_BYTES
from corral.domain.records import Task
from corral.domain.refs import is_plain_id
from corral.domain.sanitize import one_line
from corral.domain.status import Status
from corral.domain.substate import QUEUED, UNREPORTED, Live, Waiting
from corral.engine.paths import TASKS_DIR, plain
from corral.engine.project import Project
from corral.engine.runtime import marked

if TYPE_CHECKING:
    from corral.domain.team import Lease, Worker
    from corral.engine.runtime.protocol import SupervisorStatus


#: What one reconcile pass saw of each working task's supervisor (task id → its live facts).
#: A read that follows the pass in the same command (``list`` after settling) shows what the
#: pass judged, instead of reading every ``status.json`` and probing every pid a second time.
Observed = dict[str, Live]


def live_facts(project: Project, task: Task, observed: Observed | None = None) -> Live | None:
    """What the task's supervisor reports right now; None for a task that is not working.

    One read of ``status.json`` through the protocol's reader (the one the reconciler
    uses, so ``list`` and a reconcile pass agree on what a supervisor said) and one
    liveness probe of its pid — or, when this command's reconcile pass already judged the
    task, what it saw (``observed``). A missing or unusable status file is a supervisor not
    (yet) seen alive. Where the agent is the active thing, the agent's tool-call markers (its
    waits on subtasks, its progress line) are read too (:func:`with_marks`).
    """
    if task.status is not Status.WORKING or not is_plain_id(task.id):  # an id no corral made has no supervisor here
        return None
    if observed is not None and task.id in observed:
        return with_marks(project, task.id, observed[task.id])
    from corral.engine.runtime import protocol as proto  # only a working task has a supervisor to read
    from corral.engine.runtime.processes import supervisor_alive

    status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    alive = status is not None and supervisor_alive(status)
    if not alive:
        # A reader with no pass behind it (the daemon's endpoints): a turn another host holds is read as
        # that host shipped it, never as this host's missing supervisor.
        held = project.placement.read_elsewhere(project, task.id)
        if held is not None:
            return held
    return with_marks(project, task.id, live_of(status, alive))


#: How recent the live facts a host shipped of its own local turn must be to be shown as they are. Past it
#: the turn is working there as far as anyone here knows, and reads ``unreported``: nobody there (no daemon,
#: no corral command) has looked at it lately. Never ``not-alive``: only that host can tell.
REPORT_FRESH = timedelta(seconds=60)

#: What the store keeps of a turn's shipped live facts (``Tx.live``): its command, the document, when.
Shipped = tuple[str, dict[str, Any], datetime]


def away(lease: Lease, shipped: Shipped | None, workers: dict[str, Worker], now: datetime) -> Live:
    """What this host knows of a turn another host holds: queued; a worker's, with what it shipped, alive
    while its heartbeat holds the lease; a host's own local turn, with what it shipped lately, else unreported."""
    from corral.domain.team import lease_lost

    if not lease.held:
        return Live(alive=True, phase=QUEUED)
    command_id, doc, at = shipped if shipped is not None else (None, {}, None)
    live = doc.get("live") if command_id == lease.command_id and isinstance(doc, dict) else None
    if lease.claimed:
        alive = not lease_lost(lease, workers, now)
        return live_from_json(live, alive=alive) if isinstance(live, dict) else Live(alive=alive)
    if isinstance(live, dict) and at is not None and now - at <= REPORT_FRESH:
        return live_from_json(live, alive=True)
    return Live(alive=True, phase=UNREPORTED)


def protocol_path(project: Project, task_id: str) -> str:
    """``ProjectPaths.protocol_dir`` as a string: the sweeps and ``list`` ask it of every running turn,
    and a ``Path`` costs more to build than the look-ups made with it."""
    return f"{project.paths.root}{os.sep}{TASKS_DIR}{os.sep}{plain(task_id, 'task id')}{os.sep}protocol"


def marks_matter(live: Live) -> bool:
    """Whether the substate can show the agent's markers: alive, and the agent is the active thing
    (no harness phase, no retry, no usage-limit wait outranks them)."""
    return live.alive and live.phase in (None, "work") and live.retry_class is None


def with_marks(project: Project, task_id: str, live: Live) -> Live:
    """``live`` with the agent's waits (seconds counted now) and progress line, where they can show.

    Read only when they matter (:func:`marks_matter`) and the task has an entry among the
    marked (``runtime/marked``: one listing for a whole list), so a list of thousands of working
    tasks pays no look-up per task when no agent reports anything.
    """
    if not marks_matter(live) or task_id not in marked.tasks(project.paths):
        return live  # the common case (one listing for a whole list), without loading the markers' reader
    from corral.engine.runtime import progress_line, wait_markers  # only a live agent phase has markers to read

    protocol_dir = project.paths.protocol_dir(task_id)
    found = wait_markers.active_waits(protocol_dir)
    line = progress_line.progress(protocol_dir)
    if not found and line is None:
        return live
    now = project.clock()
    waits = tuple(Waiting(w.target, max(0.0, (now - w.since).total_seconds())) for w in found)
    return replace(live, waits=waits, progress=line)


def live_to_json(live: Live) -> dict[str, object]:
    """``live`` as a document (what a worker ships for reviewers on other hosts: ``shared_store.shipping``)."""
    return {
        "alive": live.alive,
        "phase": live.phase,
        "kind": live.kind,
        "retry_attempt": live.retry_attempt,
        "retry_class": live.retry_class,
        "retry_reason": live.retry_reason,
        "limit_resets_at": live.limit_resets_at,
        "limit_behind_first": live.limit_behind_first,
        "waits": [{"ref": w.ref, "seconds": w.seconds} for w in live.waits],
        "progress": live.progress,
    }


#: The most of a shipped name kept (a phase, a turn's kind, a failure class, a reset time): corral's own are
#: a word or two, so a longer one is another host's invention, cut to fit a table cell.
NAME_CAP = 64
#: The most waits of a shipped turn read: an agent waits on a handful of subtasks at once.
WAITS_CAP = 100
#: The longest wait, and the highest attempt, a shipped turn is believed to have: past them (or not a finite
#: number at all) another host wrote something no turn of corral's reports, and it reads as absent.
SECONDS_CAP = 366 * 24 * 3600.0
ATTEMPT_CAP = 1_000_000


def live_from_json(doc: dict[str, Any], *, alive: bool) -> Live:
    """A shipped :func:`live_to_json` document, judged ``alive`` by the reader (its worker's heartbeat).

    Another host wrote it (docs/workers.md), so it is read as untrusted: a field of the wrong type, a number
    that is not finite or past its bound, or a time that is no time reads as absent; text is made one line
    and cut to its cap (the progress line to the one an agent's own is cut to); unknown fields are ignored.
    """

    def name(key: str) -> str | None:
        value = doc.get(key)
        return one_line(value, NAME_CAP) if isinstance(value, str) else None

    reason = doc.get("retry_reason")
    progress = doc.get("progress")
    waits = doc.get("waits")
    return Live(
        alive=alive,
        phase=name("phase"),
        kind=name("kind"),
        retry_attempt=_whole(doc.get("retry_attempt"), ATTEMPT_CAP),
        retry_class=name("retry_class"),
        retry_reason=reason[:RETRY_REASON_BYTES] if isinstance(reason, str) else None,
        limit_resets_at=_time(doc.get("limit_resets_at")),
        limit_behind_first=doc.get("limit_behind_first") is True,
        waits=tuple(
            Waiting(one_line(w["ref"], WAIT_TARGET_CAP), _seconds(w.get("seconds")))
            for w in (waits[:WAITS_CAP] if isinstance(waits, list) else [])
            if isinstance(w, dict) and isinstance(w.get("ref"), str)
        ),
        progress=(one_line(progress, PROGRESS_CAP) or None) if isinstance(progress, str) else None,
    )


def _whole(value: object, cap: int) -> int | None:
    """A shipped count: a whole number from 0 to ``cap``, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= cap else None


def _seconds(value: object) -> float:
    """A shipped wait's seconds: a finite number from 0 to :data:`SECONDS_CAP`, else none counted (0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    if isinstance(value, int) and not 0 <= value <= SECONDS_CAP:
        return 0.0  # before float(): an integer of 400 digits overflows it
    seconds = float(value)
    return seconds if math.isfinite(seconds) and 0 <= seconds <= SECONDS_CAP else 0.0


def _time(value: object) -> str | None:
    """A shipped time (RFC 3339, with its zone), else None; one a reader can show in any zone."""
    if not isinstance(value, str) or len(value) > NAME_CAP:
        return None
    try:
        at = parse_time(value)
    except ValueError:
        return None
    # 1 < year < 9999: shown in the reader's zone, a time at either end of the calendar overflows it
    return value if at is not None and at.tzinfo is not None and 1 < at.year < 9999 else None


#: What a reader asks for a task's live facts (``live_facts`` bound to a project, or a cache of it).
LiveOf = Callable[[Task], Live | None]


class LiveCache:
    """Live facts of running turns, each kept for ``ttl`` seconds, for a long-lived reader.

    The daemon's MCP endpoint answers many calls a second, and every row of a page and every
    child of a task has a supervisor whose ``status.json`` and pid would be read again on each;
    a read a fraction of a second old says the same. A task that is not working has no live
    facts and costs nothing. Shared by the endpoint's worker threads (a dict's get and set hold).
    """

    def __init__(self, ttl: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[float, Live | None]] = {}

    def facts(self, project: Project, task: Task) -> Live | None:
        if task.status is not Status.WORKING:
            return None
        key, now = (str(project.paths.root), task.id), self.clock()
        hit = self._seen.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._seen) > 50_000:
            self._seen.clear()
        found = live_facts(project, task)
        self._seen[key] = (now + self.ttl, found)
        return found


def live_of(status: SupervisorStatus | None, alive: bool) -> Live:
    """The live facts a supervisor's status file gives, judged ``alive`` (or not) by the caller."""
    if status is None:
        return Live(alive=False)
    retry, waiting = status.retry, status.waiting
    return Live(
        alive=alive,  # frozen, gone or its pid reused: not alive
        phase=status.phase,
        kind=status.kind,
        retry_attempt=retry.attempt if retry else None,
        retry_class=retry.failure_class if retry else None,
        retry_reason=retry.reason if retry else None,
        limit_resets_at=waiting.resets_at if waiting else None,
        limit_behind_first=waiting.behind_first if waiting else False,
    )


def supervisor_pids(project: Project) -> set[int]:
    """The live supervisors of the project's turns: those the store registered (on this host: another
    host's pid means nothing here), and those the working tasks' ``status.json`` name (a supervisor may
    be running before it is registered)."""
    from corral.adapters.process import pid_alive
    from corral.engine.runtime import protocol as proto

    pids: set[int] = set()
    me = project.placement.owner(project)
    with project.store.read() as tx:
        working = tx.tasks([Status.WORKING])
        pids.update(r.pid for r in tx.processes() if r.kind == "supervisor" and not r.elsewhere(me))
    for task in working:
        status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
        if status is not None and status.pid > 1:
            pids.add(status.pid)
    return {p for p in pids if pid_alive(p)}
