"""The shared usage-limit pause file: three tasks on one account, with an injected clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from corral.adapters.pid_identity import start_ticks
from corral.domain.clock import rfc3339
from corral.domain.failures import RETRY_REASON_BYTES
from corral.domain.usage_limit import FIRST_THROUGH_SECONDS
from corral.engine.runtime import usage_pause
from corral.engine.runtime.usage_pause import UsagePauses

T0 = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)
ACCOUNT = "claude:0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _pauses(path: Path, clock: Clock) -> UsagePauses:
    return UsagePauses(path, clock=clock, pid=os.getpid(), pid_start=start_ticks(os.getpid()))


def test_three_tasks_wait_for_the_reset_then_one_goes_first_and_the_rest_after_it(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "home" / "usage-limits.json"
    pauses = _pauses(path, clock)
    reset = T0 + timedelta(minutes=30)
    assert pauses.turn(ACCOUNT, "a").go  # nothing noted: go
    pauses.note(ACCOUNT, "claude", reset, "usage limit reached", "a")
    # Before the reset, nobody goes: each is told when to look again.
    for task in ("a", "b", "c"):
        turn = pauses.turn(ACCOUNT, task)
        assert not turn.go and turn.until == reset and turn.resets_at == reset
    clock.now = reset + timedelta(seconds=1)
    first = pauses.turn(ACCOUNT, "b")
    assert first.go and first.first
    for task in ("a", "c"):
        turn = pauses.turn(ACCOUNT, task)
        assert not turn.go and turn.until is None  # behind the first: poll
    assert pauses.turn(ACCOUNT, "b").go  # the first asking again still goes
    assert pauses.got_through(ACCOUNT, "b")
    assert all(pauses.turn(ACCOUNT, task).go for task in ("a", "c"))
    assert pauses.read() == {}


def test_a_later_reset_wins_and_the_first_hitting_the_limit_again_gives_its_place_up(tmp_path: Path) -> None:
    clock = Clock()
    pauses = _pauses(tmp_path / "usage-limits.json", clock)
    early, late = T0 + timedelta(minutes=5), T0 + timedelta(minutes=50)
    pauses.note(ACCOUNT, "claude", late, "limit", "a")
    assert pauses.note(ACCOUNT, "claude", early, "limit", "b") == late
    clock.now = late
    assert pauses.turn(ACCOUNT, "a").first
    later = late + timedelta(minutes=20)
    pauses.note(ACCOUNT, "claude", later, "limit again", "a")
    stored = pauses.read()[ACCOUNT]
    assert stored["first"] is None and stored["resets_at"] == rfc3339(later)
    assert not pauses.turn(ACCOUNT, "b").go


def test_a_first_that_died_or_took_too_long_loses_its_place(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = UsagePauses(path, clock=clock, pid=int(dead.stdout), pid_start=None)
    pauses = _pauses(path, clock)
    pauses.note(ACCOUNT, "claude", T0, "limit", "x")
    assert gone.turn(ACCOUNT, "a").first  # taken by a process that no longer exists
    turn = pauses.turn(ACCOUNT, "b")
    assert turn.go and turn.first  # so the next one asking goes first
    assert not pauses.turn(ACCOUNT, "c").go
    clock.now = T0 + timedelta(seconds=FIRST_THROUGH_SECONDS + 1)
    assert pauses.turn(ACCOUNT, "c").first  # b never got through in time


def test_a_first_that_ends_without_getting_through_lets_the_next_go(tmp_path: Path) -> None:
    clock = Clock()
    pauses = _pauses(tmp_path / "usage-limits.json", clock)
    pauses.note(ACCOUNT, "claude", T0, "limit", "x")
    assert pauses.turn(ACCOUNT, "a").first
    pauses.give_up(ACCOUNT, "b")  # not the first: changes nothing
    assert not pauses.turn(ACCOUNT, "b").go
    pauses.give_up(ACCOUNT, "a")
    assert pauses.turn(ACCOUNT, "b").first


def test_a_response_before_the_reset_proves_nothing(tmp_path: Path) -> None:
    clock = Clock()
    pauses = _pauses(tmp_path / "usage-limits.json", clock)
    pauses.note(ACCOUNT, "claude", T0 + timedelta(minutes=1), "limit", "a")
    assert not pauses.got_through(ACCOUNT, "a")
    assert ACCOUNT in pauses.read()


def test_accounts_are_apart_and_the_file_is_shared_by_every_process(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    _pauses(path, clock).note(ACCOUNT, "claude", T0 + timedelta(hours=1), "limit", "a")
    assert UsagePauses(path, clock=clock).turn("codex:fedcba9876543210", "z").go
    probe = (
        "import sys; from datetime import datetime, UTC; from pathlib import Path; "
        "from corral.engine.runtime.usage_pause import UsagePauses; "
        "at = datetime(2026, 12, 1, 13, 0, tzinfo=UTC); "
        f"t = UsagePauses(Path(sys.argv[1]), clock=lambda: at).turn({ACCOUNT!r}, 'q'); "
        "print(t.go, t.until)"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False" and "14:00:00" in out.stdout
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_torn_or_foreign_file_is_no_pause_and_the_next_limit_writes_it_anew(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    path.write_text('{"version": 1, "accounts": {"claude:0123', encoding="utf-8")
    pauses = _pauses(path, clock)
    assert pauses.turn(ACCOUNT, "a").go
    pauses.note(ACCOUNT, "claude", T0 + timedelta(minutes=3), "limit", "a")
    assert json.loads(path.read_text())["accounts"][ACCOUNT]["harness"] == "claude"


def test_a_pause_file_that_cannot_be_kept_never_stops_a_turn(tmp_path: Path, capsys: object) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where CORRAL_HOME's directory should be")
    pauses = _pauses(blocker / "usage-limits.json", Clock())
    assert pauses.turn(ACCOUNT, "a").go  # the lock cannot be made: as if nothing were paused
    reset = T0 + timedelta(minutes=5)
    assert pauses.note(ACCOUNT, "claude", reset, "limit", "a") == reset
    assert pauses.turn(ACCOUNT, "a").go
    pauses.give_up(ACCOUNT, "a")
    assert pauses.got_through(ACCOUNT, "a") is False


def test_a_record_no_supervisor_would_write_is_dropped_not_obeyed(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    for resets_at in ("9999-12-31T00:00:00Z", "not a time", None):
        record = {"harness": "claude", "resets_at": resets_at, "first": None}
        path.write_text(json.dumps({"version": 1, "accounts": {ACCOUNT: record}}))
        assert _pauses(path, clock).turn(ACCOUNT, "a").go  # a tampered or broken record holds nobody
        assert ACCOUNT not in _pauses(path, clock).read()


def test_a_tampered_record_never_breaks_or_freezes_a_turn(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    passed = rfc3339(T0 - timedelta(minutes=1))
    for first in (
        "garbage",
        [1, 2],
        {"task_id": "zzz", "pid": 1},
        {"task_id": "zzz", "pid": 1, "since": "9999-01-01T00:00:00Z"},
    ):
        record = {"harness": "claude", "resets_at": passed, "first": first}
        path.write_text(json.dumps({"version": 1, "accounts": {ACCOUNT: record}}))
        turn = _pauses(path, clock).turn(ACCOUNT, "a")
        assert turn.go and turn.first  # a first with no believable place holds nothing: "a" goes
    for naive in ("2099-01-01T00:00:00", "2026-12-01T13:05:00"):
        path.write_text(json.dumps({"version": 1, "accounts": {ACCOUNT: {"harness": "c", "resets_at": naive}}}))
        assert _pauses(path, clock).turn(ACCOUNT, "a").go  # a time with no zone is no time: dropped
    path.write_text("[" * 200_000)
    assert _pauses(path, clock).turn(ACCOUNT, "a").go


def test_hosts_share_a_pause_through_the_store_until_its_reset(tmp_path: Path) -> None:
    clock = Clock()
    here = _pauses(tmp_path / "here" / "usage-limits.json", clock)
    there = _pauses(tmp_path / "there" / "usage-limits.json", clock)
    reset = T0 + timedelta(minutes=30)
    here.note(ACCOUNT, "claude", reset, "usage limit reached", "a")
    shared = here.exchange({})  # this host's pause goes to the store (without who goes first)
    assert shared[ACCOUNT]["resets_at"] == rfc3339(reset) and "first" not in shared[ACCOUNT]
    assert there.exchange(shared) == shared  # the other host takes it: its tasks wait too
    turn = there.turn(ACCOUNT, "b")
    assert not turn.go and turn.until == reset
    # A later reset noted on the other host wins on both; an earlier one changes nothing.
    later = reset + timedelta(minutes=10)
    there.note(ACCOUNT, "claude", later, "again", "b")
    shared = there.exchange(shared)
    assert here.exchange(shared)[ACCOUNT]["resets_at"] == rfc3339(later)
    assert here.exchange({ACCOUNT: {**shared[ACCOUNT], "resets_at": rfc3339(reset)}})[ACCOUNT]["resets_at"] == rfc3339(
        later
    )
    # Past its reset a shared pause holds nobody anywhere and leaves the store; first-through stays per host.
    clock.now = later + timedelta(seconds=1)
    assert there.exchange(shared) == {}
    assert _pauses(tmp_path / "third" / "usage-limits.json", clock).exchange(shared) == {}
    assert _pauses(tmp_path / "third" / "usage-limits.json", clock).read() == {}


def test_a_shared_pause_no_supervisor_would_note_is_ignored_and_never_copied_here(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "usage-limits.json"
    here = _pauses(path, clock)
    reset = rfc3339(T0 + timedelta(minutes=30))
    for shared in (["not", "an", "object"], "text", 7, None):
        assert here.exchange(shared) == {}  # a document not shaped as pauses is none
    good = {"harness": "claude", "resets_at": reset, "noted_at": rfc3339(T0), "reason": "usage limit reached"}
    hostile = {
        f"junk:{i}": {**good, "junk": "J" * 100_000, "first": {"task_id": "theirs", "pid": 1}} for i in range(50)
    }
    hostile |= {
        "no-harness": {"resets_at": reset},
        "harness-not-text": {**good, "harness": ["claude"]},
        "reason-not-text": {**good, "reason": {"x": 1}},
        "a" * 100_000: good,
        "not-a-record": ["x"],
        "no-time": {**good, "resets_at": "soon"},
        "too-far": {**good, "resets_at": rfc3339(T0 + timedelta(days=40))},
        "long-reason": {**good, "reason": "R" * 5_000_000, "noted_at": ["x"]},
    }
    merged = here.exchange(hostile)
    assert set(merged) == {f"junk:{i}" for i in range(50)} | {"long-reason"}
    assert merged["junk:0"] == good  # only what a supervisor notes
    assert merged["long-reason"] == {"harness": "claude", "resets_at": reset, "reason": "R" * RETRY_REASON_BYTES}
    stored = here.read()
    assert set(stored) == set(merged) and all(entry["first"] is None for entry in stored.values())
    assert path.stat().st_size < 64 * 1024  # 50 pauses and a 5 MB reason: a few kilobytes here
    assert not here.turn("junk:0", "a").go  # what was kept of a well-shaped pause still holds


def test_a_shared_document_that_is_not_a_pause_never_stops_a_workers_exchange(project: Any) -> None:
    for doc in (["not", "an", "object"], {"acct": "not a record"}):
        with project.store.write() as tx:
            tx.put_doc(usage_pause.SHARED_DOC, doc)
        usage_pause.share(project)  # a worker's every heartbeat
        with project.store.read() as tx:
            assert tx.get_doc(usage_pause.SHARED_DOC) == {}  # written over with what holds: nothing
