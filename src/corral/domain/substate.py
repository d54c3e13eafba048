"""The substate a task shows beside its status, derived in one place for every surface.

``working(agent)``, ``working(harness:<phase>)``, ``working(retrying: …)``,
``working(waiting on fix-foo (2m10s))``, or ``not-alive`` for a working task whose
supervisor is gone; ``queued`` for a worker's turn none claimed yet, ``unreported`` for one
another host runs on its own and has not reported lately (docs/workers.md). The live facts
come from the supervisor's ``status.json`` and the agent's tool-call markers
(``engine/runtime/agent_marks``), read by the engine and passed in here.

Precedence, highest first: not-alive (a marker never resurrects a dead run); the usage-limit
wait and the retry (``waiting: usage limit …``, ``retrying: …``); a harness phase
(``harness:<phase>``: the supervisor, not the agent, is the active thing); the agent's waits on
subtasks (``waiting on a (2m10s), b (45s)``; more than two: ``waiting on a, b +2``); the agent
kinds (``agent``, ``agent:answering``, ``agent:pre-accept``). The agent's progress line
decorates only the agent kinds (``agent: running migration 3/7``) and a wait (``waiting on
fix-foo (2m10s) · running migration 3/7``: the wait first, since it says what the agent is
doing this second); never a harness phase, a retry or not-alive.
"""

from __future__ import annotations

import math

from msgspec import Struct

from corral.domain.status import Status

RETRY_SNIPPET = 80

#: A supervisor's phase in a person's words, for sentences ("… while merging the target").
PHASE_WORDS = {
    "launch": "launching the turn",
    "command": "starting the turn",
    "sync": "merging the target into the branch",
    "work": "running the agent",
    "check": "running the post-turn check",
    "response": "writing the turn's receipt",
    "retrying": "waiting to retry",
    "waiting": "waiting for the account's usage limit to reset",
    "reconcile": "recording the turn",
}


def phase_words(phase: str | None) -> str:
    return PHASE_WORDS.get(phase or "", "running the turn")


#: More waits than this are summarized: ``waiting on a, b +2``.
WAITS_LISTED = 2
#: How a progress line joins a wait: ``waiting on fix-foo (2m10s) · running migration 3/7``.
WAIT_PROGRESS_SEPARATOR = " · "


class Waiting(Struct, frozen=True):
    """One subtask the agent waits on right now (a ``wait`` tool call), and for how long."""

    ref: str
    seconds: float


class Live(Struct, frozen=True):
    """What is known right now about a task's running turn."""

    alive: bool
    phase: str | None = None  # the supervisor's phase: command, sync, work, check, response, retrying
    kind: str | None = None  # the turn's kind: start, unblock, ask, pre-accept, …
    retry_attempt: int | None = None
    retry_class: str | None = None
    retry_reason: str | None = None
    #: Waiting with its harness account for a usage limit: when it resets (RFC 3339), and whether
    #: the reset has passed and the turn waits for the first one after it to get through.
    limit_resets_at: str | None = None
    limit_behind_first: bool = False
    #: The subtasks the agent waits on (its ``wait`` tool calls), oldest first; their seconds
    #: are counted by the engine at read time.
    waits: tuple[Waiting, ...] = ()
    #: The agent's own progress line (``update_progress``), already collapsed and capped.
    progress: str | None = None


def limit_summary(resets_at: str | None, behind_first: bool) -> str:
    """``usage limit (resets 14:00)``, or, once the reset has passed, that another task goes first."""
    if behind_first:
        return "usage limit (reset passed; another task goes first)"
    # Loaded here, not with this module: its parsers' patterns cost every list a few milliseconds to
    # compile, and only a turn waiting on a usage limit shows a reset.
    from corral.domain.usage_limit import reset_words

    return f"usage limit ({reset_words(resets_at)})"


def retry_summary(attempt: int | None, failure_class: str | None, reason: str | None) -> str:
    """One line for "what is being retried": ``attempt 7 (transient_overload): API Error: 529 …``."""
    text = " ".join((reason or "").split())
    if len(text) > RETRY_SNIPPET:
        text = text[: RETRY_SNIPPET - 1] + "…"
    head = f"attempt {attempt}" if attempt else "attempt"
    if failure_class:
        head += f" ({failure_class})"
    return f"{head}: {text}" if text else head


def waited(seconds: float) -> str:
    """``45s``, ``2m10s``, ``1h02m``: how long a wait has lasted (none, for what is not a finite count)."""
    try:
        whole = int(seconds) if math.isfinite(seconds) and seconds > 0 else 0
    except OverflowError:  # an integer past any float's range: no count a turn reports
        whole = 0
    hours, rest = divmod(whole, 3600)
    if hours:
        return f"{hours}h{rest // 60:02d}m"
    minutes, secs = divmod(rest, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def waits_summary(waits: tuple[Waiting, ...]) -> str:
    """``waiting on fix-foo (2m10s)``; two: both with their times; more: ``waiting on a, b +2``."""
    seen: dict[str, float] = {}
    for w in waits:  # one target waited on twice at once reads once, by its longer wait
        seen[w.ref] = max(w.seconds, seen.get(w.ref, 0.0))
    refs = list(seen)
    if len(refs) <= WAITS_LISTED:
        return "waiting on " + ", ".join(f"{ref} ({waited(seen[ref])})" for ref in refs)
    return f"waiting on {', '.join(refs[:WAITS_LISTED])} +{len(refs) - WAITS_LISTED}"


#: The phase, and the substate, of a turn queued for a worker that none has claimed yet (docs/workers.md).
QUEUED = "queued"


#: The phase, and the substate, of a turn another host runs on its own (a local turn on the shared store)
#: when that host has shipped no live facts of it lately: working there as far as anyone here knows.
UNREPORTED = "unreported"


#: What ``show`` says of a worker's turn that ended but whose branch has not reached the remote yet.
NOT_PUSHED = "work not yet pushed"


def runs_on(host: str | None) -> str | None:
    """``on build-2`` for a turn a worker runs (a list row's ``host``; "queued" names no host), else None."""
    return f"on {host}" if host and host != QUEUED else None


def substate(status: Status, live: Live | None) -> str | None:
    if status is not Status.WORKING:
        return None
    if live is None or not live.alive:
        return "not-alive"
    if live.phase in (QUEUED, UNREPORTED):
        return live.phase
    if live.phase == "waiting":
        return f"waiting: {limit_summary(live.limit_resets_at, live.limit_behind_first)}"
    if live.phase == "retrying" or live.retry_class is not None:  # corral's wait, or a harness's own retry
        return f"retrying: {retry_summary(live.retry_attempt, live.retry_class, live.retry_reason)}"
    if live.phase not in (None, "work"):
        return f"harness:{live.phase}"
    progress = " ".join((live.progress or "").split())
    if live.waits:
        head = waits_summary(live.waits)
        return f"{head}{WAIT_PROGRESS_SEPARATOR}{progress}" if progress else head
    if live.kind == "ask":
        kind = "agent:answering"
    elif live.kind == "pre-accept":
        kind = "agent:pre-accept"
    else:
        kind = "agent"
    return f"{kind}: {progress}" if progress else kind


def render_status(status: Status, sub: str | None) -> str:
    return f"{status.value}({sub})" if sub else status.value
