"""An execution fault: corral's own operation failed after the task went working.

The task rests interrupted with the cause "internal fault" and is never auto-resumed; the
fault is recorded as the turn's failure with its detailed diagnostic (the translated cause
and stack) written first.
"""

from __future__ import annotations

import traceback

from msgspec.structs import replace

from corral import crashpoints
from corral.domain.actors import Actor, Role
from corral.domain.clock import new_id
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status
from corral.domain.substate import phase_words
from corral.engine.project import Project
from corral.engine.read import diagnostic_content, diagnostics
from corral.engine.read.translator import Translator
from corral.engine.recovery.receipts import interrupt


def internal_fault(project: Project, task: Task, exc: BaseException, *, phase: str = "launch") -> None:
    """Rest a task that went working but whose turn could not run: interrupted, never auto-resumed.

    The fault is recorded as the turn's failure (an agent turn of kind ``error`` that does
    not claim the command, so a receipt that still arrives is recorded too), with its
    detailed diagnostic — the translated cause and stack — written first.
    """
    crashpoints.hit("fault.handling")  # one per fault: a launch that fails is recorded once (its test counts it)
    t = Translator()
    error = t.text(f"{type(exc).__name__}: {exc}", 500)
    evidence = FailureEvidence(
        source="corral",
        code="internal-fault",
        phase=phase,
        category="internal",
        possible_effects=PossibleEffects.NONE,
        details={"error": error},
    )
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    ref = diagnostics.try_write(
        project.paths,
        task.id,
        f"{new_id()}-fault",
        {
            "kind": "internal-fault",
            "task_id": task.id,
            "cause": diagnostic_content.cause_json(evidence, t),
            "stack": t.tail(stack, diagnostic_content.STACK_BYTES),
        },
        project.clock(),
    )
    evidence = replace(evidence, diagnostic=ref)
    cause = RestingCause(
        code="internal-fault",
        at=project.clock(),
        actor=Actor.SYSTEM,
        evidence=evidence,
        details={"summary": t.text(error, 300)},
    )
    with project.store.write() as tx:
        current = tx.get_task(task.id)
        if current is None or current.status is not Status.WORKING:
            if ref is not None:
                diagnostics.discard(project.paths, ref)
            return
        tx.add_turn(
            task.id,
            role=Role.AGENT,
            kind="error",
            content=f"The turn could not run: internal fault: {error}",
            session_id=current.session_id,
            failure=evidence,
        )
        # Never auto-resumed (its cause says so), so the breaker does not count it.
        interrupt(
            tx,
            current,
            f"internal fault: {error}",
            cause,
            status_reason=f"internal fault while {phase_words(phase)}",
            counts=False,
        )
