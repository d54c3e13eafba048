"""A turn's harness output: which turns have it, how its two streams interleave, how it reads.

A turn's directory holds ``output.log`` (stdout, verbatim), ``stderr.log`` and, written by
the supervisor's copy, ``output.index``: the order of the two streams and where each attempt
began (:class:`~corral.engine.runtime.output.OutputIndex`). :class:`TurnLog` reads the three
incrementally, so ``logs`` and ``logs -f`` show stderr interleaved with stdout in the order the
agent wrote them, with each attempt's start; a turn from before the index shows its stdout
alone. What each attempt ended with (exit, class) comes from the turn's record in the store,
:func:`turn_facts`. Lines are bytes here; the surface decodes and escapes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from corral.adapters.harness import make_harness
from corral.adapters.harness.base import Event, Harness, parsed
from corral.domain.actors import Role
from corral.domain.bounded_json import Decoded, decode
from corral.domain.record import field, record
from corral.domain.records import Task
from corral.domain.status import Status
from corral.engine.config import harness_settings
from corral.engine.paths import OUTPUT_INDEX, OUTPUT_LOG, STDERR_LOG
from corral.engine.project import Project
from corral.engine.runtime import protocol as proto
from corral.engine.runtime import shipping
from corral.errors import NotFoundError

#: What one read takes of a log at most; a follower reads the rest on its next poll.
READ_BYTES = 1 << 20
#: A line longer than this is shown in pieces of this size (the log keeps it whole).
MAX_LINE_BYTES = 1 << 20
#: An index line longer than this is not one corral wrote: it is skipped.
MAX_INDEX_LINE = 4096

STREAMS = {"o": ("stdout", OUTPUT_LOG), "e": ("stderr", STDERR_LOG)}


# -- which turns ----------------------------------------------------------------------------


def _has_output(directory: Path) -> bool:
    for name in (OUTPUT_LOG, STDERR_LOG):
        try:
            if (directory / name).stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


def log_turns(project: Project, task: Task) -> list[int]:
    """Sequences of the turns that wrote output (stdout or stderr), oldest first."""
    base = project.paths.turns_dir(task.id)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit() and _has_output(p))


@record
class Current:
    """The task's latest command: the sequence of the human turn that launched it, its kind, and
    whether it still runs (the task is working on it)."""

    sequence: int | None
    kind: str | None
    running: bool


def current(project: Project, task_id: str) -> Current:
    with project.store.read() as tx:
        task = tx.get_task(task_id)
        turn = tx.current_command(task_id)
    working = task is not None and task.status is Status.WORKING
    if turn is None:
        return Current(None, None, False)
    return Current(turn.sequence, turn.kind, working)


def pick_turn(project: Project, task: Task, turn: int | None, *, follow: bool = False) -> int:
    """The log turn to show: ``turn`` (an agent turn's number names the turn that launched it), or
    the running turn, or the latest with output."""
    shipping.bring(project, task.id)  # a turn that ran on another host's worker: its files, from the store
    available = log_turns(project, task)
    if turn is None:
        now = current(project, task.id)
        if now.running and now.sequence is not None and (follow or now.sequence in available):
            return now.sequence
        if not available:
            raise NotFoundError(
                f"Task {task.ref} has no turn output yet.", code="no-logs", hint=f"Start it: corral start {task.ref}"
            )
        return available[-1]
    seq = turn
    if seq not in available:
        with project.store.read() as tx:
            found = next((t for t in tx.turns(task.id) if t.sequence == turn), None)
        if found is not None and found.role is Role.AGENT and isinstance(found.details.get("log_turn"), int):
            seq = found.details["log_turn"]
    if seq not in available:
        listed = ", ".join(map(str, available)) if available else "none yet"
        raise NotFoundError(
            f"Turn {turn} of {task.ref} has no output.", code="no-logs", hint=f"Turns with output: {listed}"
        )
    return seq


def log_path(project: Project, task: Task, turn: int | None) -> Path:
    """The verbatim stdout of the turn :func:`pick_turn` chooses."""
    return project.paths.output_log(task.id, pick_turn(project, task, turn))


# -- what the store knows of a turn ---------------------------------------------------------


@record
class AttemptFacts:
    number: int
    started_at: datetime | None
    outcome: str
    failure_class: str | None
    exit_code: int | None
    signal: int | None


@record
class TurnFacts:
    """A log turn as recorded: the human turn that launched it, and the agent turn that answered."""

    sequence: int
    kind: str | None  # the launching turn's kind: start, unblock, resume, auto-resume, ask …
    started_at: datetime | None
    answer: int | None  # the agent turn's sequence, once the turn is recorded
    answer_kind: str | None  # its kind: the command's kind when it completed, stopped, error
    attempts: dict[int, AttemptFacts] = field(default_factory=dict)


def turn_facts(project: Project, task: Task, seq: int) -> TurnFacts:
    with project.store.read() as tx:
        human = next((t for t in tx.turns(task.id) if t.sequence == seq and t.role is Role.HUMAN), None)
        agent = tx.turn_by_command(human.command_id, Role.AGENT) if human and human.command_id else None
    if human is None:
        return TurnFacts(seq, None, None, None, None)
    attempts: dict[int, AttemptFacts] = {}
    for a in agent.attempts if agent else ():
        f = a.failure
        exit_code = f.exit_code if f else (0 if a.outcome.value == "succeeded" else None)
        attempts[a.number] = AttemptFacts(
            a.number, a.started_at, a.outcome.value, a.failure_class, exit_code, f.signal if f else None
        )
    return TurnFacts(
        seq,
        human.kind,
        human.started_at,
        agent.sequence if agent else None,
        agent.kind if agent else None,
        attempts,
    )


def live_retry(project: Project, task: Task) -> proto.RetryState | None:
    """The attempt the running turn's supervisor is waiting to retry (its ``status.json``), if any."""
    status = proto.read_record(project.paths.protocol_dir(task.id) / proto.STATUS, proto.SupervisorStatus)
    return status.retry if status is not None else None


# -- the streams, in order ------------------------------------------------------------------


@record
class Line:
    """One line of one stream (without its newline), with the time its run began."""

    stream: str  # stdout | stderr
    data: bytes
    at: datetime | None
    attempt: int | None


@record
class AttemptStart:
    number: int
    at: datetime | None


Piece = Line | AttemptStart


@record
class _Record:
    kind: str  # a | o | e
    pos: dict[str, int]
    at: datetime | None


def _parse_record(raw: bytes) -> _Record | None:
    decoded = decode(raw, max_bytes=MAX_INDEX_LINE)
    doc = decoded.value if isinstance(decoded, Decoded) else None
    if not isinstance(doc, dict) or doc.get("k") not in ("a", "o", "e"):
        return None
    o, e, t = doc.get("o"), doc.get("e"), doc.get("t")
    if not (isinstance(o, int) and isinstance(e, int) and o >= 0 and e >= 0):
        return None
    at = datetime.fromtimestamp(t, UTC) if isinstance(t, int | float) and 0 <= t < 1e11 else None
    return _Record(doc["k"], {"o": o, "e": e}, at)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class TurnLog:
    """Reads one turn's logs as they grow: each :meth:`poll` returns the pieces that became whole."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.records: list[_Record] = []
        self._index_at = 0  # bytes of the index read
        self._index_rest = b""  # an index line not yet ended
        self._j = 0  # the record whose run is being read
        self._begun = -1  # the last attempt record announced
        self._attempts = 0
        self._cursor = {"o": 0, "e": 0}
        self._pending = {"o": b"", "e": b""}
        self._pending_at: dict[str, datetime | None] = {"o": None, "e": None}

    def _read_index(self) -> None:
        path = self.directory / OUTPUT_INDEX
        try:
            with path.open("rb") as fh:
                fh.seek(self._index_at)
                data = fh.read(READ_BYTES)
        except OSError:
            return
        self._index_at += len(data)
        *lines, self._index_rest = (self._index_rest + data).split(b"\n")
        if len(self._index_rest) > MAX_INDEX_LINE:
            self._index_rest = b""
        for raw in lines:
            record = _parse_record(raw) if len(raw) <= MAX_INDEX_LINE else None
            if record is not None:
                self.records.append(record)

    def _read(self, stream: str, start: int, end: int) -> bytes:
        try:
            with (self.directory / STREAMS[stream][1]).open("rb") as fh:
                fh.seek(start)
                return fh.read(max(0, min(end - start, READ_BYTES)))
        except OSError:
            return b""

    def _lines(self, stream: str, data: bytes, at: datetime | None) -> Iterator[Line]:
        if not self._pending[stream]:
            self._pending_at[stream] = at
        buf = self._pending[stream] + data
        *whole, rest = buf.split(b"\n")
        for raw in whole:
            yield Line(STREAMS[stream][0], raw, self._pending_at[stream], self._attempt_no())
            self._pending_at[stream] = at
        while len(rest) > MAX_LINE_BYTES:
            yield Line(STREAMS[stream][0], rest[:MAX_LINE_BYTES], self._pending_at[stream], self._attempt_no())
            rest = rest[MAX_LINE_BYTES:]
        self._pending[stream] = rest
        if not rest:
            self._pending_at[stream] = None

    def _attempt_no(self) -> int | None:
        return self._attempts or None

    def _flush(self) -> Iterator[Line]:
        for stream in ("o", "e"):
            rest = self._pending[stream]
            if rest:
                yield Line(STREAMS[stream][0], rest, self._pending_at[stream], self._attempt_no())
            self._pending[stream] = b""
            self._pending_at[stream] = None

    def poll(self) -> list[Piece]:
        """What was written since the last poll, in order (a line still open waits for its end)."""
        sizes = {s: _size(self.directory / STREAMS[s][1]) for s in STREAMS}  # before the index: see below
        self._read_index()
        out: list[Piece] = []
        if not self.records:  # a turn from before the index: its stdout alone
            while self._cursor["o"] < sizes["o"]:
                data = self._read("o", self._cursor["o"], sizes["o"])
                if not data:
                    break
                self._cursor["o"] += len(data)
                out.extend(self._lines("o", data, None))
            return out
        # The sizes were taken first: every byte they cover was announced by a record already in
        # the index, so no byte is given to a run that came before its own record.
        while self._j < len(self.records):
            record = self.records[self._j]
            nxt = self.records[self._j + 1] if self._j + 1 < len(self.records) else None
            if record.kind == "a":
                if self._begun < self._j:
                    out.extend(self._flush())
                    self._attempts += 1
                    self._begun = self._j
                    out.append(AttemptStart(self._attempts, record.at))
                if nxt is None:
                    break
                self._j += 1
                continue
            s = record.kind
            end = min(nxt.pos[s] if nxt is not None else sizes[s], sizes[s])
            while self._cursor[s] < end:
                data = self._read(s, self._cursor[s], end)
                if not data:
                    break
                self._cursor[s] += len(data)
                out.extend(self._lines(s, data, record.at))
            if nxt is None or self._cursor[s] < nxt.pos[s]:
                break
            self._j += 1
        return out

    def finish(self) -> list[Piece]:
        """The turn is over: what :meth:`poll` still finds, then every line left open."""
        out = self.poll()
        out.extend(self._flush())
        return out


# -- readable -------------------------------------------------------------------------------


#: A harness's retry line is shown as one line of at most this many characters.
RETRY_LINE_CHARS = 300


def render_event(event: Event) -> str | None:
    match event.kind:
        case "session":
            return f"· session {event.session_id}"
        case "text":
            return f"› {event.text}"
        case "tool_start":
            return f"⚙ {event.name}"
        case "tool_end":
            mark = "✗" if event.is_error else "✓"
            detail = (event.text or "").strip().splitlines()
            return f"  {mark} {detail[0][:200] if detail else ''}".rstrip()
        case "model_error":
            return f"! {event.text}"
        case "retry":  # one line, whatever the harness put in it
            return f"↻ harness retry: {' '.join((event.text or '').split())[:RETRY_LINE_CHARS]}".rstrip()
        case "result":
            return f"= {'error: ' if event.is_error else ''}{event.text or ''}".rstrip()
    return None


def harness_of(project: Project, task: Task) -> Harness:
    return make_harness(task.harness or project.config["harness"], harness_settings(project.config))


def readable(harness: Harness, line: Line) -> Iterator[str]:
    """A line as a person reads it: stdout through the harness's parser, stderr as it came.

    Text, not yet made safe for a terminal: the surface escapes it.
    """
    if line.stream == "stderr":
        yield _decode(line.data)
        return
    events = parsed(harness, line.data)
    if line.data.strip() and all(event.kind == "unparseable" for event in events):
        yield _decode(line.data)  # text, or a line no bounded reader takes whole: shown as it came
        return
    for event in events:
        text = render_event(event)
        if text is not None:
            yield text


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape").removesuffix("\r")


def exact(line: Line) -> str:
    """The line's exact text: a byte that is not UTF-8 is kept as a lone surrogate (``surrogateescape``)."""
    return line.data.decode("utf-8", "surrogateescape")
