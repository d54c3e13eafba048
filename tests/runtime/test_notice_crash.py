"""Once-only notices across a collector that crashed mid-append (a torn journal line) and a restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from corral.domain.attention import GRACE_SECONDS, due
from corral.domain.clock import rfc3339
from corral.engine.read.notices import record_told, told
from corral.engine.runtime.journal import JOURNAL, Journal

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def model_failure(key: str, seconds: float) -> dict[str, object]:
    at = rfc3339(T0 + timedelta(seconds=seconds))
    return {"kind": "failure", "id": key, "operation": "model-call", "category": "model", "summary": key, "at": at}


def test_a_crash_mid_append_loses_no_incident_and_tells_none_twice(tmp_path: Path) -> None:
    where = tmp_path / "session"
    Journal(where).append([model_failure("model:a", 0)])
    # The collector dies halfway through its next append: half a record, no newline.
    with (where / JOURNAL).open("ab") as fh:
        fh.write(b'{"kind": "failure", "id": "model:b", "operation": "mo')
    first_look = Journal(where).read()
    assert [i.id for i in first_look.needs_action] == ["model:a", "incomplete:journal-torn"]
    later = T0 + timedelta(seconds=GRACE_SECONDS + 1)
    notice = due(first_look, told(where, "daemon"), later)
    assert notice is not None and [i.id for i in notice.incidents] == ["model:a"]  # the torn line waits for the end
    record_told(where, "daemon", notice, later)

    # After the restart a new collector appends what it sees again; the torn line stays apart.
    restarted = Journal(where)
    restarted.append([model_failure("model:b", 5)])
    state = restarted.read()
    assert {"model:a", "model:b"} <= set(state.incidents)
    again = due(state, told(where, "daemon"), later + timedelta(seconds=GRACE_SECONDS))
    assert again is not None and [i.id for i in again.incidents] == ["model:b"]  # a told once, b now
    record_told(where, "daemon", again, later)
    assert due(Journal(where).read(), told(where, "daemon"), later + timedelta(hours=1)) is None

    end = due(Journal(where).read(), told(where, "daemon"), later, ended="completion:1")
    assert end is not None and end.already_told == 2
    # the torn half is a line of its own now: not torn any more, one record that cannot be read
    assert [i.id for i in end.incidents] == ["incomplete:journal-unreadable"]


def test_a_crash_between_handoff_and_receipt_tells_it_again_never_never(tmp_path: Path) -> None:
    where = tmp_path / "session"
    Journal(where).append([model_failure("model:a", 0)])
    later = T0 + timedelta(seconds=GRACE_SECONDS)
    notice = due(Journal(where).read(), told(where, "wait"), later)
    assert notice is not None
    # handed over, then the process died before its receipt: the next look tells it again
    assert due(Journal(where).read(), told(where, "wait"), later) == notice
    record_told(where, "wait", notice, later)
    assert due(Journal(where).read(), told(where, "wait"), later) is None
    assert due(Journal(where).read(), told(where, "daemon"), later) == notice  # each channel its own receipts
