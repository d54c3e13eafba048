"""Every stop explained: the plain line and the next step, derived from stored codes.

Only typed codes are stored (seed 004 item 6); wording is made here, when read,
so every surface (CLI text, ``--json``, MCP, dashboard) says the same thing. No
code or id appears on the everyday line.
"""

from __future__ import annotations

from corral.domain.records import RestingCause, Task
from corral.domain.status import Status

UNKNOWN_REASON = "This turn failed for unknown reasons."

# code -> plain line. Details a cause carries may be folded in by `stopped_because`.
_CAUSES: dict[str, str] = {
    "prepare-failed": "corral could not prepare the task's branch or worktree.",
    "internal-fault": "corral hit an internal fault while running the task.",
    "stopped": "The turn was stopped.",
    "unknown": UNKNOWN_REASON,
}


def stopped_because(cause: RestingCause | None) -> str | None:
    """One plain line on why a task rests, or None when it rests without a cause."""
    if cause is None:
        return None
    line = _CAUSES.get(cause.code, UNKNOWN_REASON)
    detail = cause.details.get("summary")
    if isinstance(detail, str) and detail:
        line = f"{line} {detail}"
    return line


def next_step(task: Task, *, pending_violations: int = 0) -> str | None:
    """What a person does next with the task, as a command they can type."""
    ref = task.ref
    match task.status:
        case Status.BACKLOG:
            return f"Start it: corral start {ref}"
        case Status.WORKING:
            return f"Wait for the turn: corral wait {ref} (or stop it: corral stop {ref})"
        case Status.BLOCKED:
            return f"Review the turn (corral diff {ref}), then corral unblock {ref} -m '…' or corral accept {ref}"
        case Status.CONFLICT:
            return (
                f"Decide the {pending_violations or ''} protected file(s): "
                f"corral unblock {ref} --approve-file PATH / --revert-file PATH"
            ).replace("  ", " ")
        case Status.INTERRUPTED:
            if pending_violations:
                return f"Decide the protected files and continue: corral unblock {ref} --approve-file PATH"
            return f"Resume it: corral resume {ref} (or give feedback: corral unblock {ref} -m '…')"
        case Status.PAIRING:
            return "A pair session is open in the worktree; end it to continue."
        case Status.MERGING:
            return f"A merge is in flight; corral show {ref} when it ends."
        case Status.SUBMITTED:
            return f"Waiting for review on the remote; corral accept {ref} once it is approved."
        case Status.ZOMBIE:
            return "corral is completing it; nothing to do."
        case Status.ABANDONED:
            return f"Nothing; if that was a mistake: corral reopen {ref}"
        case Status.COMPLETE:
            return None
