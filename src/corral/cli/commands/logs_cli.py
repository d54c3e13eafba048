"""``logs``: a turn's harness output — stdout and stderr in order, by attempt — readable, verbatim or
as JSON Lines, optionally followed into the turn an auto-resume starts next.

The readable text and the JSON Lines are described in docs/logs.md. Every readable line is
escaped by the app (an agent's escape sequences show as ``\\x1b``); ``--raw`` is the one
verbatim surface.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from corral.cli.app import App
from corral.cli.options import json_option, pass_app
from corral.cli.render import local_time
from corral.domain.clock import rfc3339
from corral.domain.records import Task
from corral.domain.substate import retry_summary
from corral.engine.api import AttemptStart, Line, TurnFacts, TurnLog, log_facts, log_text, queries
from corral.engine.api import logs as turn_logs
from corral.errors import UsageError

#: How often a follower looks for more output, and asks whether the turn still runs when there is none.
POLL_SECONDS = 0.2
#: Stderr lines are marked so, in the readable view.
ERR_MARK = "err│ "


def _read_lines(path: Path, follow: bool, still_running: Callable[[], bool]) -> Iterator[bytes]:
    with path.open("rb") as fh:
        pending = b""
        while True:
            chunk = fh.read(1 << 16)
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line + b"\n" for line in lines)
                continue
            if not follow or not still_running():
                if pending:
                    yield pending
                return
            time.sleep(POLL_SECONDS)


def _attempt_end(a: log_facts.AttemptFacts) -> str:
    """``attempt 1: exit 1, transient_overload``: how one attempt ended, for the footer."""
    parts = []
    if a.exit_code is not None:
        parts.append(f"exit {a.exit_code}")
    if a.signal is not None:
        parts.append(f"signal {a.signal}")
    parts.append(a.failure_class or a.outcome)
    return f"attempt {a.number}: {', '.join(parts)}"


class Follower:
    """Prints one task's log turns: pieces as they come, a header per turn and attempt, a footer."""

    def __init__(self, app: App, task: Task) -> None:
        self.app = app
        self.project = app.project
        self.task = task
        self.harness = log_text.harness_of(self.project, task)
        self.unknown: list[int] = []  # attempts whose header came before their end was recorded
        self.numbers: dict[int, int] = {}  # each turn's exchange number, by sequence: what a person reads

    def exchange(self, seq: int | None) -> int | None:
        """The exchange number of the turn ``seq`` (read again for a turn begun since)."""
        if seq is None:
            return None
        if seq not in self.numbers:
            self.numbers = turn_logs.exchange_numbers(self.project, self.task)
        return self.numbers.get(seq)

    # -- the turn's state ------------------------------------------------------------------
    def running(self, seq: int) -> bool:
        queries.turn_running(self.project, self.task.id)  # settles: an ended turn is recorded, maybe resumed
        now = turn_logs.current(self.project, self.task.id)
        return now.running and now.sequence == seq

    # -- what is printed -------------------------------------------------------------------
    def turn_header(self, facts: TurnFacts) -> None:
        kind = facts.kind or "turn"
        started = f" · started {local_time(facts.started_at)}" if facts.started_at else ""
        number = self.exchange(facts.sequence)
        self.app.event(
            {
                "event": "turn",
                "turn": facts.sequence,
                "exchange": number,
                "kind": facts.kind,
                "started_at": rfc3339(facts.started_at),
            },
            f"══ turn {number or facts.sequence} · {kind}{started}",
        )

    def attempt_header(self, seq: int, start: AttemptStart, facts: TurnFacts) -> None:
        known = facts.attempts.get(start.number)
        parts = [f"── attempt {start.number}"]
        if start.at is not None:
            parts.append(f"started {local_time(start.at)}")
        doc: dict[str, Any] = {
            "event": "attempt",
            "turn": seq,
            "attempt": start.number,
            "started_at": rfc3339(start.at),
            "outcome": None,
            "exit_code": None,
            "signal": None,
            "failure_class": None,
        }
        if known is None:
            self.unknown.append(start.number)
        else:
            doc.update(
                outcome=known.outcome,
                exit_code=known.exit_code,
                signal=known.signal,
                failure_class=known.failure_class,
            )
            if known.exit_code is not None:
                parts.append(f"exit {known.exit_code}")
            if known.signal is not None:
                parts.append(f"signal {known.signal}")
            parts.append(known.failure_class or known.outcome)
        self.app.event(doc, " · ".join(parts))

    def line(self, seq: int, line: Line) -> None:
        doc = {
            "event": "line",
            "turn": seq,
            "attempt": line.attempt,
            "stream": line.stream,
            "at": rfc3339(line.at),
            "text": log_text.exact(line),
        }
        if self.app.json:
            self.app.event(doc)
            return
        mark = ERR_MARK if line.stream == "stderr" else ""
        for text in log_text.readable(self.harness, line):
            self.app.event(doc, f"{mark}{text}")

    def retry(self, seq: int, retry: Any) -> None:
        delay = retry.next_delay_ms / 1000
        self.app.event(
            {
                "event": "retry",
                "turn": seq,
                "attempt": retry.attempt,
                "failure_class": retry.failure_class,
                "reason": retry.reason,
                "next_delay_ms": retry.next_delay_ms,
            },
            f"── retrying: {retry_summary(retry.attempt, retry.failure_class, retry.reason)} · next in {delay:g} s",
        )

    def footer(self, facts: TurnFacts, running: bool, next_turn: int | None) -> None:
        kind = facts.answer_kind
        outcome = None if kind is None else kind if kind in ("stopped", "error") else "completed"
        doc: dict[str, Any] = {
            "event": "end",
            "turn": facts.sequence,
            "exchange": self.exchange(facts.sequence),
            "running": running,
            "answer": facts.answer,
            "outcome": outcome,
            "reason": None,
            "status": None,
            "next_turn": next_turn,
            "next_exchange": self.exchange(next_turn),
            "attempts": [
                {
                    "attempt": a.number,
                    "outcome": a.outcome,
                    "exit_code": a.exit_code,
                    "signal": a.signal,
                    "failure_class": a.failure_class,
                }
                for a in facts.attempts.values()
            ],
        }
        said = self.exchange(facts.sequence) or facts.sequence
        if running:
            text = f"── turn {said} is still running; corral logs -f {self.task.ref} follows it"
            self.app.event(doc, text)
            return
        shown = queries.task_doc(self.project, self.task.id)
        answer = next((t for t in shown["turns"] if t["sequence"] == facts.answer), None)
        reason = answer.get("reason") if answer else None
        status = shown["task"]["status"]
        doc.update(reason=reason, status=status)
        how = outcome or "not recorded yet"
        text = f"── turn {said} ended: {how}"
        if reason:
            text += f" — {reason}"
        ends = [_attempt_end(facts.attempts[n]) for n in self.unknown if n in facts.attempts]
        if ends:  # what the headers printed while following could not say yet
            text += f" ({'; '.join(ends)})"
        self.unknown = []
        text += f" · {self.task.ref} is {status}"
        if next_turn is not None:
            text += f" · auto-resumed as turn {self.exchange(next_turn) or next_turn}"
        self.app.event(doc, text)

    # -- the loop --------------------------------------------------------------------------
    def show(self, seq: int, follow: bool) -> None:
        while True:
            facts = log_facts.turn_facts(self.project, self.task, seq)
            self.turn_header(facts)
            log = TurnLog(self.project.paths.turn_dir(self.task.id, seq))
            running = self.one_turn(seq, log, facts, follow)
            facts = log_facts.turn_facts(self.project, self.task, seq)
            now = turn_logs.current(self.project, self.task.id)
            resumed = (
                now.sequence
                if follow
                and not running
                and now.sequence is not None
                and now.sequence > seq
                and now.kind == "auto-resume"
                else None
            )
            self.footer(facts, running, resumed)
            if resumed is None:
                return
            seq = resumed

    def one_turn(self, seq: int, log: TurnLog, facts: TurnFacts, follow: bool) -> bool:
        """Print the turn's pieces; following, until it ends. True when it still runs (not following)."""
        announced = 0
        while True:
            pieces = log.poll()
            self.pieces(seq, pieces, facts)
            if not follow:
                running = self.running(seq)
                if not running:
                    self.pieces(seq, log.finish(), facts)
                return running
            if pieces:
                continue
            retry = log_facts.live_retry(self.project, self.task)
            if retry is not None and retry.attempt > announced:
                announced = retry.attempt
                self.retry(seq, retry)
            if not self.running(seq):
                self.pieces(seq, log.finish(), facts)
                return False
            time.sleep(POLL_SECONDS)

    def pieces(self, seq: int, pieces: list[AttemptStart | Line], facts: TurnFacts) -> None:
        for piece in pieces:
            if isinstance(piece, AttemptStart):
                self.attempt_header(seq, piece, facts)
            else:
                self.line(seq, piece)


@click.command(
    epilog="""\b
Examples:
  corral logs fix-login              the latest turn, readable
  corral logs -f fix-login           follow the running turn (and the one an auto-resume starts)
  corral logs fix-login --turn 3 --raw
  corral logs fix-login --json       JSON Lines: turn, attempt, line, retry and end events

\b
The readable view interleaves stderr (marked "err│") with stdout in the order the agent
wrote them, with a header per attempt, and escapes control characters and escape
sequences (an ESC shows as \\x1b). See docs/logs.md.
"""
)
@click.argument("task")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the turn ends, into an auto-resumed turn.")
@click.option("--turn", type=int, metavar="N", help="The turn's number, as show prints it (default: the latest).")
@click.option(
    "--raw",
    is_flag=True,
    help="The verbatim stdout, byte for byte: the one output corral does not escape, so an agent's "
    "escape sequences reach your terminal.",
)
@json_option
@pass_app
def logs(app: App, task: str, follow: bool, turn: int | None, raw: bool) -> None:
    """The harness output of a turn."""
    app.streaming = True
    if raw and app.json:
        raise UsageError("--raw and --json do not go together.", hint="--raw writes the bytes; --json the text.")
    project = app.project
    found = queries.find_task(project, task)
    seq = turn_logs.pick_turn(project, found, turn, follow=follow)
    if raw:
        follower = Follower(app, found)
        path = project.paths.output_log(found.id, seq)
        while not path.exists() and follow and follower.running(seq):  # the turn's first attempt is starting
            time.sleep(POLL_SECONDS)
        if not path.exists():
            return
        for line in _read_lines(path, follow, lambda: follower.running(seq)):
            app.verbatim(line)
        return
    Follower(app, found).show(seq, follow)
