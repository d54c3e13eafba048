"""The running turn of a task as a person watching it sees it: phase, attempt, elapsed time, last line.

Read from its supervisor's files (``status.json``, ``command.json``) and the turn's logs, for
``wait``'s live line and ``show`` of a working task. Text fields are the agent's own, not
yet made safe for a terminal: the surface escapes them.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from msgspec import Struct

from corral.domain.clock import parse_time
from corral.domain.records import Task
from corral.domain.status import Status
from corral.domain.substate import Live, substate, waited
from corral.engine.paths import OUTPUT_LOG, STDERR_LOG
from corral.engine.project import Project
from corral.engine.read.interleave import Line
from corral.engine.read.log_text import harness_of, readable
from corral.engine.runtime import protocol as proto

#: How much of the end of a turn's output is read for its last line.
TAIL_BYTES = 8192


class LiveTurn(Struct, frozen=True):
    """What a person watching a wait sees of the running turn, from its supervisor's files."""

    status: str
    phase: str | None = None  # the supervisor's phase: command, sync, work, retrying, check, response
    kind: str | None = None
    attempt: int = 0
    attempts: int | None = None  # the budget of attempts of the class being retried, when it is counted
    elapsed: float | None = None  # seconds since the turn was launched
    last_line: str | None = None
    retry_attempt: int | None = None  # the attempt that failed and is being retried
    retry_class: str | None = None
    retry_reason: str | None = None
    retry_by: str | None = None  # who retries: "corral" (its ladder) or "harness" (the agent CLI itself)
    next_delay: float | None = None  # seconds the supervisor waits before the next attempt
    #: corral's own schedule while it waits between attempts, in words every surface shows as they are:
    #: when the next attempt starts and when the ladder stops (:func:`schedule_words`).
    schedule: str | None = None
    schedule_at: str | None = None  # the same without "(in 5s)": what changes only when the schedule does
    attempts_at_most: bool = False  # ``attempts`` is the most that fit in a budget of time, not a count
    #: The substate every surface shows (``domain/substate``), with the agent's waits and
    #: progress line folded in where the agent is the active thing.
    substate: str | None = None
    waits: tuple[tuple[str, float], ...] = ()  # (ref, seconds waited) of each subtask waited on
    progress: str | None = None  # the agent's own progress line

    def as_view(self) -> dict[str, object]:
        """The running turn as --json gives it: a view (seconds rounded and named ``_s``, waits as objects)."""
        return {
            "status": self.status,
            "phase": self.phase,
            "kind": self.kind,
            "attempt": self.attempt,
            "attempts": self.attempts,
            "elapsed_s": round(self.elapsed, 1) if self.elapsed is not None else None,
            "last_line": self.last_line,
            "retry_attempt": self.retry_attempt,
            "retry_class": self.retry_class,
            "retry_reason": self.retry_reason,
            "retry_by": self.retry_by,
            "next_delay_s": self.next_delay,
            "schedule": self.schedule,
            "schedule_at": self.schedule_at,
            "attempts_at_most": self.attempts_at_most,
            "substate": self.substate,
            "waits": [{"ref": ref, "waited_s": round(seconds, 1)} for ref, seconds in self.waits],
            "progress": self.progress,
        }


def live_turn(project: Project, task: Task, facts: Live | None = None) -> LiveTurn:
    """The running turn of ``task`` as its supervisor reports it (``status.json``, ``command.json``, its logs).

    ``facts``: the live facts the caller's reconcile pass judged already — for a turn on another
    host's worker, what that worker shipped, judged by its heartbeat (docs/workers.md); its
    command and its last line then come from the turn's files shipped here.
    """
    if task.status is not Status.WORKING:
        return LiveTurn(task.status.value)
    protocol_dir = project.paths.protocol_dir(task.id)
    status = proto.read_record(protocol_dir / proto.STATUS, proto.SupervisorStatus)
    command = proto.read_record(protocol_dir / proto.COMMAND, proto.Command) or _shipped_command(project, task)
    elapsed = None
    if command is not None:
        launched = parse_time(command.created_at)
        if launched is not None:
            elapsed = max(0.0, (project.clock() - launched).total_seconds())
    retry = status.retry if status is not None else None
    attempts = None
    if retry is not None and retry.attempts is not None:
        attempts = retry.attempts  # the bound the supervisor's policy applies
    elif retry is not None and retry.at_most is not None:
        attempts = retry.at_most  # the most that fit in the class's budget of time
    elif retry is not None and command is not None:
        if retry.failure_class == "unknown":
            attempts = command.budgets.unknown_attempts
        elif retry.failure_class == "transient_unreachable":
            attempts = command.budgets.unreachable_attempts
    from corral.engine.runtime.liveness import live_facts, live_of, with_marks
    from corral.engine.runtime.processes import supervisor_alive

    if status is not None:
        facts = with_marks(project, task.id, live_of(status, supervisor_alive(status)))
    elif facts is None:  # no status file here: a turn another host holds reads as that host shipped it
        facts = live_facts(project, task) or live_of(None, False)
    return LiveTurn(
        substate=substate(task.status, facts),
        waits=tuple((w.ref, w.seconds) for w in facts.waits),
        progress=facts.progress,
        status=task.status.value,
        phase=status.phase if status is not None else facts.phase,
        kind=(status.kind if status is not None else facts.kind) or (command.kind if command is not None else None),
        attempt=(retry.attempt + 1 if retry is not None else status.attempt) if status is not None else 0,
        attempts=attempts,
        elapsed=elapsed,
        attempts_at_most=retry is not None and retry.attempts is None and retry.at_most is not None,
        # The turn's own directory here (a shipped command names the worker's). While corral waits
        # between attempts the last line is the ended attempt's (a harness's own retry line, say,
        # whose "due in 0.6 s" corral did not keep): the retry's reason and schedule tell it instead.
        last_line=(
            _last_line(project, task, project.paths.turn_dir(task.id, command.sequence))
            if command and not (retry is not None and retry.by == "corral")
            else None
        ),
        retry_attempt=retry.attempt if retry is not None else facts.retry_attempt,
        retry_class=retry.failure_class if retry is not None else facts.retry_class,
        retry_reason=retry.reason if retry is not None else facts.retry_reason,
        retry_by=retry.by if retry is not None else None,
        next_delay=retry.next_delay_ms / 1000 if retry is not None else None,
        schedule=schedule_words(retry, project.clock()) if retry is not None else None,
        schedule_at=schedule_words(retry, None) if retry is not None else None,
    )


def schedule_words(retry: proto.RetryState, now: datetime | None) -> str | None:
    """corral's schedule as one phrase: "next attempt at 05:01:07 (in 5s); corral stops retrying by
    06:00:02 (in 59m55s)", or, for a class bounded by a count, the ladder's waits left in all; with
    no ``now``, the moments alone (a line that changes only when the schedule does)."""
    if retry.by != "corral":
        return None
    next_at = _moment(retry.next_at)
    if next_at is None:  # a supervisor from before the schedule was kept
        return f"next in {retry.next_delay_ms / 1000:g} s"
    words = f"next attempt at {_clock(next_at, now)}"
    gives_up_by = _moment(retry.gives_up_by)
    if gives_up_by is not None:
        words += f"; corral stops retrying by {_clock(gives_up_by, now)}"
    elif retry.waits_left_ms is not None:
        words += f"; the ladder's waits left: {waited(retry.waits_left_ms / 1000)} in all"
    return words


def _moment(value: str | None) -> datetime | None:
    """A moment of the live state, or None when it is missing or no time a reader can use."""
    try:
        at = parse_time(value)
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


def _clock(at: datetime, now: datetime | None) -> str:
    """A moment as the local time of day (``05:01:07``), and how far off it is from ``now`` (``(in 5s)``)."""
    said = at.astimezone().strftime("%H:%M:%S")
    return said if now is None else f"{said} (in {waited((at - now).total_seconds())})"


def _shipped_command(project: Project, task: Task) -> proto.Command | None:
    """The latest turn's ``command.json`` among its files (those a worker elsewhere shipped here)."""
    try:
        numbers = [int(d.name) for d in project.paths.turns_dir(task.id).iterdir() if d.name.isdigit()]
    except OSError:
        return None
    for seq in sorted(numbers, reverse=True):
        found = proto.read_record(project.paths.turn_dir(task.id, seq) / proto.COMMAND, proto.Command)
        if found is not None:
            return found
    return None


def _last_line(project: Project, task: Task, log_dir: Path) -> str | None:
    """The newest line of the turn's output, as ``corral logs`` reads it (stderr as it came)."""
    newest: tuple[float, str, bytes] | None = None
    for stream, name in (("stdout", OUTPUT_LOG), ("stderr", STDERR_LOG)):
        path = log_dir / name
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(0, size - TAIL_BYTES))
                data = fh.read(TAIL_BYTES)
                mtime = os.fstat(fh.fileno()).st_mtime
        except OSError:
            continue
        lines = [ln for ln in data.splitlines() if ln.strip()]
        if lines and (newest is None or mtime >= newest[0]):
            newest = (mtime, stream, lines[-1])
    if newest is None:
        return None
    _, stream, data = newest
    try:
        shown = list(readable(harness_of(project, task), Line(stream, data, None, None)))
    except Exception:  # a harness that cannot be made (unknown, misconfigured) still has output to show
        shown = [data.decode("utf-8", "replace")]
    return shown[-1] if shown else None
