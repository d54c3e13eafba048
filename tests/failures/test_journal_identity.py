"""Journal events have identities: a rescan from any cursor appends nothing twice (issue 30, items 2, 7, 9).

The situations are pi-better-subagents' own (tests/failures.test.mjs): a failure replayed after a
reload, a log rewritten under the scan, outcomes read from structured fields only, a provenance
record of another run, an exact-rule incident recovered once trust returns. The logs are Pi's
``--mode json`` (tests/fixtures/pi/) and Claude Code's stream-json calling corral's shell.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from corral.adapters.harness.claude import ClaudeHarness
from corral.adapters.harness.pi import PiHarness
from corral.domain.attention import GRACE_SECONDS, due
from corral.domain.incidents import FailureState, Label, reduce
from corral.engine.read import notices
from corral.engine.read.notices import pending, receipts_file, record_told, told
from corral.engine.runtime import provenance
from corral.engine.runtime.journal import CURSOR_KIND, JOURNAL, Journal
from corral.engine.runtime.journal_scan import CURSOR, Cursors, commit, scan
from tests.runtime.test_provenance_trust import PROVENANCE, call

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pi"
AT = "2026-12-01T12:00:00Z"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def observe(journal_dir: Path, log: Path, *, final: bool = False, harness: Any = None) -> list[dict[str, Any]]:
    """One scan as a new process makes it (the observer's): a fresh journal and cursor, the scan, the commit."""
    journal, cursors = Journal(journal_dir), Cursors(journal_dir)
    events = scan(log, harness or PiHarness(), "/wt", cursors, at=AT, final=final, evidence_of="turns/1/output.log")
    assert commit(journal, cursors, events, final=final)
    return events


def journal_events(journal_dir: Path) -> list[dict[str, Any]]:
    lines = (journal_dir / JOURNAL).read_bytes().splitlines()
    return [e for e in (json.loads(line) for line in lines) if e.get("kind") != CURSOR_KIND]


def pi_log(tmp_path: Path, fixture: str) -> Path:
    log = tmp_path / "turns" / "1" / "output.log"
    log.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, log)
    return log


def test_a_rescan_with_the_cursor_lost_or_reset_appends_nothing_twice(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    assert [e["kind"] for e in observe(where, log)] == ["failure", "failure"]
    before = journal_events(where)
    (where / CURSOR).unlink()  # lost
    observe(where, log)
    (where / CURSOR).write_text(json.dumps({"serial": 10**9, "logs": {}, "collector": {}}))  # reset to zero
    again = observe(where, log)
    assert [e["kind"] for e in again] == ["failure", "failure"]  # found again from byte 0 …
    assert journal_events(where) == before  # … and taken once
    state = Journal(where).read()
    assert [i.label for i in state.incidents.values()] == [Label.UNCLASSIFIED, Label.UNCLASSIFIED]
    assert state.needs_action == []  # two failures stay two: nothing reads "Action required"


def test_a_stale_cursor_and_a_cursor_lost_before_it_was_saved_append_nothing_twice(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    observe(where, log)
    stale = (where / CURSOR).read_bytes()
    start = {"type": "tool_execution_start", "toolCallId": "t9", "toolName": "bash", "args": {}}
    end = {"type": "tool_execution_end", "toolCallId": "t9", "toolName": "bash", "isError": True}
    with log.open("a") as fh:
        fh.write(json.dumps(start) + "\n" + json.dumps(end) + "\n")
    observe(where, log)
    (where / CURSOR).write_bytes(stale)
    observe(where, log)
    ids = [e["eid"] for e in journal_events(where)]
    assert len(ids) == 3 and len(set(ids)) == 3


def test_the_cursor_is_written_into_the_journal_with_the_events_it_covers(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    observe(where, log)
    last = json.loads((where / JOURNAL).read_bytes().splitlines()[-1])
    assert last["kind"] == CURSOR_KIND and last["logs"][str(log)]["offset"] == log.stat().st_size
    (where / CURSOR).unlink()
    assert Cursors(where).logs[str(log)]["offset"] == log.stat().st_size  # read back from the journal


def test_a_log_replaced_by_an_identical_copy_is_read_on_from_its_cursor(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    observe(where, log)
    copy = log.with_name("copy.log")
    shutil.copy(log, copy)
    os.replace(copy, log)
    assert observe(where, log) == []  # no "truncated or rewritten", nothing scanned again
    assert [e["kind"] for e in journal_events(where)] == ["failure", "failure"]


def test_a_journal_written_before_identities_gets_nothing_appended_by_its_first_rescan(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    events = scan(log, PiHarness(), "/wt", Cursors(None), at=AT, evidence_of="turns/1/output.log")
    where.mkdir()
    old = [{k: v for k, v in e.items() if k != "eid"} for e in events]  # as journals were written before
    (where / JOURNAL).write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in old))
    observe(where, log)  # no cursor anywhere: from byte 0
    assert journal_events(where) == old


def test_a_journal_emptied_is_reported_not_silently_restarted(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "rescan_two_failures.jsonl"), tmp_path / "session"
    observe(where, log)
    (where / JOURNAL).write_bytes(b"")
    gap = "incomplete:journal-emptied"
    assert Journal(where).read().incidents[gap].label is Label.INCOMPLETE
    with log.open("a") as fh:
        fh.write(json.dumps({"type": "message_end", "message": {"role": "assistant", "stopReason": "error"}}) + "\n")
    observe(where, log)  # the next writer says so in the journal itself
    assert journal_events(where)[0]["id"] == gap
    assert gap in Journal(where).read().incidents


def test_pi_tool_ends_are_read_from_their_structured_outcome(tmp_path: Path) -> None:
    log, where = pi_log(tmp_path, "tool_end_outcomes.jsonl"), tmp_path / "session"
    observe(where, log, final=True)
    state = Journal(where).read()
    failed = [i for i in state.incidents.values() if i.category == "tool"]
    assert [i.id for i in failed] == ["tool:turns/1/output.log:nonzero"]  # isError false, exitCode 2
    gaps = [i for i in state.incidents.values() if i.label is Label.INCOMPLETE]
    assert len(gaps) == 1 and "isError" in gaps[0].summary  # no outcome: not a success


def test_a_provenance_record_of_another_turn_lends_no_trust(tmp_path: Path) -> None:
    turn = tmp_path / "turns" / "2"
    turn.mkdir(parents=True)
    provenance.write(turn, {**PROVENANCE, "sandbox": "bwrap"})  # names turn 1
    assert provenance.trust(turn) is provenance.Trust.UNTRUSTED
    task_turn = tmp_path / "tasks" / "t2" / "turns" / "1"
    task_turn.mkdir(parents=True)
    provenance.write(task_turn, {**PROVENANCE, "sandbox": "bwrap"})  # names task t1
    assert provenance.trust(task_turn) is provenance.Trust.UNTRUSTED
    own = tmp_path / "tasks" / "t1" / "turns" / "1"
    own.mkdir(parents=True)
    provenance.write(own, {**PROVENANCE, "sandbox": "bwrap"})
    assert provenance.trust(own) is provenance.Trust.TRUSTED


def test_an_exact_rule_incident_with_an_operation_id_is_recovered_by_its_exact_retry_once_trust_returns(
    tmp_path: Path,
) -> None:
    turn = tmp_path / "turns" / "1"
    turn.mkdir(parents=True)
    (turn / provenance.PROVENANCE).write_text("{not json")
    log = turn / "output.log"
    log.write_bytes(b"\n".join(call(1, "make build --fast", 2, operationId="build")) + b"\n")
    where = tmp_path / "session"
    observe(where, log, final=True, harness=ClaudeHarness())  # unreadable provenance: the exact rule, a note
    state = Journal(where).read()
    assert {i.label for i in state.incidents.values()} == {Label.UNCLASSIFIED, Label.INCOMPLETE}
    provenance.write(turn, {**PROVENANCE, "sandbox": "bwrap"})  # readable again, then a new scan
    with log.open("ab") as fh:
        fh.write(b"\n".join(call(2, "make build --fast", 0, operationId="build")) + b"\n")
    observe(where, log, harness=ClaudeHarness())
    state = Journal(where).read()
    assert {i.id: i.label for i in state.incidents.values() if i.category == "tool"} == {
        "tool:turns/1/output.log:toolu_1": Label.RECOVERED
    }
    assert not state.needs_action  # and the note closed with it


# -- notices ----------------------------------------------------------------------------------------


def failure(key: str, category: str = "supervision", seconds: float = 0) -> dict[str, Any]:
    at = (T0 + timedelta(seconds=seconds)).isoformat()
    return {"kind": "failure", "id": key, "operation": key, "category": category, "summary": key, "at": at}


def test_a_lost_turn_is_told_once_even_when_auto_resume_already_started_the_next() -> None:
    state = reduce(FailureState(), [failure("supervision:lost")])
    # the task works again (auto-resume): no ended turn, but turn 3 was recorded lost
    notice = pending(state, set(), T0, ended=None, lost="lost:3")
    assert notice is not None and notice.kind == "lost" and notice.key == "lost:3"
    assert [i.id for i in notice.incidents] == ["supervision:lost"]
    told_ = {"lost:3", "supervision:lost"}
    assert pending(state, told_, T0 + timedelta(hours=1), ended=None, lost="lost:3") is None


def test_gaps_found_after_a_lost_notice_are_told_at_once_and_once() -> None:
    state = reduce(FailureState(), [failure("supervision:lost")])
    told_ = {"lost:3", "supervision:lost"}
    reduce(state, [{"kind": "incomplete", "id": "incomplete:partial:90", "summary": "cut", "operation": "evidence"}])
    notice = pending(state, told_, T0, ended="lost:3", lost="lost:3")  # resting on the loss: no later notice
    assert notice is not None and [i.id for i in notice.incidents] == ["incomplete:partial:90"]
    assert pending(state, told_ | {"incomplete:partial:90"}, T0, ended="lost:3", lost="lost:3") is None
    # auto-resumed: the running turn's notice at its end tells them, as any running turn's gaps
    assert pending(state, told_, T0, ended=None, lost="lost:3") is None
    end = pending(state, told_, T0, ended="completion:5", lost="lost:3")
    assert end is not None and [i.id for i in end.incidents] == ["incomplete:partial:90"]


def test_a_running_notice_counts_the_incidents_told_before_it() -> None:
    state = reduce(FailureState(), [failure("model:a", "model"), failure("model:b", "model", 30)])
    later = T0 + timedelta(seconds=GRACE_SECONDS + 31)
    notice = due(state, {"attention:model:a", "model:a"}, later)
    assert notice is not None and [i.id for i in notice.incidents] == ["model:b"]
    assert notice.already_told == 1 and "1 told before" in notice.line()


def test_a_receipt_storage_refuses_is_kept_in_memory_and_written_when_storage_takes_it(tmp_path: Path) -> None:
    where = tmp_path / "session"
    where.mkdir()
    state = reduce(FailureState(), [failure("model:a", "model")])
    notice = due(state, set(), T0, ended="completion:1")
    assert notice is not None
    receipts_file(where, "daemon").mkdir()  # storage refuses the receipt
    assert not record_told(where, "daemon", notice, T0)
    assert due(state, told(where, "daemon"), T0, ended="completion:1") is None  # told is told: not again
    receipts_file(where, "daemon").rmdir()
    notices._flush(receipts_file(where, "daemon"))  # the next delivery writes it first
    lines = receipts_file(where, "daemon").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["completion:1"]
    assert "completion:1" in told(where, "daemon")


# -- the property -----------------------------------------------------------------------------------

START = '{{"type":"tool_execution_start","toolCallId":"c{n}","toolName":"bash","args":{{"command":"make {cmd}"}}}}\n'
END = (
    '{{"type":"tool_execution_end","toolCallId":"c{n}","toolName":"bash",'
    '"result":{{"content":[{{"type":"text","text":"{text}"}}]}},"isError":{err}}}\n'
)
MODEL = {
    True: '{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"HTTP 529"}}\n',
    False: '{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"ok"}]}}\n',
}
STEP = hs.one_of(
    hs.tuples(hs.just("call"), hs.integers(0, 2), hs.booleans()),
    hs.tuples(hs.just("model"), hs.booleans()),
    hs.tuples(hs.sampled_from(["scan", "lose", "stale", "reset", "copy"])),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=hs.lists(STEP, max_size=30), trusted=hs.booleans())
def test_any_rescans_leave_each_event_once_and_the_state_of_one_scan(
    tmp_path_factory: Any, steps: list[Any], trusted: bool
) -> None:
    """Trust fixed (a confined run's provenance, or none) and the clock too (``AT``)."""
    base = tmp_path_factory.mktemp("prop")
    log, where = base / "turns" / "1" / "output.log", base / "session"
    log.parent.mkdir(parents=True)
    if trusted:
        provenance.write(log.parent, {**PROVENANCE, "sandbox": "bwrap"})
    log.write_bytes(b"")
    saved: list[bytes] = []
    n = 0
    for step in steps:
        if step[0] == "call":
            n += 1
            text = "FAILED" if step[2] else "ok"
            with log.open("a") as fh:
                fh.write(START.format(n=n, cmd=step[1]) + END.format(n=n, text=text, err=json.dumps(step[2])))
        elif step[0] == "model":
            with log.open("a") as fh:
                fh.write(MODEL[step[1]])
        elif step[0] == "scan":
            observe(where, log)
            saved.append((where / CURSOR).read_bytes())
        elif step[0] == "lose" and (where / CURSOR).exists():
            (where / CURSOR).unlink()
        elif step[0] == "stale" and saved:
            (where / CURSOR).write_bytes(saved[0])
        elif step[0] == "reset" and where.exists():
            (where / CURSOR).write_text(json.dumps({"serial": 10**9 + len(saved), "logs": {}, "collector": {}}))
        elif step[0] == "copy":
            shutil.copy(log, base / "copy.log")
            os.replace(base / "copy.log", log)
    observe(where, log, final=True)
    once = scan(log, PiHarness(), "/wt", Cursors(None), at=AT, final=True, evidence_of="turns/1/output.log")
    held = journal_events(where)
    assert len({e["eid"] for e in held}) == len(held) == len(once)
    assert reduce(FailureState(), held).to_json() == reduce(FailureState(), once).to_json()


# -- a lost turn auto-resumed at once, with real processes -------------------------------------------


def test_a_lost_turn_auto_resumed_at_once_is_told_once_on_each_channel(
    fproj: Any, agent: Any, monkeypatch: Any
) -> None:
    from corral.domain.actors import Actor
    from corral.domain.status import Status
    from corral.engine.operations import notify, turns
    from corral.engine.operations.refresh import settle
    from tests.failures.conftest import kill_supervisor, new_task, reopen, wait_for

    monkeypatch.setenv("CORRAL_AUTO_RESUME", "1")  # the default
    proj = reopen(fproj)
    agent.script([{"init": True}, {"text": "step one done"}, {"sleep": 60}], default=[{"init": True}, {"sleep": 60}])
    task = new_task(proj)
    turns.start(proj, task.ref, actor=Actor.HUMAN)
    log = proj.paths.turn_dir(task.id, 1) / "output.log"
    wait_for(lambda: log.exists() and "step one done" in log.read_text(), 20, "the agent's first step")
    kill_supervisor(proj, task)
    settle(proj)  # found lost, recorded, and resumed at once
    with proj.store.read() as tx:
        now = tx.get_task(task.id)
    assert now is not None and now.status is Status.WORKING  # no resting moment for a lost notice to wait for
    shown: list[Any] = []
    first = notify.for_wait(proj, now, shown.append)
    assert first is not None and first.kind == "lost" and first.key == "lost:2"
    assert [i.id for i in first.incidents] == ["supervision:lost"]
    assert notify.for_wait(proj, now, shown.append) is None and len(shown) == 1  # once
    logged: list[dict[str, Any]] = []
    notify.from_daemon(proj, logged.append)
    assert [d["notice"]["key"] for d in logged] == ["lost:2"]  # each channel its own receipt
    notify.from_daemon(proj, logged.append)
    assert len(logged) == 1


def test_a_receipt_the_daemon_cannot_store_is_logged_kept_and_written_later(
    agent: Any, corral: Any, repo: Path
) -> None:
    from corral.engine.operations import notify
    from corral.engine.project import Project
    from tests.cli.test_notices import _thrice

    _thrice(agent, corral, "hooked")
    corral.ok("start", "hooked", "--wait", "--timeout", "60")
    project = Project.open(repo)
    try:
        with project.store.read() as tx:
            (task,) = tx.tasks()
        assert task.session_id is not None
        receipts = receipts_file(project.paths.journal_dir(task.id, task.session_id), "daemon")
        receipts.mkdir()  # storage refuses the receipt
        logged: list[dict[str, Any]] = []
        assert len(notify.from_daemon(project, logged.append)) == 1
        assert [d["event"] for d in logged] == ["notice", "notice-receipt-unwritten"]
        assert "kept in memory" in logged[1]["message"]
        assert notify.from_daemon(project, logged.append) == []  # told is told, though not yet stored
        receipts.rmdir()
        assert notify.from_daemon(project, logged.append) == []
        assert [json.loads(line)["key"] for line in receipts.read_text().splitlines()] == [logged[0]["notice"]["key"]]
    finally:
        project.close()


def test_a_lost_turn_observed_twice_by_a_restarted_reconciler_is_journaled_once(tmp_path: Path) -> None:
    from corral.domain.incidents import Category, supervision_failure
    from corral.engine.runtime.observer import TurnObserver

    log = pi_log(tmp_path, "rescan_two_failures.jsonl")
    where = tmp_path / "session"
    for seconds in (0, 30):  # it crashed after its journal write, before recording the turn: it looks again
        lost = supervision_failure("lost", Category.SUPERVISION, "turn 1 was lost: the supervisor ended", f"{seconds}")
        TurnObserver(where, log.parent, PiHarness(), "/wt", 1, []).scan(final=True, extra=[lost])
    state = Journal(where).read()
    assert state.incidents["supervision:lost"].failures == 1
    assert [i.failures for i in state.incidents.values() if i.category == "tool"] == [1, 1]


def test_a_large_cursor_is_written_into_the_journal_only_as_often_as_its_events_pay_for(tmp_path: Path) -> None:
    def records(where: Path) -> int:
        return sum(1 for line in (where / JOURNAL).read_bytes().splitlines() if b'"kind": "cursor"' in line)

    for gaps, written in ((0, range(40, 41)), (3000, range(2))):  # a small cursor each batch; a large one seldom
        where = tmp_path / f"s{gaps}"
        journal, cursors = Journal(where), Cursors(where)
        cursors.collector.gaps = {f"oversized:{n:08d}" for n in range(gaps)}  # ~70 KB of cursor
        for n in range(40):
            event = {"kind": "incomplete", "id": f"incomplete:{n}", "operation": "evidence", "summary": "x"}
            assert commit(journal, cursors, [event])
        assert records(where) in written
        assert commit(journal, cursors, [], final=True)  # and at the turn's end, always
        assert json.loads((where / JOURNAL).read_bytes().splitlines()[-1])["kind"] == CURSOR_KIND
