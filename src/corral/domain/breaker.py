"""The circuit breaker: its rule, its counters and every event that moves them, in one place.

Auto-resume runs a crashed turn again by itself, but not forever
(docs/lifecycle.md#auto-resume-and-the-circuit-breaker). Two rules stop it, each a setting:

- ``breaker_threshold``: that many consecutive interruptions of a session, whatever their causes;
- ``breaker_same_cause`` (0: off): that many in a row with one cause (:func:`same_cause`), sooner.

The counters are the session's (``consecutive_interruptions``, ``auto_resumed``) and the run of one
cause kept in the task's metadata (``last_interruption``). :class:`Breaker` is the only code that
says how they change: each event — an interruption, a turn that ended well, a person's launch, an
auto-resume, a merge resolved by hand — takes the session's current :class:`Counters` and returns an
:class:`Update`, the fields to write (through the store's ``update_session``) and whether the breaker
has tripped. The engine writes exactly what it returns; tests/test_breaker_home.py fails when a
module outside the domain writes a counter itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import msgspec
from msgspec import Struct

from corral.domain.settings import default

if TYPE_CHECKING:
    from corral.domain.records import Session

#: Two interruptions further apart than this are not one cause repeating, even when they look alike.
SAME_CAUSE_WINDOW_SECONDS = 600.0


def breaker_tripped(consecutive: int, threshold: int) -> bool:
    """The circuit breaker: after ``threshold`` consecutive interruptions, no more auto-resume."""
    return consecutive >= threshold


class Interruption(Struct, frozen=True):
    """What the same-cause breaker compares between two interruptions of a task."""

    code: str  # the resting cause's code
    exit_code: int | None  # the agent's exit status, when it had one
    head: str | None  # the task branch's commit when it was interrupted
    at: float  # when, in seconds since the epoch

    def to_json(self) -> dict[str, object]:
        """The interruption as the session's counters keep it: its fields by name."""
        doc: dict[str, object] = msgspec.to_builtins(self)
        return doc

    @classmethod
    def from_json(cls, data: object) -> Interruption | None:
        """A kept interruption, decoded by msgspec; None when it is not one (not an object, no string
        ``code``, or an ``at`` that is not a number).

        Deliberately tolerant of the two facts it may lack: an ``exit_code`` that is not an integer or a
        ``head`` that is not a string (a hand-edited record) reads as None, so the breaker still counts it.
        """
        if not isinstance(data, dict):
            return None
        doc = {**data, "exit_code": _or_none(data.get("exit_code"), int), "head": _or_none(data.get("head"), str)}
        try:
            return msgspec.convert(doc, cls)
        except msgspec.ValidationError:
            return None


def _or_none(value: object, kind: type) -> object:
    """``value`` when msgspec takes it as ``kind``, else None: the explicit step of a tolerant read."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return None


def same_cause(before: Interruption, now: Interruption) -> bool:
    """One cause again: the same code and exit status, no new commit between them, within the window."""
    return (
        before.code == now.code
        and before.exit_code == now.exit_code
        and before.head == now.head
        and 0 <= now.at - before.at <= SAME_CAUSE_WINDOW_SECONDS
    )


def same_cause_run(before: Interruption | None, run: int, now: Interruption, *, in_a_row: bool) -> int:
    """How many interruptions in a row had ``now``'s cause, ``now`` included.

    ``run`` is the count that ended at ``before``; ``in_a_row`` says no turn ended well (and no
    person launched one) since ``before``, which a repeat needs.
    """
    if before is not None and in_a_row and same_cause(before, now):
        return run + 1
    return 1


def same_cause_tripped(run: int, threshold: int) -> bool:
    """The same-cause breaker: ``threshold`` interruptions in a row with one cause stop auto-resume."""
    return threshold > 0 and run >= threshold


class SessionUpdates(TypedDict, total=False):
    """The session's breaker fields an event writes, named as the store's ``update_session`` takes them."""

    consecutive_interruptions: int
    auto_resumed: bool


class Settings(Protocol):
    """Whatever holds the resolved settings by name (the engine's ``Config``)."""

    def __getitem__(self, name: str, /) -> Any: ...


class Counters(Struct, frozen=True):
    """The breaker's state on a session: interruptions in a row, and whether the system ever resumed it."""

    consecutive: int = 0
    auto_resumed: bool = False

    @classmethod
    def of(cls, session: Session | None) -> Counters:
        """A session's counters; with no session, those of a new one."""
        if session is None:
            return cls()
        return cls(session.consecutive_interruptions, session.auto_resumed)


class Update(Struct, frozen=True):
    """What one event does to a session's counters: each field the event sets (None: left as it is),
    and whether the breaker has tripped once it is written."""

    consecutive_interruptions: int | None = None
    auto_resumed: bool | None = None
    tripped: bool = False

    def fields(self) -> SessionUpdates:
        """The fields to write, for ``update_session(session_id, **update.fields())``."""
        out: SessionUpdates = {}
        if self.consecutive_interruptions is not None:
            out["consecutive_interruptions"] = self.consecutive_interruptions
        if self.auto_resumed is not None:
            out["auto_resumed"] = self.auto_resumed
        return out


class Repeat(Struct, frozen=True):
    """The same-cause count at an auto-resume: the run ``now`` ends, what to keep for the next
    interruption (None: ``now`` was counted already), and whether the run stops auto-resume."""

    now: Interruption
    run: int
    keep: dict[str, object] | None
    tripped: bool

    def details(self) -> dict[str, object]:
        """What the resting cause says of a tripped same-cause breaker (``show`` explains it)."""
        return {"run": self.run, "code": self.now.code, "exit_code": self.now.exit_code}


class Breaker(Struct, frozen=True):
    """The circuit breaker with its settings (the task's own, where it keeps them).

    Whether it has tripped depends on the settings; how an event moves the counters does not, so
    a caller that only writes the counters may take the defaults.
    """

    threshold: int = default("breaker_threshold", int)
    same_cause_threshold: int = default("breaker_same_cause", int)

    @classmethod
    def of(cls, settings: Settings) -> Breaker:
        return cls(int(settings["breaker_threshold"]), int(settings["breaker_same_cause"]))

    def tripped(self, counters: Counters) -> bool:
        """Whether auto-resume must stop: the session was interrupted ``threshold`` times in a row."""
        return breaker_tripped(counters.consecutive, self.threshold)

    def on_interrupt(self, counters: Counters, *, counted: bool = True) -> Update:
        """A working task became interrupted: one more in a row.

        ``counted`` is False for an interruption the breaker does not count (corral's own
        internal fault, which is never auto-resumed anyway): the counters stay as they are.
        """
        if not counted:
            return Update(tripped=self.tripped(counters))
        after = counters.consecutive + 1
        return Update(consecutive_interruptions=after, tripped=breaker_tripped(after, self.threshold))

    def on_success(self, counters: Counters) -> Update:
        """A turn ended well (a completed receipt of a work turn): the count starts again."""
        return self._reset()

    def on_person_launch(self, counters: Counters) -> Update:
        """A person (or an agent, for its subtask) unblocked or resumed the task: anyone but the system.

        That is someone looking, so the count starts again. A start needs nothing: its session is
        new, and a new session's counters are zero.
        """
        return self._reset()

    def on_auto_resume(self, counters: Counters) -> Update:
        """The system resumes the interrupted turn: the session says so, and the count runs on."""
        return Update(auto_resumed=True, tripped=self.tripped(counters))

    def on_auto_deliver(self, counters: Counters) -> Update:
        """The system hands the forge's feedback back to the agent by itself (``forge_auto_deliver``): an
        automatic relaunch, counted as an interruption the system resumes is — one more in a row (the forge
        sent the task back), the session marked as relaunched by the system. ``tripped``: the count had
        reached the threshold already, so nothing may be launched (the caller asks :meth:`tripped` first)."""
        return Update(
            consecutive_interruptions=counters.consecutive + 1, auto_resumed=True, tripped=self.tripped(counters)
        )

    def on_hand_merged(self, counters: Counters) -> Update:
        """A person resolved the failed merge-and-fix in the worktree (interrupted → blocked)."""
        return self._reset()

    def on_repeat(self, counters: Counters, kept: object, now: Interruption) -> Repeat:
        """Count the interruption ``now`` against the one before it, kept as ``kept`` (the task's
        ``last_interruption``, as :attr:`Repeat.keep` wrote it; anything else counts as nothing kept).

        Counted once per interruption: its time tells it from the one kept. A run goes on only while
        nothing ended it — no turn ended well, no person launched one — which the session's count
        past one says.
        """
        doc = kept if isinstance(kept, dict) else {}
        before = Interruption.from_json(doc.get("interruption"))
        run = doc.get("run")
        run = run if isinstance(run, int) and not isinstance(run, bool) else 1
        keep: dict[str, object] | None = None
        if before is None or before.at != now.at:
            run = same_cause_run(before, run, now, in_a_row=counters.consecutive > 1)
            keep = {"interruption": now.to_json(), "run": run}
        return Repeat(now, run, keep, same_cause_tripped(run, self.same_cause_threshold))

    def _reset(self) -> Update:
        return Update(consecutive_interruptions=0, tripped=breaker_tripped(0, self.threshold))
