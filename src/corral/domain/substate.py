"""The substate a task shows beside its status, derived in one place for every surface.

``working(agent)``, ``working(harness:<phase>)``, ``working(retrying: …)``, or
``not-alive`` for a working task whose supervisor is gone. The live facts come
from the supervisor's ``status.json``, read by the engine and passed in here.
"""

from __future__ import annotations

from corral.domain.record import record
from corral.domain.status import Status
from corral.domain.usage_limit import reset_words

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


@record
class Live:
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


def limit_summary(resets_at: str | None, behind_first: bool) -> str:
    """``usage limit (resets 14:00)``, or, once the reset has passed, that another task goes first."""
    if behind_first:
        return "usage limit (reset passed; another task goes first)"
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


def substate(status: Status, live: Live | None) -> str | None:
    if status is not Status.WORKING:
        return None
    if live is None or not live.alive:
        return "not-alive"
    if live.phase == "waiting":
        return f"waiting: {limit_summary(live.limit_resets_at, live.limit_behind_first)}"
    if live.phase == "retrying" or live.retry_class is not None:  # corral's wait, or a harness's own retry
        return f"retrying: {retry_summary(live.retry_attempt, live.retry_class, live.retry_reason)}"
    if live.phase in (None, "work"):
        if live.kind == "ask":
            return "agent:answering"
        if live.kind == "pre-accept":
            return "agent:pre-accept"
        return "agent"
    return f"harness:{live.phase}"


def render_status(status: Status, sub: str | None) -> str:
    return f"{status.value}({sub})" if sub else status.value
