"""The supervisor's incident observer: it scans the turn's output log into the session's journal.

While an attempt runs, every few seconds; after each attempt, with what corral itself saw of it
(a watchdog kill, an exit by a signal corral did not send, a harness that could not start);
and once more when the turn ends, when a partial last record is an incomplete observation. The cursor
moves on only with what the journal took; after the turn the reconciler reads on from it
(:func:`catch_up`), so events a failing write still held are written then, not lost.
Every summary is masked for the turn's secrets before it is written. Bookkeeping never breaks
the turn it observes: a failure here is reported on stderr (the supervisor's log) and the turn
goes on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from corral.adapters.harness import make_harness
from corral.domain.clock import rfc3339
from corral.domain.collector import Gap
from corral.domain.failures import FailureClass
from corral.domain.incidents import Category, supervision_failure
from corral.domain.redact import redact
from corral.engine.paths import OUTPUT_LOG
from corral.engine.runtime.attempts import AttemptRun
from corral.engine.runtime.heartbeat import now
from corral.engine.runtime.journal import Journal, stamp
from corral.engine.runtime.journal_scan import Cursors, Facts, commit, scan
from corral.engine.runtime.protocol import Command, ErrorKind, Receipt
from corral.errors import UsageError


class TurnObserver:
    def __init__(
        self,
        journal_dir: Path,
        log_dir: Path,
        harness: Facts,
        cwd: str,
        sequence: int,
        secrets: list[str],
        *,
        exchange: int | None = None,
    ) -> None:
        self.journal = Journal(journal_dir)
        self.cursors = Cursors(journal_dir)
        self.cursors.collector.mask = lambda text: redact(text, secrets)
        self.log = log_dir / OUTPUT_LOG
        self.harness = harness
        self.cwd = cwd
        self.evidence_of = f"turns/{sequence}/{OUTPUT_LOG}"
        self.sequence = sequence
        self.said = exchange or sequence  # the turn's number in words: as show numbers it (its exchange)
        self.secrets = secrets

    def scan(self, *, final: bool = False, extra: list[dict[str, Any]] | None = None) -> None:
        try:
            at = rfc3339(now())
            events = scan(
                self.log, self.harness, self.cwd, self.cursors, at=at, final=final, evidence_of=self.evidence_of
            )
            events += stamp(extra or [])  # what corral saw, by what it says: a lost turn recorded twice is once
            for event in events:
                if isinstance(event.get("summary"), str):
                    event["summary"] = redact(event["summary"], self.secrets)
            # The cursor moves on only with what the journal took (written into it with its events):
            # events a refused write still holds are found again from the log by whoever scans next
            # (the reconciler, :func:`catch_up`), and the journal takes each once.
            commit(self.journal, self.cursors, events, final=final)
        except Exception as exc:  # never the turn's failure: said where the supervisor's log is read
            print(f"corral: the failure journal could not be updated: {type(exc).__name__}: {exc}", file=sys.stderr)

    def attempt(self, run: AttemptRun) -> None:
        """After an attempt: its log, and what corral saw of it.

        Each cause is one incident of the session, its count the times it happened (``supervision:watchdog``,
        ``exit:signal-9``, ``exit:status-1``), never a row per attempt or per turn: a hang killed eight
        times is one incident ×8. A non-zero exit is one only when the attempt was not a model's
        failure the harness named (those are the model call's incident, recovered by its next answer).
        """
        at = rfc3339(now())
        key = f"{self.sequence}.{run.number}"
        where = f"attempt {run.number} of turn {self.said}"
        seen: list[dict[str, Any]] = []
        if run.spawn_error:
            seen.append(supervision_failure(f"spawn:{key}", Category.SUPERVISION, run.spawn_error, at))
        if run.watchdog:
            summary = f"the no-progress watchdog killed the agent (last: {where})"
            seen.append(supervision_failure("watchdog", Category.SUPERVISION, summary, at))
        elif run.signal is not None and not run.we_signalled:
            summary = f"the agent was killed by signal {run.signal} (last: {where})"
            seen.append(supervision_failure(f"signal-{run.signal}", Category.EXIT, summary, at))
        elif exited_unexplained(run):
            summary = f"the agent exited with status {run.exit_code} (last: {where})"
            seen.append(supervision_failure(f"status-{run.exit_code}", Category.EXIT, summary, at))
        gap = unread_gap(run, self.sequence, self.said)
        if gap is not None:
            seen += self.cursors.collector.fold(gap, at)
        self.scan(extra=seen)

    def end(self, receipt: Receipt) -> None:
        """The turn's last scan, with how it ended when that is a cause of its own: a crash loop (one
        incident of the session, counted per turn it ended)."""
        extra: list[dict[str, Any]] = []
        error = receipt.error
        if error is not None and error.kind is ErrorKind.CRASH_LOOP:
            summary = f"{error.reason} (last: turn {self.said})"
            extra.append(supervision_failure("crash-loop", Category.SUPERVISION, summary, rfc3339(now())))
        self.scan(final=True, extra=extra)


def exited_unexplained(run: AttemptRun) -> bool:
    """A non-zero exit corral did not cause, of an attempt no harness explained as a model's or a
    configuration's failure (its verdict unclassified): the child's exit is the failure."""
    verdict = run.verdict
    if run.stopped or run.watchdog or run.we_signalled or run.spawn_error or run.exit_code in (None, 0):
        return False
    return verdict is None or (not verdict.succeeded and verdict.failure_class in (None, FailureClass.UNKNOWN))


def unread_gap(run: AttemptRun, sequence: int, said: int | None = None) -> Gap | None:
    """The lines of an attempt's stream its harness could not read (nested too deep, too large, a broken
    object: ``unparseable`` events), as one observation gap; None when it read every line. The lines
    stay in the log as text; the turn went on without them."""
    unread = [event.text or "unreadable" for event in run.events if event.kind == "unparseable"]
    if not unread:
        return None
    count = f"at least {len(unread)}" if len(run.events) == run.events.maxlen else str(len(unread))
    why = "; ".join(dict.fromkeys(unread))
    return Gap(
        f"unread:{sequence}.{run.number}",
        f"attempt {run.number} of turn {said or sequence}: {count} line(s) of the harness's stream could not be read "
        f"({why}); they stay in its log as text",
    )


def _after(command: Command, secrets: list[str]) -> TurnObserver | None:
    """The observer the reconciler runs once a turn is over; None with no journal, or for a harness this
    corral does not know (the supervisor refused to start it: it left no log to read)."""
    if not command.journal_dir:
        return None
    try:
        harness = make_harness(command.harness, command.harness_settings.as_mapping())
    except UsageError:
        return None
    return TurnObserver(
        Path(command.journal_dir),
        Path(command.log_dir),
        harness,
        command.worktree,
        command.sequence,
        secrets,
        exchange=command.exchange,
    )


def catch_up(command: Command, secrets: list[str]) -> None:
    """A recorded turn's log read to its end, by the reconciler (its only writer now): what its supervisor
    saw but the journal refused to take (storage failing as the turn ended) is scanned again from where
    the journal's cursor stands. Nothing when the supervisor's last scan was written."""
    observer = _after(command, secrets)
    if observer is not None:
        observer.scan(final=True)


def observe_lost(command: Command, reason: str, secrets: list[str]) -> None:
    """A lost turn's last observation, by the reconciler (its only writer now): the rest of its log,
    read to the end, and the loss itself — a supervision failure, which needs someone."""
    observer = _after(command, secrets)
    if observer is None:
        return
    summary = f"turn {command.exchange or command.sequence} was lost: {reason}"
    lost = supervision_failure("lost", Category.SUPERVISION, summary, rfc3339(now()))
    observer.scan(final=True, extra=[lost])
