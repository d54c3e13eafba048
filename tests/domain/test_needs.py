"""What a task needs from the person: one group per unfinished status, a failed rest apart."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.domain.needs import ORDER, Need, need_of
from corral.domain.records import READ_ONLY_KEPT, FailureEvidence, RestingCause, Task
from corral.domain.status import Status

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def task(status: Status, cause: RestingCause | None = None) -> Task:
    return Task(
        id="t1",
        ref="fix",
        goal="g",
        prompt="p",
        parent_id=None,
        status=status,
        harness=None,
        model=None,
        target_branch=None,
        protected=(),
        metadata={},
        resting_cause=cause,
        session_id=None,
        created_at=NOW,
        updated_at=NOW,
        last_interaction_at=NOW,
    )


@pytest.mark.parametrize(
    ("status", "need"),
    [
        (Status.BACKLOG, Need.BACKLOG),
        (Status.WORKING, Need.WORKING),
        (Status.PAIRING, Need.WORKING),
        (Status.MERGING, Need.WORKING),
        (Status.BLOCKED, Need.REVIEW),
        (Status.CONFLICT, Need.REVIEW),
        (Status.SUBMITTED, Need.REVIEW),
        (Status.INTERRUPTED, Need.FAILED),
        (Status.ZOMBIE, Need.FAILED),
        (Status.COMPLETE, None),
        (Status.ABANDONED, None),
    ],
)
def test_every_status_has_its_group(status: Status, need: Need | None) -> None:
    assert need_of(task(status)) is need


def test_a_rest_after_a_failed_turn_is_failed_not_review() -> None:
    evidence = FailureEvidence(source="harness", code="fatal_auth")
    assert need_of(task(Status.BLOCKED, RestingCause("fatal_auth", NOW, evidence=evidence))) is Need.FAILED
    # A stop by a person, or changes a read-only turn left and corral took away, is no failure.
    assert need_of(task(Status.BLOCKED, RestingCause("stopped", NOW))) is Need.REVIEW
    kept = FailureEvidence(source="corral", code=READ_ONLY_KEPT)
    assert need_of(task(Status.BLOCKED, RestingCause(READ_ONLY_KEPT, NOW, evidence=kept))) is Need.REVIEW


def test_the_groups_are_ordered_with_what_waits_for_the_person_first() -> None:
    assert ORDER[0] is Need.REVIEW and set(ORDER) == set(Need)
