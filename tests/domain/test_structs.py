"""The records are msgspec Structs: frozen ones refuse assignment, copies are made with ``replace``, a record
round-trips through msgspec's own encoding and is validated when decoded, and a secret stays out of a repr."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from msgspec.structs import replace

from corral.adapters.harness.base import AgentTools
from corral.domain.delays import Delays
from corral.domain.posture import Posture
from corral.domain.records import FailureEvidence, PossibleEffects, RestingCause, Task
from corral.domain.status import Status

AT = datetime(2026, 1, 1, tzinfo=UTC)


def a_task(**changes: object) -> Task:
    task = Task(
        "t1", "fix-it", "Fix it", "", None, Status.BLOCKED, "claude", None, None, ("db/*",), {}, None, None, AT, AT, AT
    )
    return replace(task, **changes)


@pytest.mark.parametrize(
    "record",
    [a_task(), Posture("acceptEdits", ("Read",)), Delays(), FailureEvidence("harness", "harness-overloaded")],
    ids=lambda r: type(r).__name__,
)
def test_a_frozen_record_refuses_assignment_and_is_copied_with_replace(record: msgspec.Struct) -> None:
    name = msgspec.structs.fields(record)[0].name
    with pytest.raises(AttributeError):
        setattr(record, name, getattr(record, name))
    assert replace(record) == record and replace(record) is not record


def test_a_changed_copy_leaves_the_record_it_was_made_from_alone() -> None:
    task = a_task()
    moved = replace(task, status=Status.WORKING)
    assert (task.status, moved.status) == (Status.BLOCKED, Status.WORKING) and moved.ref == task.ref


def test_a_record_round_trips_through_msgspec_and_is_validated_when_decoded() -> None:
    cause = RestingCause(
        "harness-overloaded",
        AT,
        evidence=FailureEvidence("harness", "x", possible_effects=PossibleEffects.NONE, exit_code=1, details={"n": 1}),
    )
    assert msgspec.json.decode(msgspec.json.encode(cause), type=RestingCause) == cause
    with pytest.raises(msgspec.ValidationError, match=r"\$\.evidence\.exit_code"):
        msgspec.convert(
            {"code": "x", "at": "2026-01-01T00:00:00Z", "evidence": {"source": "s", "code": "c", "exit_code": "1"}},
            RestingCause,
        )


def test_a_turns_token_stays_out_of_the_record_repr() -> None:
    tools = AgentTools("http://127.0.0.1:1/mcp", "the-secret-token", 30.0)
    assert "the-secret-token" not in repr(tools) and "127.0.0.1" in repr(tools)
    assert tools.token == "the-secret-token"
