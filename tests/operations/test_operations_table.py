"""Every operation's guard reads the one operations table (``corral.domain.operations_table.OPERATIONS``).

For each operation and each status the table does not allow, the real operation refuses a
real task in that status (exit 3) and names what the operation takes; an operation added to
the table without a guard fails here, and so does one with a guard of its own. Every "Next:"
hint names only operations the table allows in the task's status.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corral.domain.actors import Actor
from corral.domain.explain import next_step, offers
from corral.domain.operations_table import OPERATIONS, Op, allowed_from, takes
from corral.domain.records import RestingCause
from corral.domain.status import TERMINAL, Status
from corral.engine.operations import accept, control, pairing, submit, tasks, turns
from corral.engine.operations import sync as syncing
from corral.engine.project import Project
from corral.errors import STATUS_WORDS, RefusedError

H = Actor.HUMAN

CALLS: dict[Op, Callable[[Project, str], Any]] = {
    Op.START: lambda p, ref: turns.start(p, ref, actor=H),
    Op.UNBLOCK: lambda p, ref: turns.unblock(p, ref, actor=H, message="more"),
    Op.RESUME: lambda p, ref: turns.resume(p, ref, actor=H),
    Op.ASK: lambda p, ref: turns.ask(p, ref, actor=H, question="why?"),
    Op.PRE_ACCEPT: lambda p, ref: turns.pre_accept(p, ref, actor=H, prompt="last look"),
    Op.STOP: lambda p, ref: control.stop(p, ref, actor=H),
    Op.SYNC: lambda p, ref: syncing.sync(p, ref, actor=H),
    Op.PAIR: lambda p, ref: pairing.pair(p, ref, actor=H),
    Op.CHAT: lambda p, ref: pairing.chat(p, ref),
    Op.ACCEPT: lambda p, ref: accept.accept(p, ref, actor=H),
    Op.SUBMIT: lambda p, ref: submit.submit(p, ref, actor=H),
    Op.CLOSE: lambda p, ref: tasks.abandon(p, ref, reason="no", actor=H, how="close"),
    Op.REJECT: lambda p, ref: tasks.abandon(p, ref, reason="no", actor=H, how="reject"),
    Op.REOPEN: lambda p, ref: tasks.reopen(p, ref, reason="again", actor=H),
    Op.EDIT: lambda p, ref: tasks.edit(p, ref, goal="Changed"),
    Op.DELETE: lambda p, ref: tasks.delete(p, ref, actor=H),
}
#: Refusals that keep a code of their own (their meaning is more than "not from this status").
OWN_CODES = {(Op.EDIT, Status.COMPLETE): "task-frozen", (Op.EDIT, Status.ABANDONED): "task-frozen"}
for _how in (Op.CLOSE, Op.REJECT):
    OWN_CODES[(_how, Status.ABANDONED)] = "already-abandoned"


def test_every_operation_in_the_table_has_a_call_here() -> None:
    assert set(CALLS) == set(Op) == set(OPERATIONS)


def force_status(project: Project, ref: str, status: Status) -> None:
    """Put a task in ``status`` directly (the test needs every status, reachable or not)."""
    with project.store.write() as tx:
        task = tx.task_by_ref(ref)
        assert task is not None
        # a finished task has a finished time, and only a finished one (schema 8's CHECK)
        finished_at = tx._stamp() if status in TERMINAL else None  # type: ignore[attr-defined]
        tx._db.execute(  # type: ignore[attr-defined]
            "UPDATE tasks SET status = ?, finished_at = ? WHERE id = ?", (status.value, finished_at, task.id)
        )


@pytest.mark.parametrize("op", list(Op), ids=[o.value for o in Op])
def test_an_operation_refuses_every_status_the_table_does_not_allow(op: Op, proj: Project) -> None:
    task = tasks.create(proj, f"Guarded {op.value}", actor=H)
    refused = [s for s in Status if s not in OPERATIONS[op]]
    assert refused, op
    for status in refused:
        force_status(proj, task.ref, status)
        with pytest.raises(RefusedError) as caught:
            CALLS[op](proj, task.ref)
        error = caught.value
        assert error.exit_code == 3, (op, status, error.message)
        own = OWN_CODES.get((op, status))
        if own is not None:
            assert error.code == own
            continue
        # In a person's words: an internal status (zombie) is said as what it means.
        said = STATUS_WORDS.get(status.value, status.value)
        assert f"it is {said}" in error.message, (op, status, error.message)
        assert status.value not in STATUS_WORDS or status.value not in error.message, error.message
        assert takes(op) in error.message, (op, status, error.message)
        with proj.store.read() as tx:
            after = tx.task_by_ref(task.ref)
        assert after is not None and after.status is status  # a refusal changes nothing


def test_the_table_agrees_with_the_transition_table() -> None:
    from corral.domain.operations_table import OP_TARGET
    from corral.domain.status import is_allowed

    for op, target in OP_TARGET.items():
        for status in allowed_from(op):
            assert is_allowed(status, target, H), f"{op.value} runs from {status.value} but cannot reach {target.value}"


SRC = Path(__file__).resolve().parents[2] / "src" / "corral"


def test_no_operation_keeps_its_own_tuple_of_statuses() -> None:
    """Guards read the table: no module under operations/ spells out a set of statuses of its own."""
    found = []
    for path in (SRC / "engine" / "operations").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple | ast.Set | ast.List):
                members = [
                    e for e in node.elts if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "Status"
                ]
                if len(members) >= 2:
                    found.append(f"{path.name}:{node.lineno}")
    assert not found, "status sets outside the operations table: " + ", ".join(found)


@pytest.mark.parametrize("status", list(Status), ids=[s.value for s in Status])
@pytest.mark.parametrize("cause", [None, "harness-killed", "turn-lost", "prepare-failed", "stopped", "harness-missing"])
def test_every_next_hint_names_only_operations_the_table_allows(status: Status, cause: str | None, proj) -> None:
    task = tasks.create(proj, "Hinted", actor=H)
    from msgspec.structs import replace

    resting = RestingCause(cause, at=task.created_at, actor=H) if cause else None
    shaped = replace(task, status=status, resting_cause=resting)
    for pending in (0, 2):
        for breaker in (False, True):
            hint = next_step(shaped, pending_violations=pending, breaker=breaker)
            if status is Status.COMPLETE:
                assert hint is None
                continue
            assert hint, (status, cause)
            assert offers(hint, status), (status, cause, hint)
